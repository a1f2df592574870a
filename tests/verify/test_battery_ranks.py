"""The battery asks min_tokens = max_tokens, so a held-back EOS must not count as a greedy miss."""

from mxserve.engine.outputs import TokenLogprobs
from mxserve.verify.battery import _rank_among_allowed

EOS = 1


def test_a_pick_below_a_held_back_eos_is_rank_one_among_the_allowed():
    assert _rank_among_allowed(TokenLogprobs(7, -1.2, 2, {EOS: -0.4}), EOS) == 1


def test_other_rank_misses_still_count():
    assert _rank_among_allowed(TokenLogprobs(7, -1.2, 2, {9: -0.4}), EOS) == 2
    assert _rank_among_allowed(TokenLogprobs(7, -2.2, 3, {EOS: -0.4}), EOS) == 2
    assert _rank_among_allowed(TokenLogprobs(7, -0.2, 1, {7: -0.2}), EOS) == 1
