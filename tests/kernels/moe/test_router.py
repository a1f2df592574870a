"""Router and per-expert sort: the Triton kernels are bit-equal to their torch twins (CPU: interpreter)."""

import pytest
import torch

from mxserve.kernels.linear.reference import linear_ref
from mxserve.kernels.moe import route, route_ref, router
from mxserve.kernels.moe.align import align_ref, align_triton

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _inputs(num_tokens: int, num_experts: int, dim: int = 64, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(num_tokens, dim, generator=g).bfloat16().to(DEVICE)
    gate = (torch.randn(num_experts, dim, generator=g) * 0.1).bfloat16().to(DEVICE)
    bias = (torch.randn(num_experts, generator=g) * 0.1).to(DEVICE)
    return x, gate, bias


def _assert_same_routing(x, gate, **kw):
    w_ref, i_ref = route_ref(x, gate, **kw)
    w, i = route(x, gate, backend="triton", **kw)
    assert i.dtype == i_ref.dtype == torch.int64 and w.dtype == torch.float32
    assert torch.equal(i, i_ref), f"ids differ at {torch.nonzero(i != i_ref)[:4].tolist()}: {i} vs {i_ref}"
    assert torch.equal(w, w_ref), f"weights differ: max |d| {(w - w_ref).abs().max().item()}"


@pytest.mark.parametrize("num_tokens", [0, 1, 7])
@pytest.mark.parametrize("num_experts,top_k", [(16, 6), (13, 3)])
def test_learned_routing_bit_equal(num_tokens, num_experts, top_k):
    x, gate, bias = _inputs(num_tokens, num_experts)
    _assert_same_routing(x, gate, top_k=top_k, routed_scaling=1.5, bias=bias)


@pytest.mark.parametrize("num_tokens,num_experts,dim", [
    (1, 13, 600),  # D: 3 chunks of the split, the last partial and not a multiple of a sub-block
    (9, 40, 64),  # T and E past one tile and not multiples of it
    (3, 16, 512),  # exactly two chunks
])
@pytest.mark.parametrize("x_dtype", [torch.bfloat16, torch.float32])
def test_gate_logits_bit_equal(num_tokens, num_experts, dim, x_dtype):
    x, gate, _ = _inputs(num_tokens, num_experts, dim=dim, seed=5)
    x = x.to(x_dtype) if x_dtype == torch.bfloat16 else x.float() + 1e-3 * torch.randn_like(x.float())
    got, ref = router.gate_logits_triton(x, gate), linear_ref(x, gate)
    assert got.dtype == torch.float32 and torch.equal(got, ref), f"max |d| {(got - ref).abs().max().item()}"


def test_multi_chunk_routing_bit_equal():
    x, gate, bias = _inputs(6, 24, dim=600, seed=6)
    _assert_same_routing(x, gate, top_k=6, routed_scaling=1.5, bias=bias)


def test_batch_invariance_and_token_passes(monkeypatch):
    """A token's routing does not depend on the batch, nor on the batch being split into passes."""
    x, gate, bias = _inputs(11, 16, dim=300, seed=7)
    kw = dict(top_k=4, routed_scaling=1.5, bias=bias)
    w_all, i_all = route(x, gate, backend="triton", **kw)
    w_one, i_one = route(x[3:4], gate, backend="triton", **kw)
    assert torch.equal(w_one, w_all[3:4]) and torch.equal(i_one, i_all[3:4])
    monkeypatch.setattr(router, "MAX_TOKENS_PER_PASS", 4)  # 11 tokens: passes of 4, 4 and 3
    w_pass, i_pass = route(x, gate, backend="triton", **kw)
    assert torch.equal(w_pass, w_all) and torch.equal(i_pass, i_all)
    assert torch.equal(router.gate_logits_triton(x, gate), linear_ref(x, gate))


@pytest.mark.parametrize("num_tokens", [0, 1, 5])
def test_hash_routing_bit_equal(num_tokens):
    x, gate, _ = _inputs(num_tokens, 16, seed=1)
    g = torch.Generator().manual_seed(2)
    tid2eid = torch.stack([torch.randperm(16, generator=g)[:6] for _ in range(40)]).to(DEVICE)
    token_ids = torch.randint(0, 40, (num_tokens,), generator=g).to(DEVICE)
    _assert_same_routing(x, gate, top_k=6, routed_scaling=2.5, tid2eid=tid2eid, token_ids=token_ids)


def test_ties_pick_the_lower_expert_id():
    x, gate, _ = _inputs(5, 16, seed=3)
    gate[8:] = gate[:8]  # experts e and e + 8 have identical scores
    bias = torch.zeros(16, device=DEVICE)
    _assert_same_routing(x, gate, top_k=6, routed_scaling=1.5, bias=bias)
    _, ids = route(x, gate, backend="triton", top_k=6, routed_scaling=1.5, bias=bias)
    assert (ids[:, 0] < 8).all()  # of each tied pair the lower id comes first


def test_all_tokens_on_one_expert():
    x, gate, bias = _inputs(9, 16, seed=4)
    bias[5] = 1e6  # selection only: the weights still come from the unbiased scores
    _assert_same_routing(x, gate, top_k=2, routed_scaling=1.5, bias=bias)
    _, ids = route(x, gate, backend="triton", top_k=2, routed_scaling=1.5, bias=bias)
    assert (ids[:, 0] == 5).all()


def test_bad_input_is_refused():
    x, gate, bias = _inputs(2, 8)
    with pytest.raises(ValueError, match="exactly one"):
        route(x, gate, backend="triton", top_k=2, routed_scaling=1.0)
    with pytest.raises(ValueError, match="top_k"):
        route(x, gate, backend="triton", top_k=9, routed_scaling=1.0, bias=bias)
    with pytest.raises(ValueError, match="unknown backend"):
        route(x, gate, backend="cuda-magic", top_k=2, routed_scaling=1.0, bias=bias)


def _ids(rows: list[list[int]]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.int64, device=DEVICE).reshape(len(rows), -1)


@pytest.mark.parametrize("rows,num_experts,block_m", [
    ([], 8, 16),  # no tokens
    ([[3, 1]], 8, 16),  # one token; most experts empty
    ([[0, 2], [2, 0], [1, 2], [2, 3], [0, 1]], 5, 4),  # odd count; expert 4 gets nothing
    ([[6]] * 37, 7, 16),  # every token on one expert: 3 blocks, the last one partly padding
])
def test_sort_matches_twin(rows, num_experts, block_m):
    ids = _ids(rows) if rows else torch.zeros(0, 2, dtype=torch.int64, device=DEVICE)
    ref, got = align_ref(ids, num_experts, block_m), align_triton(ids, num_experts, block_m)
    total = int(ref.expert_start[num_experts])
    assert torch.equal(got.expert_start, ref.expert_start)
    assert torch.equal(got.expert_count, ref.expert_count)
    assert torch.equal(got.block_expert, ref.block_expert)
    assert torch.equal(got.sorted_pair_ids[:total], ref.sorted_pair_ids[:total])
    # padding lanes hold the sentinel and never a real pair
    padding = torch.ones(total, dtype=torch.bool, device=DEVICE)
    for e in range(num_experts):
        s, c = int(ref.expert_start[e]), int(ref.expert_count[e])
        padding[s:s + c] = False
    assert (got.sorted_pair_ids[:total][padding] == ids.numel()).all()
