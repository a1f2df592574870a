"""Indexer scores read from the paged key cache, and the tie-broken top-k: Triton (interpreted on
the CPU) vs the twins.

Scores: the kernel sums fp32 products (exact bf16/fp8 operands), the twin sums in fp64; stated
tolerance |out - ref| <= 1e-6 * max|ref| per token (5e-5 on a GPU: tensor-core dots), and
exact zeros stay exact zeros (the ReLU-sum ties). Top-k: identical indices to the twin,
including order (score desc, index asc), with many deliberate ties, masks, num_valid, k larger
than the candidate count, -0.0 vs 0.0, ±inf.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from mxserve.kernels.cache import PagedIndexerKeyCache
from mxserve.kernels.indexer import indexer_scores_ref
from mxserve.kernels.indexer.triton import indexer_scores_cache_triton
from mxserve.kernels.topk import topk_tiebroken_ref
from mxserve.kernels.topk.triton import topk_tiebroken_triton

CPU = not torch.cuda.is_available()
DEVICE = "cpu" if CPU else "cuda"
TOL = 1e-6 if CPU else 5e-5


@pytest.mark.parametrize("mode,head_dim,heads", [("fp8", 128, 16), ("fp8", 128, 5), ("fp32", 96, 3), ("bf16", 128, 4)])
def test_scores_from_cache_match_twin(mode, head_dim, heads):
    cache = PagedIndexerKeyCache(5, 4, mode=mode, head_dim=head_dim,
                                 block_stride_bytes=4 * (132 if mode == "fp8" else head_dim * (4 if mode == "fp32" else 2)) + 3,
                                 device=DEVICE)
    g = torch.Generator().manual_seed(1)
    cache.write(torch.arange(20, device=DEVICE), torch.randn(20, head_dim, generator=g).to(DEVICE))
    slots = torch.tensor([3, 4, 7, 8, 0, 19, 12, 13, 5, 16, 2], device=DEVICE)
    q = torch.randn(6, heads, head_dim, generator=g).bfloat16().to(DEVICE)
    w = torch.randn(6, heads, generator=g).to(DEVICE)
    out = indexer_scores_cache_triton(q, w, cache, slots)
    ref = indexer_scores_ref(q, w, cache.read(slots))
    bound = TOL * ref.abs().amax(dim=1, keepdim=True)
    assert bool(((out - ref).abs() <= bound).all()), f"max err {(out - ref).abs().max():.3e}"
    assert torch.equal(out == 0, ref == 0), "exact-zero (tied) scores differ"
    # batch invariance: one token alone gives the same bits
    assert torch.equal(indexer_scores_cache_triton(q[3:4], w[3:4], cache, slots)[0], out[3])


def test_scores_all_negative_dots_are_exact_ties():
    cache = PagedIndexerKeyCache(2, 4, device=DEVICE)
    keys = torch.ones(8, 128)
    cache.write(torch.arange(8, device=DEVICE), keys.to(DEVICE))
    q = -torch.rand(2, 4, 128, device=DEVICE)  # every dot < 0 -> ReLU 0 -> score exactly 0
    out = indexer_scores_cache_triton(q, torch.rand(2, 4, device=DEVICE), cache, torch.arange(8, device=DEVICE))
    assert torch.equal(out, torch.zeros_like(out))


def tied_scores(n: int, c: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    s = torch.randint(-3, 4, (n, c), generator=g).float() * 0.5  # 7 distinct values: ties everywhere
    s[s == 0] = torch.where(torch.rand(int((s == 0).sum()), generator=g) < 0.5, -0.0, 0.0)
    if c >= 3:
        s[0, :3] = torch.tensor([float("inf"), float("-inf"), float("inf")])
    return s.to(DEVICE)


@pytest.mark.parametrize("c,k", [(1, 1), (7, 3), (40, 8), (40, 50), (600, 20)])  # interpreter sorts are slow: small k
def test_topk_identical_to_twin_with_ties(c, k):
    scores = tied_scores(5, c, seed=c + k)
    assert torch.equal(topk_tiebroken_triton(scores, k), topk_tiebroken_ref(scores, k))
    num_valid = torch.tensor([0, 1, c // 2, c, c], device=DEVICE)
    assert torch.equal(topk_tiebroken_triton(scores, k, num_valid=num_valid),
                       topk_tiebroken_ref(scores, k, num_valid=num_valid))
    g = torch.Generator().manual_seed(k)
    mask = (torch.rand(5, c, generator=g) < 0.6).to(DEVICE)
    assert torch.equal(topk_tiebroken_triton(scores, k, valid_mask=mask, num_valid=num_valid),
                       topk_tiebroken_ref(scores, k, valid_mask=mask, num_valid=num_valid))


def test_topk_random_distinct_scores_and_limits():
    scores = torch.randn(3, 2000, device=DEVICE)
    assert torch.equal(topk_tiebroken_triton(scores, 16), topk_tiebroken_ref(scores, 16))
    assert topk_tiebroken_triton(scores, 0).shape == (3, 0)
    with pytest.raises(ValueError, match="candidates"):
        topk_tiebroken_triton(torch.zeros(1, 65537, device=DEVICE), 4)
    with pytest.raises(ValueError, match="k must be"):
        topk_tiebroken_triton(scores, -1)
