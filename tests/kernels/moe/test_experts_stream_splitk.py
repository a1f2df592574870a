"""Variant "bf16-stream-splitk" (issue 10: decode into the MMA registers, split K) on the CPU under the
interpreter: against the fp64 twin and "bf16-stream" within stated tolerances, batch invariance bit for
bit, and the relabelling that lets the decode skip the shared-memory round trip.

Stated tolerances (normwise relative error): against the twin those of every bf16 variant
(test_experts.TOL: exact 1e-6, faithful 1e-5 under the interpreter); against "bf16-stream" the same
(only the fp32 summation order differs: other groups of K per product-sum, split partials added in
split order). The layer here has I = 256 so that down splits too: with CONFIG k_split 128 every
program sums one 128-K block, gate/up in 2 splits and down in 2. The H200 checks are in test_gpu.py.
Past MMA_DECODE_MAX_PAIRS pairs the variant takes the prefill tile in the same K order:
test_experts_mma_order.py.
"""

import pytest
import torch
import triton
import triton.language as tl
from tests.kernels.moe.test_experts import DEVICE, MODES, TOL, _assert_close
from tests.kernels.moe.test_experts_split import edge_scale_experts

from mxserve.formats import QuantizedWeight, WeightLayout
from mxserve.kernels.moe import ExpertWeights, moe_experts, moe_experts_ref, stream_splitk
from mxserve.kernels.moe._experts_stream_kernel import _mma_pos
from mxserve.kernels.moe._experts_stream_splitk_kernel import _tile_row, _to_mma

E, D, I, K = 5, 256, 256, 3


def _layer(seed: int = 0):
    g = torch.Generator().manual_seed(seed)

    def q(n, m):
        return QuantizedWeight.quantize(torch.randn(n, m, generator=g) * 0.05, WeightLayout.MXFP4).to(DEVICE)

    return tuple(ExpertWeights(q(I, D), q(D, I), q(I, D)) for _ in range(E))


LAYER = _layer()


def _routing(num_tokens: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    ids = torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(num_tokens)])
    w = torch.rand(num_tokens, K, generator=g) + 0.1
    x = torch.randn(num_tokens, D, generator=g) * 2
    return x.to(DEVICE), ids.to(DEVICE), w.to(DEVICE)


@pytest.fixture
def splits():
    """Every program one 128-K block: gate/up (K = D = 256) and down (K = I = 256) in 2 splits each."""
    old = dict(stream_splitk.CONFIG)
    stream_splitk.CONFIG.update(gate_up_k_split=128, down_k_split=128)
    yield
    stream_splitk.CONFIG.clear()
    stream_splitk.CONFIG.update(old)


def _run(x, ids, w, mode, variant, experts=LAYER):
    x_dtype, qi, hd, _, _ = MODES[mode]
    return moe_experts(x.to(x_dtype), ids, w, experts, backend="triton", limit=10.0, quantize_inputs=qi,
                       hidden_dtype=hd, variant=variant)


@pytest.mark.parametrize("mode", ["exact", "faithful"])
def test_against_the_twin_and_the_stream_decode(splits, mode):
    """4 tokens; expert 1 gets every token's slot 0 (4 rows of one 16-row block), slots 1 and 2 in
    both orders of the same experts (the combine sums in ascending expert id)."""
    x, ids, w = _routing(4, seed=21)
    ids[:, 0] = 1
    ids[:, 1:] = torch.tensor([[0, 2], [2, 0], [4, 3], [3, 4]], device=DEVICE)
    x_dtype, qi, hd, _, _ = MODES[mode]
    ref = moe_experts_ref(x.to(x_dtype), ids, w, LAYER, limit=10.0, quantize_inputs=qi, hidden_dtype=hd)
    got = _run(x, ids, w, mode, "bf16-stream-splitk")
    _assert_close(ref, got, TOL[mode])
    _assert_close(_run(x, ids, w, mode, "bf16-stream"), got, TOL[mode])


