"""Variant "bf16-split" (issue 10 decode path) against the fused "bf16" variant: bit for bit.

Every weight value is the same exact bf16 number in both and each output element's sum runs over
K in the same order, so no tolerance: torch.equal (CPU: the interpreter, whose form of the nibble
decode is checked against the PTX's bit arithmetic below). The twin comparison is in test_experts.
"""

import pytest
import torch
from tests.kernels.moe.test_experts import DEVICE, EXPERTS, MODES, D, E, _experts, _routing

from mxserve.formats import WeightLayout
from mxserve.kernels.moe import moe_experts
from mxserve.kernels.moe.chooser import MoESpec


def _both(x, ids, w, mode, experts=EXPERTS, **kw):
    x_dtype, qi, hd, _, _ = MODES[mode]
    args = dict(backend="triton", limit=10.0, quantize_inputs=qi, hidden_dtype=hd, **kw)
    fused = moe_experts(x.to(x_dtype), ids, w, experts, variant="bf16-fused", **args)
    split = moe_experts(x.to(x_dtype), ids, w, experts, variant="bf16-split", **args)
    return fused, split


def _assert_equal(fused, split):
    assert split.shape == fused.shape and split.dtype == torch.float32
    diff = (split != fused) & ~(split.isnan() & fused.isnan())
    if diff.any():
        i = tuple(torch.nonzero(diff)[0].tolist())
        raise AssertionError(f"{int(diff.sum())} elements differ; first at {i}: split {split[i]} vs fused {fused[i]}")
    assert torch.isfinite(split).all()


@pytest.mark.parametrize("num_tokens", [0, 1, 5])
@pytest.mark.parametrize("mode", ["exact", "faithful"])
def test_bit_identical_to_fused(num_tokens, mode):
    """0 / 1 / odd token counts; expert E-1 never gets a token (`_routing`)."""
    x, ids, w = _routing(num_tokens, seed=11)
    fused, split = _both(x, ids, w, mode)
    assert split.shape == (num_tokens, D)
    _assert_equal(fused, split)


def test_all_tokens_on_one_expert():
    """21 rows on expert 2: two 16-row blocks of one expert in the split decode."""
    x, _, w = _routing(21, seed=2)
    ids = torch.tensor([[2, 3 + t % 2, t % 2] for t in range(21)], device=DEVICE)
    fused, split = _both(x, ids, w, "faithful", tile="decode")
    _assert_equal(fused, split)


def edge_scale_experts():
    """Experts with scale byte 128 (the top of the split decode's range) on even rows, 48 on every
    third, and code byte 0x88 (-0 in both nibbles) in column 0 of every matrix."""
    experts = _experts(seed=9)
    for ex in experts:
        for q in (ex.w1, ex.w2, ex.w3):
            q.scales[0::2] = 128
            q.scales[1::3] = 48
            q.codes[:, 0] = 0x88
    return experts


def test_scales_at_the_edges_and_negative_zero_codes():
    """Scale byte 128 (the top of the split decode's range), a low byte (48), codes 0x8 / 0x80 (-0).
    Not 16: there the fused path's 2^-14-scaled products are fp32 subnormals and lose bits (seen:
    -2.500028219e-31 vs the split path's exact -2.500028454e-31), so the two differ by design."""
    experts = edge_scale_experts()
    x, ids, w = _routing(3, seed=4)
    fused, split = _both(x, ids, w, "exact", experts=experts)
    _assert_equal(fused, split)


def test_batch_invariance_across_paths():
    """41 tokens x 3 slots = 123 pairs > 16 per expert: the batch takes the fused prefill tile; a
    token alone takes the split decode. Same bits."""
    x, ids, w = _routing(41, seed=3)
    _, batch = _both(x, ids, w, "exact")
    for t in (0, 17, 40):
        fused, alone = _both(x[t:t + 1], ids[t:t + 1], w[t:t + 1], "exact")
        assert torch.equal(alone[0], batch[t]), f"token {t}: max |d| {(alone[0] - batch[t]).abs().max().item()}"
        assert torch.equal(alone, fused)


def test_ptx_bit_arithmetic_matches_the_interpreter_form():
    """`_E2M1_PAIRS_PTX`'s steps, done in int64 on all 65536 byte pairs, give s<<15 | e1e0m<<6 per nibble:
    the interpreter form's fp32 bits (s<<31 | e1e0m<<22) shifted down by 16."""
    pairs = torch.arange(65536, dtype=torch.int64)
    b0, b1 = pairs & 0xFF, pairs >> 8
    t = b0 | (b1 << 16)  # prmt 0x4140
    lo = ((t & 0x000F000F) * 0x1040) & 0x81C081C0
    hi = ((t & 0x00F000F0) * 0x104) & 0x81C081C0

    def form(b, shift):
        n = (b >> shift) & 15
        return ((n & 7) << 6) | ((n & 8) << 12)

    assert torch.equal(lo & 0xFFFF, form(b0, 0)) and torch.equal(lo >> 16, form(b1, 0))
    assert torch.equal(hi & 0xFFFF, form(b0, 4)) and torch.equal(hi >> 16, form(b1, 4))
    # and the bits are e2m1 · 2^-126 as bf16 (code 1: the subnormal 2^-127)
    e2m1 = torch.tensor([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6], dtype=torch.float64)
    codes = torch.arange(16)
    vals = (form(codes, 0).to(torch.int32) << 16).view(torch.float32).double()
    assert torch.equal(vals, e2m1 * 2.0 ** -126) and torch.equal(torch.signbit(vals), torch.signbit(e2m1))


def test_bf16_takes_the_split_decode_where_it_applies():
    """Variant "bf16" runs the split decode on MXFP4 experts with scale bytes <= 128 (the same bits
    as "bf16-fused"), and the fused kernel where a byte is larger; "bf16-fused" is the off switch."""
    from mxserve.kernels.moe.experts import stacked_for

    x, ids, w = _routing(5, seed=6)
    assert stacked_for(EXPERTS).takes_split_decode
    fused, split = _both(x, ids, w, "faithful")
    auto = moe_experts(x.bfloat16(), ids, w, EXPERTS, variant="bf16", backend="triton", limit=10.0,
                       quantize_inputs=True, hidden_dtype=torch.bfloat16)
    _assert_equal(fused, auto)
    _assert_equal(split, auto)
    big = _experts(seed=12)
    big[1].w2.scales[0, 0] = 129
    assert not stacked_for(big).takes_split_decode
    args = dict(backend="triton", limit=10.0, quantize_inputs=False)
    auto_big = moe_experts(x, ids, w, big, variant="bf16", **args)
    _assert_equal(moe_experts(x, ids, w, big, variant="bf16-fused", **args), auto_big)
    with pytest.raises(ValueError, match="129 > 128"):
        moe_experts(x, ids, w, big, variant="bf16-split", **args)


def test_refuses_fp8_block_experts():
    experts = _experts(seed=5, layout=WeightLayout.FP8_BLOCK)
    x, ids, w = _routing(2)
    with pytest.raises(ValueError, match="bf16-split"):
        moe_experts(x, ids, w, experts, backend="triton", limit=10.0, quantize_inputs=False, variant="bf16-split")


def test_spec_reads_the_largest_scale_byte():
    spec = MoESpec.of("l", EXPERTS, quantize_inputs=True)
    want = max(int(getattr(ex, n).scales.max()) for ex in EXPERTS for n in ("w1", "w2", "w3"))
    assert spec.max_scale_byte == want and len(EXPERTS) == E
