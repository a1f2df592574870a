"""Logprobs: top-n against log_softmax + topk, stable-sort ranks with ties, prompt logprobs
aligned with the next prompt token, and the plain-Python records later layers serialise."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from mxserve.engine.logprobs import (
    PositionLogprobs,
    TokenLogprob,
    compute_logprobs,
    gather_logprobs,
    prompt_logprobs,
)
from mxserve.engine.sampling_params import MAX_NUM_LOGPROBS


def _logits(rows: int, vocab: int, seed: int = 0) -> torch.Tensor:
    return 3.0 * torch.randn(rows, vocab, generator=torch.Generator().manual_seed(seed))


def test_compute_logprobs_is_fp32_log_softmax():
    logits = _logits(3, 40).to(torch.bfloat16)
    out = compute_logprobs(logits)
    assert out.dtype == torch.float32
    assert torch.equal(out, torch.log_softmax(logits.float(), dim=-1))


@pytest.mark.parametrize("num_top", [0, 1, 5, MAX_NUM_LOGPROBS])
def test_top_n_matches_log_softmax_topk(num_top):
    logits = _logits(6, 300, seed=1)  # continuous values: no ties, so topk's order is defined
    lps = compute_logprobs(logits)
    chosen = torch.randint(0, 300, (6,), generator=torch.Generator().manual_seed(2))
    out = gather_logprobs(lps, chosen, num_top)
    values, ids = torch.topk(torch.log_softmax(logits, dim=-1), num_top, dim=-1)
    assert out.top_logprobs.shape == out.top_token_ids.shape == (6, num_top)
    assert torch.equal(out.top_token_ids, ids) and torch.equal(out.top_logprobs, values)
    assert torch.equal(out.logprobs, lps[torch.arange(6), chosen])
    expected_ranks = (lps > lps[torch.arange(6), chosen][:, None]).sum(dim=-1) + 1
    assert torch.equal(out.ranks, expected_ranks)


def test_ties_are_ordered_by_lowest_id_and_rank_agrees_with_top_list():
    logits = torch.tensor([[0.0, 2.0, 1.0, 2.0, 2.0, -1.0]])
    lps = compute_logprobs(logits)
    for token, rank in [(1, 1), (3, 2), (4, 3), (2, 4), (0, 5), (5, 6)]:
        out = gather_logprobs(lps, torch.tensor([token]), 6)
        assert out.top_token_ids[0].tolist() == [1, 3, 4, 2, 0, 5]
        assert out.ranks.item() == rank
        assert out.top_token_ids[0, rank - 1].item() == token


def test_to_positions_trims_each_row_and_serialises():
    lps = compute_logprobs(_logits(3, 50, seed=3))
    chosen = lps.argmax(dim=-1)
    out = gather_logprobs(lps, chosen, 4)
    records = out.to_positions([4, 0, 2])
    assert [len(r.top) for r in records] == [4, 0, 2]
    first = records[0]
    assert isinstance(first, PositionLogprobs) and first.rank == 1 and first.top[0].token_id == first.token_id
    assert [t.rank for t in first.top] == [1, 2, 3, 4]
    assert all(isinstance(t, TokenLogprob) and isinstance(t.logprob, float) for t in first.top)
    plain = dataclasses.asdict(first)  # what engine outputs / the OpenAI layer serialise
    assert set(plain) == {"token_id", "logprob", "rank", "top"} and plain["top"][0]["rank"] == 1
    with pytest.raises(ValueError, match="num_top 5 outside"):
        out.to_positions([5, 0, 0])
    with pytest.raises(ValueError, match="entries for 3 rows"):
        out.to_positions([1])


def test_prompt_logprobs_align_with_the_next_prompt_token():
    prompt = [5, 17, 3, 3, 40, 0, 22]
    logits = _logits(len(prompt), 64, seed=4)
    records = prompt_logprobs(logits, prompt, num_top=3)
    assert len(records) == len(prompt) and records[0] is None
    lps = torch.log_softmax(logits, dim=-1)
    for i in range(1, len(prompt)):
        record = records[i]
        assert record is not None and record.token_id == prompt[i]
        assert record.logprob == lps[i - 1, prompt[i]].item()  # row i-1 predicts token i
        assert record.rank == int((lps[i - 1] > lps[i - 1, prompt[i]]).sum()) + 1
        assert [t.token_id for t in record.top] == torch.topk(lps[i - 1], 3).indices.tolist()


def test_prompt_logprobs_edge_cases():
    assert prompt_logprobs(torch.zeros(1, 8), [3], num_top=2) == [None]
    assert prompt_logprobs(torch.zeros(0, 8), [], num_top=2) == []
    records = prompt_logprobs(torch.zeros(2, 8), torch.tensor([1, 2]), num_top=0)
    assert records[1] is not None and records[1].top == () and records[1].rank == 3  # uniform: ties by id
    with pytest.raises(ValueError, match="T = len"):
        prompt_logprobs(torch.zeros(3, 8), [1, 2], num_top=1)


@pytest.mark.parametrize(
    ("logprobs", "token_ids", "num_top", "match"),
    [
        (torch.zeros(2, 8, dtype=torch.float64), torch.zeros(2, dtype=torch.int64), 1, "fp32"),
        (torch.zeros(2, 8), torch.zeros(3, dtype=torch.int64), 1, "token_ids must be"),
        (torch.zeros(2, 8), torch.zeros(2, dtype=torch.int32), 1, "token_ids must be"),
        (torch.zeros(2, 8), torch.tensor([0, 8]), 1, r"outside \[0, 8\)"),
        (torch.zeros(2, 8), torch.tensor([-1, 0]), 1, r"outside \[0, 8\)"),
        (torch.zeros(2, 8), torch.zeros(2, dtype=torch.int64), MAX_NUM_LOGPROBS + 1, "num_top must be"),
        (torch.zeros(2, 8), torch.zeros(2, dtype=torch.int64), -1, "num_top must be"),
    ],
)
def test_bad_inputs_raise(logprobs, token_ids, num_top, match):
    with pytest.raises(ValueError, match=match):
        gather_logprobs(logprobs, token_ids, num_top)