def test_batch_invariance_and_split_order(splits):
    """A token alone gives its row of the 17-token batch bit for bit (top-2, expert 1 in every token's
    slot 0: two 16-row blocks of one expert; 2 x 2 splits arriving in any order; 128-feature programs
    to keep the interpreter's program count down)."""
    x, ids, w = _routing(17, seed=5)
    ids, w = ids[:, :2].clone(), w[:, :2].contiguous()
    ids[:, 0] = 1
    ids[:, 1] = torch.tensor([0, 2, 3, 4] * 5, device=DEVICE)[:17]
    stream_splitk.CONFIG["block_n"] = 128
    batch = _run(x, ids, w, "faithful", "bf16-stream-splitk")
    for t in (0, 16):
        alone = _run(x[t:t + 1], ids[t:t + 1], w[t:t + 1], "faithful", "bf16-stream-splitk")
        assert torch.equal(alone[0], batch[t]), f"token {t}: max |d| {(alone[0] - batch[t]).abs().max().item()}"


def test_one_split_and_128_feature_programs():
    """CONFIG as shipped (k_split >= K here: one split each) and block_n 128 (two wgmma row tiles a
    program, `_to_mma` with two 64-row groups): the twin's values within tolerance."""
    x, ids, w = _routing(3, seed=8)
    ref = moe_experts_ref(x, ids, w, LAYER, limit=10.0, quantize_inputs=False, hidden_dtype=torch.float32)
    old = dict(stream_splitk.CONFIG)
    try:
        assert stream_splitk.num_splits(D, old["gate_up_k_split"]) == 1
        _assert_close(ref, _run(x, ids, w, "exact", "bf16-stream-splitk"), TOL["exact"])
        stream_splitk.CONFIG["block_n"] = 128
        _assert_close(ref, _run(x, ids, w, "exact", "bf16-stream-splitk"), TOL["exact"])
    finally:
        stream_splitk.CONFIG.update(old)
    with pytest.raises(ValueError, match="multiple of 128"):
        stream_splitk.num_splits(D, 192)


def test_scales_at_the_edges(splits):
    """Scale byte 128 (the word's top byte negative as int32), 48, codes 0x88 (-0 twice): I = 128 here."""
    from tests.kernels.moe.test_experts import _routing as routing6

    experts = edge_scale_experts()
    x, ids, w = routing6(3, seed=4)
    ref = moe_experts_ref(x, ids, w, experts, limit=10.0, quantize_inputs=False, hidden_dtype=torch.float32)
    _assert_close(ref, _run(x, ids, w, "exact", "bf16-stream-splitk", experts), TOL["exact"])


@triton.jit
def _relabel_kernel(out_ptr, rows_ptr, pos_ptr):
    r = tl.arange(0, 128)
    i = tl.arange(0, 64)
    tile = r[:, None] * 64 + i[None, :]
    tl.store(out_ptr + r[:, None] * 64 + i[None, :], _to_mma(tile, 128))
    tl.store(rows_ptr + r, _tile_row(r))
    tl.store(pos_ptr + tl.arange(0, 128), _mma_pos(tl.arange(0, 128)))


def test_relabelling_is_consistent():
    """`_to_mma` moves element (r, i) of a loaded [128, 64] tile to (`_tile_row(r)`, K index of byte i),
    and `_mma_pos` stores column j of a 128-block at (j % 2) · 64 + that K index of byte j // 2: a
    permutation, so the activations meet the weights they multiplied before."""
    out = torch.empty(128, 64, dtype=torch.int32, device=DEVICE)
    rows = torch.empty(128, dtype=torch.int32, device=DEVICE)
    pos = torch.empty(128, dtype=torch.int32, device=DEVICE)
    _relabel_kernel[(1,)](out, rows, pos)
    i = torch.arange(64)
    kpos = 16 * ((i // 4) % 4) + 8 * ((i // 2) % 2) + 2 * (i // 16) + i % 2  # the docstring's formula
    r = torch.arange(128)
    want = torch.empty(128, 64, dtype=torch.int64)
    want[rows.cpu().long()[:, None], kpos[None, :]] = r[:, None] * 64 + i[None, :]
    assert torch.equal(out.cpu().long(), want)
    assert sorted(rows.tolist()) == list(range(128)) and rows[:16].tolist() == [*range(8), *range(16, 24)]
    j = torch.arange(128)
    assert torch.equal(pos.cpu().long(), (j % 2) * 64 + kpos[j // 2])
