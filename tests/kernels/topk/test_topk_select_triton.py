"""The radix-select top-k kernel (`topk_tiebroken_triton_select`) against the twin, bit for bit.

Interpreted on the CPU (run on CUDA where there is one). Every path the kernel has: rows short
enough to be sorted whole; rows that need the radix bounds (more candidates than CAP = 512 for
k <= 256), one level for smooth scores, the catch-all bin for a wide dynamic range, many levels
for scores a few ulps apart, the tie case (the threshold bin is one value, kept by lowest
index); the sort order step (one program per row) and the rank order step (P programs per row,
ties spread across their slices). Plus the edge cases of the contract and batch invariance.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from mxserve.kernels.topk import topk_tiebroken_ref
from mxserve.kernels.topk import triton as launcher
from mxserve.kernels.topk.triton import select_launch_params, topk_tiebroken_triton_select

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def scores_of(kind: str, n: int, c: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if kind == "randn":
        s = torch.randn(n, c, generator=g)
    elif kind == "ties":  # 7 values, -0.0 and 0.0 mixed: ties everywhere, across program slices
        s = torch.randint(-3, 4, (n, c), generator=g).float() * 0.5
        s[s == 0] = torch.where(torch.rand(int((s == 0).sum()), generator=g) < 0.5, -0.0, 0.0)
    elif kind == "equal":
        s = torch.zeros(n, c)
    elif kind == "wide":  # 11 decades: the threshold lies far below the best score
        s = torch.exp(torch.randn(n, c, generator=g) * 8)
    elif kind == "ulps":  # 50 values one ulp apart: every radix level down to single values
        s = 1.0 + torch.randint(0, 50, (n, c), generator=g).float() * 1.1920929e-07
    elif kind == "neg_huge":  # best score near -fp32 max: level-1 bins would pass 2^32
        s = -3.0e38 + torch.rand(n, c, generator=g) * 1.0e37
    elif kind == "mixed":
        s = torch.randn(n, c, generator=g)
        r = torch.rand(n, c, generator=g)
        s[r < 0.3] = 0.0
        s[r < 0.15] = -0.0
        s[(r > 0.5) & (r < 0.52)] = float("inf")
        s[r > 0.98] = float("-inf")
    else:
        raise AssertionError(kind)
    return s.to(DEVICE)


def assert_identical(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    if not torch.equal(got, want):
        bad = (got != want).nonzero()[:4].tolist()
        raise AssertionError(f"{what}: first mismatches (row, slot): {bad}; "
                             f"got {[int(got[r, j]) for r, j in bad]}, want {[int(want[r, j]) for r, j in bad]}")


KINDS = ["randn", "ties", "equal", "wide", "ulps", "neg_huge", "mixed"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("c,k,programs", [(40, 8, 1), (600, 20, 1), (3000, 64, 1), (3000, 256, 1), (3000, 64, 8),
                                          (1111, 300, 16), (700, 600, 2)])
def test_identical_to_twin(kind, c, k, programs):
    scores = scores_of(kind, 3, c, seed=c + k)
    num_valid = torch.tensor([c, c // 2 + 1, max(c - 7, 0)], device=DEVICE)
    want = topk_tiebroken_ref(scores, k, num_valid=num_valid)
    got = topk_tiebroken_triton_select(scores, k, num_valid=num_valid, programs_per_row=programs)
    assert_identical(got, want, f"{kind} c={c} k={k} P={programs}")


@pytest.mark.parametrize("programs", [1, 4])
def test_mask_and_num_valid_together(programs):
    g = torch.Generator().manual_seed(3)
    scores = scores_of("ties", 4, 2100, seed=5)
    mask = (torch.rand(4, 2100, generator=g) < 0.7).to(DEVICE)
    num_valid = torch.tensor([2100, 1500, 3, 0], device=DEVICE)
    for k in (1, 50, 200):
        want = topk_tiebroken_ref(scores, k, valid_mask=mask, num_valid=num_valid)
        got = topk_tiebroken_triton_select(scores, k, valid_mask=mask, num_valid=num_valid, programs_per_row=programs)
        assert_identical(got, want, f"k={k} P={programs}")


def test_edge_cases():
    sel = topk_tiebroken_triton_select
    one = torch.tensor([[2.5]], device=DEVICE)
    assert sel(one, 1).tolist() == [[0]]
    assert sel(one, 3).tolist() == [[0, -1, -1]]  # k > C
    assert sel(torch.zeros(2, 0, device=DEVICE), 2).tolist() == [[-1, -1], [-1, -1]]
    assert sel(torch.zeros(0, 5, device=DEVICE), 2).shape == (0, 2)
    assert sel(torch.zeros(2, 5, device=DEVICE), 0).shape == (2, 0)
    # C not a multiple of 32, num_valid = 0, past C, and exactly C
    scores = scores_of("ties", 4, 45, seed=1)
    num_valid = torch.tensor([0, 45, 99, 17], device=DEVICE)
    for k in (5, 45, 60):
        want = topk_tiebroken_ref(scores, k, num_valid=num_valid)
        assert_identical(sel(scores, k, num_valid=num_valid), want, f"{k=}")  # int64 num_valid, read as is
        assert_identical(sel(scores, k, num_valid=num_valid.int()), want, f"{k=} int32")
        mask_t = (scores.T > -1).contiguous().T  # a bool mask with a non-unit last stride
        assert_identical(sel(scores, k, valid_mask=mask_t, num_valid=num_valid),
                         topk_tiebroken_ref(scores, k, valid_mask=mask_t, num_valid=num_valid), f"{k=} strided mask")
    # all equal and every row invalid: lowest indices first / all padding
    assert sel(torch.zeros(2, 700, device=DEVICE), 4).tolist() == [[0, 1, 2, 3]] * 2
    none = torch.zeros(2, 700, dtype=torch.int64, device=DEVICE)
    assert sel(torch.randn(2, 700, device=DEVICE), 3, num_valid=none[:, 0]).tolist() == [[-1, -1, -1]] * 2


def test_negative_zero_and_infinities():
    scores = torch.tensor([[-0.0, 0.0, -1.0, float("inf"), -0.0, float("-inf"), 0.0]], device=DEVICE)
    for p in (1, 2):
        assert topk_tiebroken_triton_select(scores, 7, programs_per_row=p).tolist() == [[3, 0, 1, 4, 6, 2, 5]]


def test_nan_ranks_by_its_bits():
    # the twin raises on a NaN candidate; the kernel cannot without a host sync, so it ranks one
    # deterministically: +NaN above +inf, -NaN below -inf (as the legacy kernel does)
    pos_nan, neg_nan = float("nan"), -float("nan")
    scores = torch.tensor([[1.0, neg_nan, pos_nan, float("-inf"), float("inf")]], device=DEVICE)
    assert torch.isnan(scores).sum() == 2 and scores[0, 1].view(torch.int32) < 0
    assert topk_tiebroken_triton_select(scores, 5).tolist() == [[2, 4, 0, 3, 1]]


def test_batch_invariance_across_paths():
    # a row's indices must not depend on the batch: alone (sort, one program) or among many rows
    # with P programs each (rank), with different num_valid per row
    scores = scores_of("ties", 6, 2500, seed=11)
    num_valid = torch.tensor([2500, 2400, 900, 513, 2, 2500], device=DEVICE)
    batch = topk_tiebroken_triton_select(scores, 100, num_valid=num_valid, programs_per_row=8)
    for r in range(6):
        alone = topk_tiebroken_triton_select(scores[r:r + 1], 100, num_valid=num_valid[r:r + 1], programs_per_row=1)
        assert torch.equal(alone[0], batch[r]), f"row {r}"


def test_launch_params_from_shapes(monkeypatch):
    monkeypatch.setattr(launcher, "_num_sms", lambda index: 132)
    cuda = torch.device("cuda", 0)
    # one row: 64 rank programs of 16 members; 8 rows: 16 each; 64 rows: too few SMs, one sort each
    assert [select_launch_params(r, 16384, 512, cuda)["P"] for r in (1, 8, 64)] == [64, 16, 1]
    assert select_launch_params(1, 1024, 512, cuda)["BLOCK_C"] == select_launch_params(1, 1024, 512, cuda)["CAP"]
    for rows in (1, 2, 3, 8, 16, 33, 64, 200):
        lp = select_launch_params(rows, 16384, 512, cuda)
        assert lp["P"] == 1 or lp["CAP"] // lp["P"] <= 64, lp  # rank slices stay small
        assert rows * lp["P"] <= 132 or lp["P"] == 1, lp
    with pytest.raises(ValueError, match="programs_per_row"):
        select_launch_params(1, 1024, 512, cuda, programs_per_row=3)
    with pytest.raises(ValueError, match="candidates"):
        topk_tiebroken_triton_select(torch.zeros(1, 16385, device=DEVICE), 4)


def test_legacy_off_switch(monkeypatch):
    calls = []
    real = launcher.topk_tiebroken_triton_legacy
    monkeypatch.setattr(launcher, "topk_tiebroken_triton_legacy", lambda *a: calls.append(1) or real(*a))
    scores = scores_of("ties", 2, 50, seed=2)
    want = topk_tiebroken_ref(scores, 9)
    assert torch.equal(launcher.topk_tiebroken_triton(scores, 9), want) and calls == []
    monkeypatch.setenv(launcher.LEGACY_ENV, "1")
    assert torch.equal(launcher.topk_tiebroken_triton(scores, 9), want) and calls == [1]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("rows", [1, 64])  # rank programs per row at 1, one sort per row at 64
def test_cuda_graph_replay_with_new_scores(rows):
    # capture-safe: no host sync, grid and scratch from shapes; the replay reads whatever the
    # captured input buffers hold and must still match the twin (and the eager call)
    scores = torch.randn(rows, 16384, device="cuda")
    num_valid = torch.randint(1, 16385, (rows,), device="cuda")
    topk_tiebroken_triton_select(scores, 512, num_valid=num_valid)  # compile outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = topk_tiebroken_triton_select(scores, 512, num_valid=num_valid)
    for seed in range(3):
        scores.copy_(scores_of("ties" if seed else "randn", rows, 16384, seed=seed))
        num_valid.copy_(torch.randint(0, 16385, (rows,), device="cuda"))
        graph.replay()
        assert_identical(out, topk_tiebroken_ref(scores, 512, num_valid=num_valid), f"replay {seed}")
