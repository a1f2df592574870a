"""linear_fp8_block: W8A8 decode with the activation quantization inside the linear's programs
(X_MODE 4, `DecodeOptions.fused_act_quant`) against the two-launch path (`act_quant` codes + scales,
then X_MODE 1), and the output-dtype epilogue (`out_dtype`) against `.to(out_dtype)` of the fp32
result. Both must be bit-identical: the quantization is a pure per-(row, 128-block) function (the
same JIT helper in both launches), and the epilogue rounds with torch's own recipe.

Under the interpreter each block's dot is an fp32 product-sum (exact here: e4m3 x e4m3 products);
what only the H200 shows (the FP8 MMA, the hardware e4m3 conversion of in-register codes) is
checked by benchmarks/gpu_s6_w8a8.sh at every Flash dense shape.
"""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

pytest.importorskip("triton")

from tests.kernels.linear_fp8_block.test_linear_fp8_block import DEVICE, first_mismatch, weight

from mxserve.formats import QuantizedWeight, WeightLayout, fake_quant_fp8_pow2
from mxserve.kernels import linear_fp8_block
from mxserve.kernels.linear_bf16.triton import linear_bf16_triton
from mxserve.kernels.linear_fp8_block import triton as launcher
from mxserve.kernels.linear_fp8_block._linear_fp8_block_kernel import _to_out
from mxserve.kernels.linear_fp8_block.triton import (
    DecodeOptions,
    launch_linear_fp8_block,
    linear_fp8_block_triton,
)

TWO_LAUNCH = DecodeOptions(fused_act_quant=False)  # the off switch: act_quant launch, then the linear


