"""Variant "bf16-stream" (issue 10 streaming decode) against "bf16-fused" and "bf16-split": bit for bit.

Same exact weight values, same activation values, same per-element K order, same epilogue and
combine order (`_experts_stream_kernel.py`), so no tolerance: equality (NaN = NaN) on the CPU
under the interpreter. The GPU check is in test_gpu.py; the twin comparison of the fused path in
test_experts.py.
"""

import pytest
import torch
from tests.kernels.moe.test_experts import DEVICE, EXPERTS, MODES, D, E, I, _experts, _routing
from tests.kernels.moe.test_experts_split import _assert_equal, edge_scale_experts

from mxserve.formats import WeightLayout, fake_quant_fp8_pow2
from mxserve.kernels.moe import moe_experts
from mxserve.kernels.moe.experts import stacked_for


def _run(x, ids, w, mode, variant, experts=EXPERTS, **kw):
    x_dtype, qi, hd, _, _ = MODES[mode]
    return moe_experts(x.to(x_dtype), ids, w, experts, backend="triton", limit=10.0, quantize_inputs=qi,
                       hidden_dtype=hd, variant=variant, **kw)


def _check(x, ids, w, mode, experts=EXPERTS):
    stream = _run(x, ids, w, mode, "bf16-stream", experts)
    _assert_equal(_run(x, ids, w, mode, "bf16-fused", experts), stream)
    return stream


@pytest.mark.parametrize("num_tokens", [1, 5])
@pytest.mark.parametrize("mode", ["exact", "faithful"])
def test_bit_identical_to_fused(num_tokens, mode):
    """1 / odd token counts; expert E-1 never gets a token (`_routing`)."""
    x, ids, w = _routing(num_tokens, seed=21)
    assert _check(x, ids, w, mode).shape == (num_tokens, D)


def test_zero_tokens():
    x, ids, w = _routing(0)
    out = _run(x, ids, w, "faithful", "bf16-stream")
    assert out.shape == (0, D) and out.dtype == torch.float32


def test_all_tokens_on_one_expert():
    """21 rows on expert 2 (two 16-row blocks led by pairs of rank 0 and 16), 11 + 10 on experts 3 / 0."""
    x, _, w = _routing(21, seed=2)
    ids = torch.tensor([[2, 3 + t % 2, t % 2] for t in range(21)], device=DEVICE)
    _check(x, ids, w, "faithful")


def test_every_token_on_the_same_experts_in_another_slot_order():
    """The combine sums a token's rows in ascending expert id whatever the slot order."""
    x, _, w = _routing(7, seed=8)
    ids = torch.tensor([[4, 1, 3], [1, 3, 4], [3, 4, 1]] * 2 + [[4, 3, 1]], device=DEVICE)
    _check(x, ids, w, "exact")


def test_128_feature_programs():
    """CONFIG block_n 128 (the fused kernel's tile width): 2 arrivals per SwiGLU block, D/128 combine tiles."""
    from mxserve.kernels.moe import stream

    x, ids, w = _routing(6, seed=13)
    old = dict(stream.CONFIG)
    try:
        stream.CONFIG["block_n"] = 128
        _check(x, ids, w, "faithful")
    finally:
        stream.CONFIG.update(old)


def test_batch_invariance():
    """A token alone gives its row of the 9-token batch, bit for bit."""
    x, ids, w = _routing(9, seed=5)
    batch = _run(x, ids, w, "faithful", "bf16-stream")
    for t in (0, 4, 8):
        alone = _run(x[t:t + 1], ids[t:t + 1], w[t:t + 1], "faithful", "bf16-stream")
        assert torch.equal(alone[0], batch[t]), f"token {t}: max |d| {(alone[0] - batch[t]).abs().max().item()}"


def test_scales_at_the_edges_and_negative_zero_codes():
    """Scale byte 128 (the word's top byte negative as int32), 48, codes 0x88 (-0 twice)."""
    x, ids, w = _routing(3, seed=4)
    _check(x, ids, w, "exact", experts=edge_scale_experts())


def test_larger_calls_take_the_split_path():
    """Past STREAM_MAX_PAIRS pairs the variant runs the split decode (the same bits again)."""
    from mxserve.kernels.moe import stream

    x, ids, w = _routing(4, seed=3)
    old = stream.STREAM_MAX_PAIRS
    try:
        stream.STREAM_MAX_PAIRS = 6  # 12 pairs > 6
        split = _run(x, ids, w, "faithful", "bf16-stream")
    finally:
        stream.STREAM_MAX_PAIRS = old
    _assert_equal(_run(x, ids, w, "faithful", "bf16-split"), split)


