"""Verdict rules on generated tokens: each rule trips on the output it exists for, and not on text."""

from __future__ import annotations

import pytest

from mxserve.verify.verdict import Continuation, judge_continuation

SPECIAL = frozenset({0, 1, 2, 3})
HEALTHY = list(range(100, 140))


def judge(tokens, text="some text", asked=None, **kw):
    return judge_continuation(Continuation(tokens, text, asked or len(tokens), **kw), bos_id=0, special_ids=SPECIAL)


def test_healthy_output_passes():
    assert judge(HEALTHY[:32]) == []


@pytest.mark.parametrize(("tokens", "text", "asked", "expect"), [
    ([], "", 32, "empty output"),
    (HEALTHY[:20], "x", 32, "20 tokens generated, 32 asked"),
    (HEALTHY[:8], "x", 8, "only 8 tokens asked"),
    ([HEALTHY[0], *[0] * 31], "x", 32, "BOS"),
    ([*HEALTHY[:30], 1, 1], "x", 32, "run of 2 special tokens"),
    ([*HEALTHY[:26], *[7] * 6], "x", 32, "repeated 6 times"),
    ([*HEALTHY[:14], *[5, 6, 7] * 6], "x", 32, "loop of period 3"),
    (HEALTHY[:32], "   ", 32, "empty or whitespace"),
])
def test_each_rule_trips(tokens, text, asked, expect):
    failures = judge(tokens, text, asked)
    assert any(expect in f for f in failures), failures


def test_a_short_recovered_repeat_is_not_a_loop():
    tokens = [*HEALTHY[:4], *[5, 6, 7] * 4, *HEALTHY[10:26]]  # 12 repeating tokens, then recovers
    assert judge(tokens) == []


def test_non_finite_logprob_and_greedy_rank():
    tokens = HEALTHY[:32]
    failures = judge(tokens, logprobs=[-1.0] * 31 + [float("nan")], ranks=[1] * 30 + [2, 1])
    assert any("non-finite logprob at token 31" in f for f in failures)
    assert any("greedy token 30 has rank 2" in f for f in failures)