def _run(options: DecodeOptions | None, x: torch.Tensor, w, **kw) -> torch.Tensor:
    prev = launcher.set_decode_options(options or DecodeOptions())
    try:
        return linear_fp8_block_triton(x, w, **kw)
    finally:
        launcher.set_decode_options(prev)


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal dtypes, shapes and bit patterns (NaN included: torch.equal says NaN != NaN)."""
    ints = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(ints[a.dtype]), b.view(ints[b.dtype]))


def _activations(m: int, k: int, seed: int) -> torch.Tensor:
    """fp32 x with the blocks that stress the scale rule: an all-zero block, a huge block, tiny
    values (subnormal e4m3 codes beside a large block maximum), −0.0, an inf row and a NaN row."""
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(seed))
    if m >= 3:
        x[0, :128] = 0.0
        x[1, : min(k, 128)] *= 2.0**60
        x[2, 5:40] *= 1e-4
        x[2, 3] = -0.0
    if m >= 16:
        x[13, 7] = float("inf")
        x[14, 9] = float("nan")
    return x.to(DEVICE)


@pytest.mark.parametrize("n,k", [(72, 700), (128, 256)])
@pytest.mark.parametrize("xdtype", [torch.bfloat16, torch.float32])
def test_fused_equals_two_launch_bitwise(n: int, k: int, xdtype: torch.dtype) -> None:
    """M = 1, 2 (only the live rows quantized, XQ_ROWS), 3 and 16 (the whole 16-row decode tile);
    K = 700 is not a multiple of 128 (a 60-channel last block) and N = 72 leaves a partial feature
    tile; 128 x 256 takes the mask-free (EVEN) loads."""
    w = weight(n, k, seed=n + k)
    x = _activations(16, k, seed=k).to(xdtype)
    for m in (1, 2, 3, 16):
        fused = _run(None, x[:m], w, quantize_input=True)
        twin = _run(TWO_LAUNCH, x[:m], w, quantize_input=True)
        assert _same_bits(fused, twin), f"{m=}: {first_mismatch(fused, twin)}"
        assert fused.isfinite()[:13].all()  # the inf / NaN rows (13, 14) overflow or propagate: compared above


def test_in_kernel_codes_times_scales_are_the_faithful_values() -> None:
    """Against an identity weight (code 256 · 2^-8 on the diagonal, exact) each output is one
    activation's code times its block scale: the in-kernel quantization reproduces the faithful
    fake quantization (and the standalone launch's codes · scales) value for value."""
    k = 300
    w = QuantizedWeight.quantize(torch.eye(k), WeightLayout.FP8_BLOCK).to(DEVICE)
    x = _activations(3, k, seed=5).bfloat16()
    got = _run(None, x, w, quantize_input=True)
    want = fake_quant_fp8_pow2(x.float(), block=128)
    assert torch.equal(got, want), first_mismatch(got, want)
    codes, scales = launcher.quantize_fp8_block(x)
    standalone = codes.view(torch.float8_e4m3fn).float() * scales.repeat_interleave(128, dim=1)[:, :k]
    assert torch.equal(got, standalone), first_mismatch(got, standalone)


def test_fused_rows_are_batch_invariant(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows of M = 1, 2 and 3 equal those of M = 16 (all fused decode) and of M = 40 through the
    prefill tile (act_quant launch + the GEMM launch): the bits depend on neither M nor the path.
    (MXSERVE_LINEAR_DECODE_MAX_M=16: this small layer would otherwise take the decode launch at 40 rows.)"""
    monkeypatch.setenv(launcher.DECODE_MAX_M_ENV, "16")
    n, k = 72, 520
    w = weight(n, k, seed=31)
    x = torch.randn(40, k, generator=torch.Generator().manual_seed(8)).to(DEVICE).bfloat16()
    prefill = _run(None, x, w, quantize_input=True)
    full = _run(None, x[:16], w, quantize_input=True)
    assert torch.equal(full, prefill[:16]), first_mismatch(full, prefill[:16])
    for m in (1, 2, 3):
        part = _run(None, x[:m], w, quantize_input=True)
        assert torch.equal(part, prefill[:m]), f"M={m}: {first_mismatch(part, prefill[:m])}"


def test_off_switch_runs_the_act_quant_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Decode W8A8 calls the standalone quantization only with the switch off; prefill always."""
    monkeypatch.setenv(launcher.DECODE_MAX_M_ENV, "16")  # M = 20 on the prefill tile (not by layer size)
    calls = []
    real = launcher.quantize_fp8_block
    monkeypatch.setattr(launcher, "quantize_fp8_block", lambda x: calls.append(x.shape[0]) or real(x))
    w = weight(64, 256, seed=2)
    x = torch.randn(20, 256, generator=torch.Generator().manual_seed(1)).to(DEVICE)
    _run(None, x[:2], w, quantize_input=True)
    assert calls == []
    _run(TWO_LAUNCH, x[:2], w, quantize_input=True)
    _run(DecodeOptions(fused_act_quant_max_m=1), x[:2], w, quantize_input=True)  # above the row limit
    _run(None, x, w, quantize_input=True)  # M = 20: the prefill tile keeps its act_quant launch
    assert calls == [2, 2, 20]
    with pytest.raises(ValueError, match="fused_act_quant_max_m"):
        DecodeOptions(fused_act_quant_max_m=0)


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16])
def test_out_dtype_equals_the_cast(out_dtype: torch.dtype) -> None:
    """Every path rounds like `.to(out_dtype)` of its fp32 result: fused W8A8 decode (fused and
    two-launch split sums), the two-launch W8A8 decode, weight-only decode, a one-group layer (the
    output stored by the split program itself), the prefill tile, and the opt-in GEMV tile."""
    w = weight(72, 700, seed=4)
    w1 = weight(200, 100, seed=5)  # K <= 128: one group, no partials
    x = torch.randn(20, 700, generator=torch.Generator().manual_seed(3)).to(DEVICE) * 40.0
    cases = {
        "fused w8a8": (None, x[:3], w, dict(quantize_input=True)),
        "fused w8a8, one row": (None, x[:1], w, dict(quantize_input=True)),
        "fused w8a8, two-launch sum": (None, x[:3], w, dict(quantize_input=True, split_sum="two_launch")),
        "w8a8 act_quant launch": (TWO_LAUNCH, x[:3], w, dict(quantize_input=True)),
        "weight-only bf16 x": (None, x[:3].bfloat16(), w, {}),
        "one group, fused w8a8": (None, x[:3, :100], w1, dict(quantize_input=True)),
        "prefill w8a8": (None, x, w, dict(quantize_input=True)),
        "gemv": (None, x[:2], w, dict(tile="gemv")),
    }
    for name, (opts, xin, wt, kw) in cases.items():
        f32 = _run(opts, xin, wt, **kw)
        got = _run(opts, xin, wt, out_dtype=out_dtype, **kw)
        assert _same_bits(got, f32.to(out_dtype)), f"{name}: {first_mismatch(got.float(), f32.to(out_dtype).float())}"
    wb = torch.randn(72, 300, generator=torch.Generator().manual_seed(6)).bfloat16().to(DEVICE)
    for m in (3, 20):
        f32 = linear_bf16_triton(x[:m, :300], wb)
        got = linear_bf16_triton(x[:m, :300], wb, out_dtype=out_dtype)
        assert _same_bits(got, f32.to(out_dtype)), f"linear_bf16 {m=}: {first_mismatch(got.float(), f32.float())}"


