"""The rank top-k path (`topk_tiebroken_triton_rank`: bound kernel + rank kernel) against the twin,
bit for bit.

Interpreted on the CPU (run on CUDA where there is one). The paths: rows ranked in place (FULL);
rows that go through the bound kernel, with the sampled bound taken (random scores) or the exact
radix bounds instead (ties everywhere, all equal, scores a few ulps apart, 11 decades), the tie
case (S ends inside one value: its lowest indices), S compacted by several programs a row (chunk
bases), ranked in [JB, MB] tiles or with scalar j, with fp32 or uint32 keys; masks, num_valid,
edge cases, NaN/-0.0/inf, batch invariance; the bound kernel's own contract (S in index order, a
superset of the winners, its header); launch parameters; the kernel switch; CUDA-graph replay.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from tests.kernels.topk.test_topk_select_triton import DEVICE, assert_identical, scores_of

from mxserve.kernels.topk import topk_tiebroken_ref
from mxserve.kernels.topk import triton as launcher
from mxserve.kernels.topk.triton import _bound_rows, _checked, rank_launch_params, topk_tiebroken_triton_rank

# (label, C, k, overrides): FULL in place; S in tiles (4 programs, 2 chunks a row); S with scalar j
# (128 members on 4 warps, 32-key chunks); S forced on a row that fits CAP (the sampled bound cuts it)
PATHS = [
    ("full", 300, 100, {"programs_per_row": 3}),
    ("s-tiles", 3000, 64, {"programs_per_row": 4, "chunks_per_row": 2}),
    ("s-scalar", 3000, 64, {"programs_per_row": 2, "members": 128, "block_j": 32, "chunks_per_row": 4}),
    ("s-short", 700, 200, {"bound": True, "programs_per_row": 3}),
]
KINDS = ["randn", "ties", "equal", "ulps", "wide", "mixed"]
# the bound kernel's tiled path sees every kind; the scalar, in-place and forced-bound paths a few
# (the suite's time: the rank path is opt-in, slower than select on the H200 at many rows)
CASES = [(kind, *path) for path in PATHS for kind in KINDS
         if path[0] == "s-tiles" or kind in ("ties", "mixed") or (path[0] == "s-scalar" and kind == "ulps")]


@pytest.mark.parametrize("kind,label,c,k,overrides", CASES, ids=[f"{c[1]}-{c[0]}" for c in CASES])
def test_identical_to_twin(kind, label, c, k, overrides):
    scores = scores_of(kind, 3, c, seed=c + k)
    num_valid = torch.tensor([c, c // 2 + 1, max(c - 7, 0)], device=DEVICE)
    want = topk_tiebroken_ref(scores, k, num_valid=num_valid)
    for use_float in (True, False) if label != "full" else (True,):
        got = topk_tiebroken_triton_rank(scores, k, num_valid=num_valid, use_float=use_float, **overrides)
        assert_identical(got, want, f"{kind} {label} float={use_float}")


@pytest.mark.parametrize("c,overrides", [(300, {}), (2100, {"programs_per_row": 3, "chunks_per_row": 2})])
def test_mask_and_num_valid_together(c, overrides):
    g = torch.Generator().manual_seed(3)
    scores = scores_of("ties", 4, c, seed=5)
    mask = (torch.rand(4, c, generator=g) < 0.7).to(DEVICE)
    num_valid = torch.tensor([c, c // 2, 3, 0], device=DEVICE)
    for k in (1, 50, 200):
        want = topk_tiebroken_ref(scores, k, valid_mask=mask, num_valid=num_valid)
        got = topk_tiebroken_triton_rank(scores, k, valid_mask=mask, num_valid=num_valid, **overrides)
        assert_identical(got, want, f"{c=} {k=}")


def test_edge_cases():
    rank = topk_tiebroken_triton_rank
    one = torch.tensor([[2.5]], device=DEVICE)
    assert rank(one, 1).tolist() == [[0]]
    assert rank(one, 3).tolist() == [[0, -1, -1]]  # k > C
    assert rank(one, 3, bound=True).tolist() == [[0, -1, -1]]
    assert rank(torch.zeros(2, 0, device=DEVICE), 2).tolist() == [[-1, -1], [-1, -1]]
    assert rank(torch.zeros(0, 5, device=DEVICE), 2).shape == (0, 2)
    assert rank(torch.zeros(2, 5, device=DEVICE), 0).shape == (2, 0)
    scores = scores_of("ties", 4, 45, seed=1)  # C not a multiple of 32; num_valid 0, past C, exactly C
    num_valid = torch.tensor([0, 45, 99, 17], device=DEVICE)
    for k in (5, 45, 60):
        want = topk_tiebroken_ref(scores, k, num_valid=num_valid)
        assert_identical(rank(scores, k, num_valid=num_valid), want, f"{k=}")  # int64 num_valid, read as is
        assert_identical(rank(scores, k, num_valid=num_valid.int(), bound=True), want, f"{k=} int32, bound")
        mask_t = (scores.T > -1).contiguous().T  # a bool mask with a non-unit last stride
        assert_identical(rank(scores, k, valid_mask=mask_t, num_valid=num_valid),
                         topk_tiebroken_ref(scores, k, valid_mask=mask_t, num_valid=num_valid), f"{k=} strided mask")
    none = torch.zeros(2, 700, dtype=torch.int64, device=DEVICE)
    assert rank(torch.randn(2, 700, device=DEVICE), 3, num_valid=none[:, 0]).tolist() == [[-1, -1, -1]] * 2


@pytest.mark.parametrize("bound", [False, True])
def test_negative_zero_infinities_and_nan(bound):
    scores = torch.tensor([[-0.0, 0.0, -1.0, float("inf"), -0.0, float("-inf"), 0.0]], device=DEVICE)
    assert topk_tiebroken_triton_rank(scores, 7, bound=bound).tolist() == [[3, 0, 1, 4, 6, 2, 5]]
    # the twin raises on a NaN candidate; the kernels cannot without a host sync, so they rank one
    # by its bits: +NaN above +inf, -NaN below -inf (as the select and legacy kernels do)
    pos_nan, neg_nan = float("nan"), -float("nan")
    scores = torch.tensor([[1.0, neg_nan, pos_nan, float("-inf"), float("inf")]], device=DEVICE)
    assert torch.isnan(scores).sum() == 2 and scores[0, 1].view(torch.int32) < 0
    assert topk_tiebroken_triton_rank(scores, 5, bound=bound).tolist() == [[2, 4, 0, 3, 1]]


def test_batch_invariance_across_launches():
    # a row's indices must not depend on the batch or the launch shape: alone with one program,
    # or among rows with several programs and chunks a row, in fp32 or uint32 keys
    scores = scores_of("mixed", 5, 1500, seed=11)
    num_valid = torch.tensor([1500, 1400, 900, 513, 2], device=DEVICE)
    batch = topk_tiebroken_triton_rank(scores, 100, num_valid=num_valid, programs_per_row=5, chunks_per_row=4)
    for r in range(5):
        alone = topk_tiebroken_triton_rank(scores[r:r + 1], 100, num_valid=num_valid[r:r + 1], programs_per_row=1,
                                           use_float=r % 2 == 0)
        assert torch.equal(alone[0], batch[r]), f"row {r}"


def test_bound_kernel_contract():
    # S: strictly increasing indices, a superset of the winners, |S| and kk in the header; on
    # random rows the sampled bound holds (|S| well under CAP, fp32 keys); on an all-equal row
    # the tie case keeps exactly the kk lowest indices
    c, k = 4000, 64
    scores = torch.cat([scores_of("randn", 2, c, seed=2), scores_of("equal", 1, c, seed=0)])
    num_valid = torch.tensor([c, 3000, c], device=DEVICE)
    bd = rank_launch_params(3, c, k, scores.device, chunks_per_row=4)["bound"]
    s, mask, nv = _checked(scores, k, None, num_valid, launcher.SELECT_MAX_CANDIDATES)
    head, sidx, skey = _bound_rows(s, mask, nv, k, bd, {"HAS_MASK": False, "HAS_NUM": True})
    want = topk_tiebroken_ref(scores, k, num_valid=num_valid)
    for r in range(3):
        n_s, kk, is_float = (int(x) for x in head[r, :3])
        members = sidx[r, :n_s].long()
        assert kk == k and kk <= n_s <= bd["CAP"], (r, n_s, kk)
        assert bool((members[1:] > members[:-1]).all()), f"row {r}: S not in index order"
        assert set(want[r].tolist()) <= set(members.tolist()), f"row {r}: a winner missing from S"
        if r < 2:
            assert is_float == 1 and n_s <= 2 * kk, (r, n_s, is_float)  # the sampled bound took effect
            assert float(skey[r, :n_s].view(torch.float32).min()) == 0.0  # keys relative to the row's best
    assert head[2, 0] == k and sidx[2, :k].tolist() == list(range(k))


def test_launch_params_from_shapes(monkeypatch):
    monkeypatch.setattr(launcher, "_num_sms", lambda index: 132)
    cuda = torch.device("cuda", 0)
    lp = rank_launch_params(1, 1024, 512, cuda)  # the row fits CAP: one launch, 128 programs of 8
    assert lp["bound"] is None and (lp["rank"]["P"], lp["rank"]["MB"]) == (128, 8)
    lp = rank_launch_params(1, 16384, 512, cuda)  # 16 bound programs of 1024 keys; ranks in tiles
    assert (lp["bound"]["Q"], lp["bound"]["CHUNK"], lp["rank"]["SCALAR_J"]) == (16, 1024, False)
    lp = rank_launch_params(64, 16384, 512, cuda)  # many rows: 2 chunks a row, scalar-j ranks
    assert (lp["bound"]["Q"], lp["rank"]["SCALAR_J"], lp["rank"]["MB"]) == (2, True, 128)
    assert rank_launch_params(64, 1024, 512, cuda)["bound"] is not None  # 64 rows that fit CAP: bound
    with pytest.raises(ValueError, match="members"):
        rank_launch_params(1, 1024, 512, cuda, members=3)
    with pytest.raises(ValueError, match="bound kernel"):
        rank_launch_params(1, 16384, 512, cuda, bound=False)


def test_kernel_switch(monkeypatch):
    calls = []
    real = launcher.topk_tiebroken_triton_rank
    monkeypatch.setattr(launcher, "topk_tiebroken_triton_rank", lambda *a: calls.append(1) or real(*a))
    scores = scores_of("ties", 2, 50, seed=2)
    want = topk_tiebroken_ref(scores, 9)
    monkeypatch.setenv(launcher.KERNEL_ENV, "rank")
    assert torch.equal(launcher.topk_tiebroken_triton(scores, 9), want) and calls == [1]
    monkeypatch.setenv(launcher.KERNEL_ENV, "select")
    assert torch.equal(launcher.topk_tiebroken_triton(scores, 9), want) and calls == [1]
    monkeypatch.setenv(launcher.KERNEL_ENV, "auto")  # the default: rank for few rows with a large k only
    monkeypatch.setattr(launcher, "RANK_MIN_K", 9)
    assert torch.equal(launcher.topk_tiebroken_triton(scores, 9), want) and calls == [1, 1]
    assert torch.equal(launcher.topk_tiebroken_triton(scores, 8), topk_tiebroken_ref(scores, 8)) and calls == [1, 1]
    monkeypatch.setattr(launcher, "RANK_MAX_ROWS", 1)
    assert torch.equal(launcher.topk_tiebroken_triton(scores, 9), want) and calls == [1, 1]
    monkeypatch.setenv(launcher.KERNEL_ENV, "sorted")
    with pytest.raises(ValueError, match="MXSERVE_TOPK_KERNEL"):
        launcher.topk_tiebroken_triton(scores, 9)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("rows,c", [(1, 1024), (8, 1024), (1, 16384), (64, 16384)])
def test_cuda_graph_replay_with_new_scores(rows, c):
    # capture-safe: no host sync, grids and scratch from shapes; each replay reads whatever the
    # captured buffers hold (random, tied, equal scores; new num_valid) and must match the twin
    scores = torch.randn(rows, c, device="cuda")
    num_valid = torch.full((rows,), c, device="cuda")
    topk_tiebroken_triton_rank(scores, 512, num_valid=num_valid)  # compile outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = topk_tiebroken_triton_rank(scores, 512, num_valid=num_valid)
    for seed, kind in enumerate(("randn", "ties", "equal", "mixed")):
        scores.copy_(scores_of(kind, rows, c, seed=seed))
        num_valid.copy_(torch.randint(0, c + 1, (rows,), device="cuda") if seed else torch.full((rows,), c, device="cuda"))
        graph.replay()
        assert_identical(out, topk_tiebroken_ref(scores, 512, num_valid=num_valid), f"replay {kind}")
