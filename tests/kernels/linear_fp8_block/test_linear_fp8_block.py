"""linear_fp8_block: Triton kernel (interpreted on the CPU) against its torch twin.

Tolerances (the twin accumulates in fp64 and rounds once; the kernel accumulates fp32 per 128-K
block and adds the scaled blocks in fp32): normwise relative error <= 1e-6 under the interpreter
(fp32 dots of exactly widened values). Exact parts are checked bitwise: the activation codes and
scales reproduce the faithful fake quantization, and a one-hot activation picks one weight column
exactly (dequantization through the kernel).
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from mxserve.formats import (
    E4M3FNUZ,
    QuantizedWeight,
    WeightLayout,
    decode,
    fake_quant_fp8_pow2,
    fp8_ocp_to_fnuz,
)
from mxserve.kernels import linear_fp8_block
from mxserve.kernels.linear_fp8_block import linear_fp8_block_ref, quantize_activation_fp8_block
from mxserve.kernels.linear_fp8_block.triton import (
    kb_per_group,
    linear_fp8_block_triton,
    to_ocp_weight,
)

CPU = not torch.cuda.is_available()
DEVICE = "cpu" if CPU else "cuda"
TOL = 1e-6 if CPU else 2e-5


def weight(n: int, k: int, seed: int = 0, device: str = DEVICE) -> QuantizedWeight:
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=g) * 0.05
    w[: min(n, 3), : min(k, 5)] *= 1e-6  # some tiny values: subnormal codes and small scales
    return QuantizedWeight.quantize(w, WeightLayout.FP8_BLOCK).to(device)


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref.double()).norm() / ref.double().norm().clamp(min=1e-300))


def first_mismatch(a: torch.Tensor, b: torch.Tensor) -> str:
    idx = (a != b).nonzero()
    if not len(idx):
        return "equal"
    at = tuple(int(i) for i in idx[0])
    return f"first mismatch at {at}: {a[at].item()!r} vs {b[at].item()!r}"


@pytest.mark.parametrize("n,k", [(64, 128), (200, 300), (130, 700)])
@pytest.mark.parametrize("m", [0, 1, 17, 70])
@pytest.mark.parametrize("quantize_input", [False, True])
def test_parity_with_twin(n: int, k: int, m: int, quantize_input: bool) -> None:
    w = weight(n, k, seed=n + k)
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(m)).to(DEVICE)
    out = linear_fp8_block(x, w, quantize_input=quantize_input, backend="triton")
    ref = linear_fp8_block(x, w, quantize_input=quantize_input, backend="reference")
    assert out.shape == ref.shape == (m, n) and out.dtype == torch.float32
    if m:
        assert not torch.isnan(out).any()
        assert rel_err(out, ref) <= TOL, f"{rel_err(out, ref)=:.3e} (n={n}, k={k}, m={m})"


def test_leading_dims_and_strided_input() -> None:
    w = weight(96, 260)
    x = torch.randn(2, 3, 520, device=DEVICE)[..., ::2]  # non-unit channel stride
    out = linear_fp8_block_triton(x, w)
    assert out.shape == (2, 3, 96)
    assert rel_err(out, linear_fp8_block_ref(x, w)) <= TOL


def test_one_hot_dequantizes_exactly() -> None:
    """x = e_j picks weight column j: each block's dot has one non-zero product, so the kernel's
    result must be the dequantized column bit for bit (scale folding, masking, widening)."""
    n, k = 150, 300
    w = weight(n, k, seed=3)
    dense = w.dequantize(torch.float32)
    cols = [0, 127, 128, 299]
    x = torch.zeros(len(cols), k, device=DEVICE)
    x[torch.arange(len(cols)), torch.tensor(cols)] = 1.0
    for decode_path in ("auto", "lut"):
        out = linear_fp8_block_triton(x, w, weight_decode=decode_path)
        expect = dense[:, cols].t()
        assert torch.equal(out, expect), first_mismatch(out, expect)


def test_activation_codes_reproduce_fake_quant_bitwise() -> None:
    x = torch.randn(9, 300) * torch.logspace(-6, 3, 300)
    x[0, :128] = 0.0  # all-zero block: the amax floor
    codes, scales = quantize_activation_fp8_block(x)
    from mxserve.formats import E4M3FN

    values = decode(codes, E4M3FN) * scales.repeat_interleave(128, dim=1)[:, :300]
    expect = fake_quant_fp8_pow2(x, block=128)
    assert torch.equal(values, expect), first_mismatch(values, expect)


@pytest.mark.parametrize("x_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("quantize_input", [False, True])
def test_batch_invariance(x_dtype: torch.dtype, quantize_input: bool) -> None:
    """Row results are bit-identical whatever M (decode tile, split-K grid, prefill tile)."""
    n, k = 200, 700  # 6 K blocks: several summation groups
    assert kb_per_group(n, k) < 6
    w = weight(n, k, seed=5)
    x = torch.randn(64, k, device=DEVICE).to(x_dtype)
    full = linear_fp8_block_triton(x, w, quantize_input=quantize_input)
    for m in (1, 7, 20):
        part = linear_fp8_block_triton(x[:m], w, quantize_input=quantize_input)
        assert torch.equal(part, full[:m]), f"M={m}: {first_mismatch(part, full[:m])}"


def test_fnuz_weight_lut_and_conversion() -> None:
    """e4m3fnuz weights: widened through their value table, and converted to OCP at load; both
    equal the reference on the same logical weight."""
    ocp = weight(100, 384, seed=7)
    fnuz_codes, fnuz_scales = fp8_ocp_to_fnuz(ocp.codes, ocp.scales)
    fnuz = QuantizedWeight.from_fp8_block(fnuz_codes, fnuz_scales, fmt=E4M3FNUZ)
    assert torch.equal(fnuz.dequantize(), ocp.dequantize())
    x = torch.randn(3, 384, device=DEVICE)
    ref = linear_fp8_block_ref(x, ocp)
    assert rel_err(linear_fp8_block_triton(x, fnuz), ref) <= TOL
    back = to_ocp_weight(fnuz)
    assert torch.equal(back.scales, ocp.scales) and torch.equal(back.dequantize(), ocp.dequantize())  # -0 → +0


def test_launcher_validates_with_values() -> None:
    w = weight(64, 128)
    with pytest.raises(ValueError, match="in_features 128"):
        linear_fp8_block_triton(torch.randn(2, 100, device=DEVICE), w)
    with pytest.raises(ValueError, match=r"x\.dtype"):
        linear_fp8_block_triton(torch.randn(2, 128, device=DEVICE).double(), w)
    with pytest.raises(TypeError, match="QuantizedWeight"):
        linear_fp8_block_triton(torch.randn(2, 128, device=DEVICE), torch.randn(64, 128))
    with pytest.raises(ValueError, match="tile="):
        linear_fp8_block_triton(torch.randn(2, 128, device=DEVICE), w, tile="huge")
    with pytest.raises(ValueError, match="unknown backend"):
        linear_fp8_block(torch.randn(2, 128), w, backend="cuda-magic")


@pytest.mark.parametrize("quantize_input", [False, True])
def test_gemv_parity_and_invariance(quantize_input: bool) -> None:
    """The opt-in FMA GEMV: parity with the twin, rows bit-identical for M = 1..4, M = 0, and a
    clear error past GEMV_MAX_M."""
    n, k = 200, 700
    w = weight(n, k, seed=8)
    x = torch.randn(4, k, device=DEVICE)
    full = linear_fp8_block_triton(x, w, quantize_input=quantize_input, tile="gemv")
    assert rel_err(full, linear_fp8_block_ref(x, w, quantize_input=quantize_input)) <= TOL
    for m in (1, 2, 3):
        part = linear_fp8_block_triton(x[:m], w, quantize_input=quantize_input, tile="gemv")
        assert torch.equal(part, full[:m]), f"M={m}: {first_mismatch(part, full[:m])}"
    assert linear_fp8_block_triton(x[:0], w, tile="gemv").shape == (0, n)
    with pytest.raises(ValueError, match="M <= 4"):
        linear_fp8_block_triton(torch.randn(5, k, device=DEVICE), w, tile="gemv")


def test_activation_scaling_keeps_extreme_blocks_exact() -> None:
    """Weight-only x is scaled per (row, 128 channels) into fp16 range inside the kernel: blocks
    of huge, tiny and mixed magnitude (bf16 values) still give the twin's result; a one-hot
    times 2^100 / 2^-100 dequantizes exactly."""
    n, k = 64, 384
    w = weight(n, k, seed=9)
    x = torch.randn(3, k, device=DEVICE)
    x[0, :128] *= 2.0**100
    x[1, 128:256] *= 2.0**-100
    x[2, 256:] *= torch.logspace(-8, 8, 128, device=DEVICE)
    xb = x.bfloat16()
    assert rel_err(linear_fp8_block_triton(xb, w), linear_fp8_block_ref(xb, w)) <= TOL
    dense = w.dequantize(torch.float32)
    for big in (2.0**100, 2.0**-100):
        hot = torch.zeros(1, k, device=DEVICE)
        hot[0, 200] = big
        out = linear_fp8_block_triton(hot, w)
        assert torch.equal(out, dense[:, 200][None] * big), first_mismatch(out, dense[:, 200][None] * big)


@pytest.mark.parametrize("t", [0, 1, 9])
def test_grouped_wo_a_parity_and_validation(t: int) -> None:
    from mxserve.kernels.linear import grouped_linear_ref
    from mxserve.kernels.linear_fp8_block.triton import grouped_linear_fp8_block_triton

    g, r, k = 3, 128, 300
    w = weight(g * r, k, seed=10)
    x = torch.randn(t, g, k, device=DEVICE).bfloat16()
    out = grouped_linear_fp8_block_triton(x, w)
    ref = grouped_linear_ref(x, w)
    assert out.shape == ref.shape == (t, g, r)
    if t:
        assert rel_err(out, ref) <= TOL
        single = grouped_linear_fp8_block_triton(x[:1], w)
        assert torch.equal(single, out[:1]), first_mismatch(single, out[:1])
    with pytest.raises(ValueError, match="multiple of 128"):
        grouped_linear_fp8_block_triton(torch.randn(2, 2, k, device=DEVICE), weight(200, k))


@pytest.mark.gpu
@pytest.mark.skipif(CPU, reason="needs CUDA")
@pytest.mark.parametrize("n,k", [(1536, 4096), (4096, 8192), (32768, 1024), (4096, 2048)])
def test_gpu_parity_and_invariance(n: int, k: int) -> None:
    """GPU: parity at benchmark shapes and bit-identical rows for M = 1, 7, 64, 257 with the
    automatic launch choice (decode launch for M <= 16, autotuned GEMM launch above: one
    arithmetic). Tolerances: bf16 x (exact products, fp32 MMA sums) 1e-6; fp32 x as fp16 hi + lo
    1e-5; W8A8 on FP8 tensor cores 5e-4 (the FP8 MMA accumulates with fewer bits than fp32 inside
    a 128-K block: 1.3e-4 measured 2026-11-29); the FMA GEMV (M <= 4) 1e-6."""
    w = weight(n, k, seed=11, device="cuda")
    x = torch.randn(257, k, device="cuda")
    for xin, q, tol in ((x.bfloat16(), False, 1e-6), (x, False, 1e-5), (x, True, 5e-4)):
        for m in (1, 16, 257):
            out = linear_fp8_block_triton(xin[:m], w, quantize_input=q)
            err = rel_err(out, linear_fp8_block_ref(xin[:m], w, quantize_input=q))
            assert err <= tol, f"{err=:.3e} {xin.dtype=} {q=} {m=}"
        full = linear_fp8_block_triton(xin, w, quantize_input=q)
        for m in (1, 7, 64):
            part = linear_fp8_block_triton(xin[:m], w, quantize_input=q)
            assert torch.equal(part, full[:m]), f"M={m} {xin.dtype=} {q=}: {first_mismatch(part, full[:m])}"
    xb = x[:4].bfloat16()
    g4 = linear_fp8_block_triton(xb, w, tile="gemv")
    assert rel_err(g4, linear_fp8_block_ref(xb, w)) <= 1e-6
    for m in (1, 2, 3):
        assert torch.equal(linear_fp8_block_triton(xb[:m], w, tile="gemv"), g4[:m]), f"gemv M={m}"