def test_public_op_and_reference_honour_out_dtype() -> None:
    """`linear_fp8_block(..., out_dtype=)` on both backends: the reference is its fp32 result
    `.to(out_dtype)`, and the Triton backend returns the dtype asked for; None keeps fp32."""
    w = weight(72, 300, seed=7)
    x = torch.randn(3, 300, generator=torch.Generator().manual_seed(9)).to(DEVICE)
    ref32 = linear_fp8_block(x, w, quantize_input=True)
    ref16 = linear_fp8_block(x, w, quantize_input=True, out_dtype=torch.bfloat16)
    assert ref32.dtype == torch.float32 and _same_bits(ref16, ref32.to(torch.bfloat16))
    tri = linear_fp8_block(x, w, quantize_input=True, backend="triton", out_dtype=torch.bfloat16)
    tri32 = linear_fp8_block(x, w, quantize_input=True, backend="triton")
    assert tri.dtype == torch.bfloat16 and _same_bits(tri, tri32.to(torch.bfloat16))
    with pytest.raises(ValueError, match="out_dtype"):
        linear_fp8_block_triton(x, w, out_dtype=torch.float64)
    with pytest.raises(ValueError, match="quantize_x"):
        launch_linear_fp8_block(x, w, quantize_x=True, x_scales=torch.ones(3, 3, device=DEVICE))


@triton.jit
def _round_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(out_ptr + offs, _to_out(v, out_ptr), mask=offs < n)


def test_epilogue_rounding_is_torchs_bitwise() -> None:
    """The epilogue's fp32 → bf16/fp16 rounding on the values where roundings differ: exact ties
    (even and odd), the carry into the exponent, the largest finite values (→ inf), fp32
    subnormals, ±0, ±inf, NaN, and random bit patterns."""
    special = torch.tensor([0x3F808000, 0x3F818000, 0x3F80FFFF, 0x3FFF8000, 0x3FFFFFFF, 0x7F7FFFFF, 0x7F7F7FFF,
                            0xFF7FFFFF, 0x00000001, 0x00008000, 0x80018000, 0x00000000, 0x80000000, 0x7F800000,
                            0xFF800000, 0x7FC00000, 0xFFC00001, 0x7F800001, 0x477FF000, 0x477FEFFF, 0x33000000,
                            0x33000001, 0xB3800000], dtype=torch.int64).to(torch.int32)
    rand = torch.randint(-(2**31), 2**31, (4096,), generator=torch.Generator().manual_seed(0), dtype=torch.int64)
    bits = torch.cat([special, rand.to(torch.int32)])
    x = bits.view(torch.float32).to(DEVICE)
    for dtype in (torch.bfloat16, torch.float16):
        out = torch.empty(x.shape, dtype=dtype, device=DEVICE)
        _round_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        want = x.to(dtype)
        nan = want.isnan()
        assert torch.equal(out.isnan(), nan), dtype
        assert torch.equal(out[~nan].view(torch.int16), want[~nan].view(torch.int16)), (
            f"{dtype}: {first_mismatch(out[~nan].float(), want[~nan].float())}")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("n,k", [(1536, 4096), (32768, 1024), (4096, 8192)])
def test_gpu_fused_bf16_equals_two_launch_cast_eager_and_graph(n: int, k: int) -> None:
    """GPU (FP8 MMA, hardware e4m3 conversion of the in-register codes): the fused launch with the
    bf16 epilogue equals the act_quant launch + linear + .to(bf16) bit for bit at M = 1, 2, 8, 16,
    5 calls in a row, and under CUDA-graph replay on fresh inputs."""
    w = weight(n, k, seed=41, device="cuda")
    x = torch.randn(16, k, device="cuda").bfloat16()
    for m in (1, 2, 8, 16):
        want32 = _run(TWO_LAUNCH, x[:m], w, quantize_input=True)
        for _ in range(5):
            got32 = _run(None, x[:m], w, quantize_input=True)
            assert _same_bits(got32, want32), f"{m=}: {first_mismatch(got32, want32)}"
            got = _run(None, x[:m], w, quantize_input=True, out_dtype=torch.bfloat16)
            assert _same_bits(got, want32.to(torch.bfloat16)), f"{m=} bf16: {first_mismatch(got.float(), want32.float())}"
    static_x = x[:1].clone()
    _run(None, static_x, w, quantize_input=True, out_dtype=torch.bfloat16)  # warm-up: autotuning, counters
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = _run(None, static_x, w, quantize_input=True, out_dtype=torch.bfloat16)
    for i in range(3):
        static_x.copy_(x[i + 1: i + 2] * (i + 2))
        graph.replay()
        want = _run(TWO_LAUNCH, static_x, w, quantize_input=True).to(torch.bfloat16)
        assert _same_bits(static_out, want), f"replay {i}: {first_mismatch(static_out.float(), want.float())}"