def test_prep_values_are_fake_quant_fp8():
    """The prep kernel's x copy, put back in column order, is `fake_quant_fp8`'s values (NaN row too),
    and it zeroes every counter."""
    from mxserve.kernels.moe._experts_stream_kernel import _moe_stream_prep_kernel

    g = torch.Generator().manual_seed(3)
    x = (torch.randn(3, D, generator=g) * torch.logspace(-3, 3, D)).bfloat16().to(DEVICE)
    x[1, 130] = float("nan")
    xp = torch.empty_like(x)
    cnt = torch.full((29,), 7, dtype=torch.int32, device=DEVICE)
    _moe_stream_prep_kernel[(3, D // 128)](x, xp, cnt, 29, x.stride(0), xp.stride(0), QUANT=True, ZERO_PER=8,
                                           num_warps=1)
    j = torch.arange(128)
    perm = (j % 2) * 64 + j // 2
    back = xp.reshape(3, -1, 128)[:, :, perm].reshape(3, D)
    want = fake_quant_fp8_pow2(x, block=128)
    same = (back == want) | (back.isnan() & want.isnan())
    assert same.all(), f"first mismatch at {torch.nonzero(~same)[0].tolist()}"
    assert not cnt.any()


def test_refuses_fp8_block_and_large_scale_bytes():
    x, ids, w = _routing(2)
    with pytest.raises(ValueError, match="bf16-stream"):
        _run(x, ids, w, "exact", "bf16-stream", experts=_experts(seed=5, layout=WeightLayout.FP8_BLOCK))
    big = _experts(seed=12)
    big[1].w2.scales[0, 0] = 129
    assert not stacked_for(big).takes_split_decode
    with pytest.raises(ValueError, match="129 > 128"):
        _run(x, ids, w, "exact", "bf16-stream", experts=big)
    assert len(EXPERTS) == E and I % 128 == 0


def test_quads_ptx_is_the_pairs_arithmetic():
    """`_E2M1_QUADS_PTX` (4 code bytes a register) on words made of every byte pair, emulated in int64:
    its four outputs are the pairs version's two outputs for bytes 0, 1 and for bytes 2, 3 (the pairs
    version is checked against the interpreter's form in test_experts_split)."""
    from mxserve.kernels.moe._experts_split_kernel import _E2M1_PAIRS_PTX
    from mxserve.kernels.moe._experts_stream_kernel import _E2M1_QUADS_PTX

    def prmt(a, sel):  # prmt.b32 d, a, 0, sel (selectors 0-3: a's bytes, 4: zero)
        out = torch.zeros_like(a)
        for i in range(4):
            s = (sel >> (4 * i)) & 0xF
            byte = (a >> (8 * s)) & 0xFF if s < 4 else torch.zeros_like(a)
            out |= byte << (8 * i)
        return out

    def lo_hi(t):
        return ((t & 0x000F000F) * 0x1040) & 0x81C081C0, ((t & 0x00F000F0) * 0x104) & 0x81C081C0

    pairs = torch.arange(65536, dtype=torch.int64)
    word = pairs | (pairs.flip(0) << 16)  # bytes 0, 1 = a pair; bytes 2, 3 = another pair
    q0, q2 = lo_hi(prmt(word, 0x4140))
    q1, q3 = lo_hi(prmt(word, 0x4342))
    p_lo, p_hi = lo_hi(prmt(pairs, 0x4140))  # the pairs version: cvt.u32.u16 then prmt 0x4140
    r_lo, r_hi = lo_hi(prmt(pairs.flip(0), 0x4140))
    assert torch.equal(q0, p_lo) and torch.equal(q2, p_hi) and torch.equal(q1, r_lo) and torch.equal(q3, r_hi)
    # and the PTX strings say what the emulation does
    for line in ("prmt.b32 t, $4, 0, 0x4140;", "prmt.b32 t, $4, 0, 0x4342;", "and.b32 $1, n, 0x81C081C0;",
                 "and.b32 $3, n, 0x81C081C0;"):
        assert line in _E2M1_QUADS_PTX.value
    assert "prmt.b32 t, t, 0, 0x4140;" in _E2M1_PAIRS_PTX.value and "mul.lo.u32 n, n, 0x1040;" in _E2M1_QUADS_PTX.value


def test_default_variant_streams_small_calls_only(monkeypatch):
    """"bf16" takes the stream decode up to STREAM_DEFAULT_MAX_PAIRS pairs (measured faster there on
    the H200), the split decode above; the bits are the same either way."""
    import mxserve.kernels.moe.experts as experts_mod

    monkeypatch.setenv(experts_mod.MMA_ORDER_ENV, "0")  # the routing of the other K order (the MMA order's: test_experts_mma_order)
    calls = []
    real = experts_mod.stream_decode
    monkeypatch.setattr(experts_mod, "stream_decode", lambda *a, **k: calls.append(a[1].numel()) or real(*a, **k))
    small = _routing(2, seed=3)  # 2 tokens x 3 slots = 6 pairs
    _assert_equal(_run(*small, "faithful", "bf16-fused"), _run(*small, "faithful", "bf16"))
    assert calls == [6]
    monkeypatch.setattr(experts_mod, "STREAM_DEFAULT_MAX_PAIRS", 5)
    _assert_equal(_run(*small, "faithful", "bf16-fused"), _run(*small, "faithful", "bf16"))
    assert calls == [6], "6 pairs > 5: the split decode, not the stream"
