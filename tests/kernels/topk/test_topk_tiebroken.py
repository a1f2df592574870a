"""The tie-broken top-k rule: higher score first, then lower index; masks respected; -1 padding.

Checked against a brute-force Python ranking (sorted() on (-score, index) tuples) over many
random cases with heavy ties, plus hand-written tie cases.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mxserve.kernels.topk import BACKENDS, topk_tiebroken

pytestmark = pytest.mark.parametrize("backend", BACKENDS)


def brute_force(scores: list[list[float]], k: int, valid: list[list[bool]]) -> list[list[int]]:
    out = []
    for row, ok in zip(scores, valid, strict=True):
        ranked = sorted((-s, j) for j, s in enumerate(row) if ok[j])
        chosen = [j for _, j in ranked[:k]]
        out.append(chosen + [-1] * (k - len(chosen)))
    return out


def test_all_zero_scores_pick_lowest_indices(backend):
    scores = torch.zeros(3, 10)
    got = topk_tiebroken(scores, 4, backend=backend)
    assert got.tolist() == [[0, 1, 2, 3]] * 3
    assert got.dtype == torch.int64


def test_repeated_values_tie_by_index(backend):
    scores = torch.tensor([[1.0, 3.0, 1.0, 3.0, 2.0, 3.0, 1.0]])
    assert topk_tiebroken(scores, 5, backend=backend).tolist() == [[1, 3, 5, 4, 0]]


def test_negative_zero_ties_with_zero(backend):
    scores = torch.tensor([[-0.0, 0.0, -1.0, -0.0, 0.0]])
    assert topk_tiebroken(scores, 3, backend=backend).tolist() == [[0, 1, 3]]


def test_infinities_rank_but_masked_never_selected(backend):
    scores = torch.tensor([[float("-inf"), 5.0, float("inf"), float("nan"), 0.0]])
    mask = torch.tensor([[True, True, True, False, False]])
    assert topk_tiebroken(scores, 5, valid_mask=mask, backend=backend).tolist() == [[2, 1, 0, -1, -1]]


def test_num_valid_is_a_causal_prefix_and_pads(backend):
    scores = torch.tensor([[9.0, 1.0, 1.0, 8.0], [0.0, 0.0, 0.0, 0.0], [1.0, 2.0, 3.0, 4.0]])
    got = topk_tiebroken(scores, 3, num_valid=torch.tensor([2, 0, 4]), backend=backend)
    assert got.tolist() == [[0, 1, -1], [-1, -1, -1], [3, 2, 1]]


def test_k_larger_than_candidates_and_empty_shapes(backend):
    scores = torch.tensor([[0.5, 0.5]])
    assert topk_tiebroken(scores, 5, backend=backend).tolist() == [[0, 1, -1, -1, -1]]
    assert topk_tiebroken(torch.zeros(0, 7), 3, backend=backend).shape == (0, 3)
    assert topk_tiebroken(torch.zeros(2, 0), 2, backend=backend).tolist() == [[-1, -1], [-1, -1]]
    assert topk_tiebroken(torch.zeros(2, 4), 0, backend=backend).shape == (2, 0)


def test_nan_on_valid_candidate_raises(backend):
    with pytest.raises(ValueError, match="NaN"):
        topk_tiebroken(torch.tensor([[1.0, float("nan")]]), 1, backend=backend)


def test_selection_is_stable_when_candidates_are_appended(backend):
    # The bug this rule exists for: the selection over the first n candidates must not change
    # when more (masked) candidates are present, e.g. prefill vs decode (spec §3.4.4).
    g = torch.Generator().manual_seed(1)
    scores = torch.randint(0, 3, (1, 64), generator=g).float()
    ref = topk_tiebroken(scores[:, :40], 16, backend=backend)
    for extra in (41, 50, 64):
        got = topk_tiebroken(scores[:, :extra], 16, num_valid=torch.tensor([40]), backend=backend)
        assert torch.equal(got, ref)


def test_many_random_heavy_tie_cases_match_brute_force(backend):
    g = torch.Generator().manual_seed(0)
    for case in range(200):
        n = int(torch.randint(1, 6, (1,), generator=g))
        c = int(torch.randint(0, 40, (1,), generator=g))
        k = int(torch.randint(0, 45, (1,), generator=g))
        levels = int(torch.randint(1, 5, (1,), generator=g))  # few distinct values -> heavy ties
        scores = torch.randint(-levels, levels + 1, (n, c), generator=g).float() * 0.5
        mask = torch.rand(n, c, generator=g) < 0.8
        num_valid = torch.randint(0, c + 2, (n,), generator=g)
        got = topk_tiebroken(scores, k, valid_mask=mask, num_valid=num_valid, backend=backend)
        valid = mask & (torch.arange(c)[None, :] < num_valid[:, None])
        want = brute_force(scores.tolist(), k, valid.tolist())
        assert got.tolist() == want, f"case {case}: {scores=}, {valid=}, {k=}"


@settings(max_examples=150, deadline=None)
@given(
    rows=st.lists(
        st.lists(
            st.sampled_from([0.0, -0.0, 1.0, -1.0, 2.5, float("inf"), float("-inf")]), min_size=0, max_size=12
        ),
        min_size=1,
        max_size=4,
    ).filter(lambda r: len({len(x) for x in r}) == 1),
    k=st.integers(0, 14),
    data=st.data(),
)
def test_hypothesis_matches_brute_force(backend, rows, k, data):
    c = len(rows[0])
    valid = [data.draw(st.lists(st.booleans(), min_size=c, max_size=c)) for _ in rows]
    scores = torch.tensor(rows, dtype=torch.float32).reshape(len(rows), c)
    got = topk_tiebroken(
        scores, k, valid_mask=torch.tensor(valid, dtype=torch.bool).reshape(len(rows), c), backend=backend
    )
    assert got.tolist() == brute_force(rows, k, valid)
