"""linear_fp8_block / linear_bf16: the decode launch above 16 rows (MXSERVE_LINEAR_DECODE_MAX_M).

With the switch at 64, M = 17..64 runs cdiv(M, 16) row tiles of the decode launch — fused split-sum,
and (W8A8) the activation quantization inside the programs — as ONE launch, where 16 (the off switch)
takes act_quant + the prefill GEMM + `_sum_groups_kernel`; unset, the layer size decides (`decode_max_m`). The launcher's docstring says both tiles have
the same arithmetic; these tests hold it to that under the interpreter: the same bits switch on vs
off at M = 17, 33, 64 (partial and whole last row tiles), W8A8 and weight-only, fp32 and bf16 out,
and a row's bits do not depend on M. What only the H200 shows (the MMA's own summation at 16 vs
64/128-token tiles, concurrent arrivals, graph replay) is benchmarks/gpu_s8_linear64.sh's.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from tests.kernels.linear_fp8_block.test_fused_act_quant import _activations, _same_bits
from tests.kernels.linear_fp8_block.test_linear_fp8_block import DEVICE, first_mismatch, weight

from mxserve.kernels.linear_bf16 import triton as bf16_launcher
from mxserve.kernels.linear_bf16.triton import linear_bf16_triton
from mxserve.kernels.linear_fp8_block import triton as launcher
from mxserve.kernels.linear_fp8_block.triton import (
    DECODE_MAX_M_ENV,
    DecodeOptions,
    decode_max_m,
    linear_fp8_block_triton,
    split_counters,
)

ROWS = (17, 33, 64)


def _counters_clean() -> bool:
    return bool((split_counters(torch.device(DEVICE), 0) == 0).all())


def _refuse(*_args, **_kw):
    raise AssertionError("a second launch ran where the decode launch should do all the work")


class _RefusedKernel:
    """Stands in for a Triton kernel that must not be launched: `kernel[grid](...)` raises."""

    def __getitem__(self, _grid):
        return _refuse


def _no_extra_launches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the act_quant launch and the split-sum launch fail if anything takes them."""
    monkeypatch.setattr(launcher, "quantize_fp8_block", _refuse)
    monkeypatch.setattr(launcher, "_sum_groups_kernel", _RefusedKernel())


def test_switch_parsing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DECODE_MAX_M_ENV, raising=False)  # the rule: small layers 64 rows, the rest 16
    assert decode_max_m(2048, 128) == decode_max_m(256, 1024) == 64
    assert decode_max_m(4096, 256) == decode_max_m(1536, 4096) == 16
    monkeypatch.setenv(DECODE_MAX_M_ENV, "64")
    assert decode_max_m(1536, 4096) == 64
    monkeypatch.setenv(DECODE_MAX_M_ENV, "16")
    assert decode_max_m(256, 256) == 16
    for bad in ("8", "65", "x"):
        monkeypatch.setenv(DECODE_MAX_M_ENV, bad)
        with pytest.raises(ValueError, match=DECODE_MAX_M_ENV):
            decode_max_m(256, 256)
    assert DecodeOptions(fused_act_quant_max_m=64).fused_act_quant_max_m == 64
    with pytest.raises(ValueError, match="fused_act_quant_max_m"):
        DecodeOptions(fused_act_quant_max_m=65)


@pytest.mark.parametrize("quantize_input", [True, False])
def test_switch_on_equals_off_and_rows_invariant(quantize_input: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Switch at 64 (one decode launch: the act_quant and sum launches refused) gives the default
    path's bits (act_quant codes, prefill tile, split-sum launch) at each M, bf16 out (and fp32 out
    at the last M); with the switch on, a row's bits do not depend on M (M = 1: W8A8 quantizes only
    the live row). 40 x 200: a partial feature tile and K block, 2 splits. The default path's act_quant runs as its torch twin here
    (MXSERVE_DISABLE_TRITON_ACT_QUANT: the interpreted kernel takes seconds at 64 rows; the two are
    bit-identical, tests/kernels/act_quant). W8A8 also: a fused quantization capped at 16 rows
    (act_quant launch + decode launch) gives the same bits."""
    monkeypatch.setenv("MXSERVE_DISABLE_TRITON_ACT_QUANT", "1")
    n, k, rows = 40, 200, ROWS
    w = weight(n, k, seed=n + k)
    x = _activations(64, k, seed=k)
    xin = x if quantize_input else x.bfloat16()
    cases = [(m, torch.bfloat16) for m in rows] + [(rows[-1], None)]
    monkeypatch.setenv(DECODE_MAX_M_ENV, "16")
    off = [linear_fp8_block_triton(xin[:m], w, quantize_input=quantize_input, out_dtype=dt) for m, dt in cases]
    with monkeypatch.context() as patched:
        patched.setenv(DECODE_MAX_M_ENV, "64")
        _no_extra_launches(patched)
        on = [linear_fp8_block_triton(xin[:m], w, quantize_input=quantize_input, out_dtype=dt) for m, dt in cases]
        for (m, dt), got, expect in zip(cases, on, off, strict=True):
            assert _same_bits(got, expect), f"{m=} {dt=}: {first_mismatch(got, expect)}"
        one = linear_fp8_block_triton(xin[:1], w, quantize_input=quantize_input, out_dtype=torch.bfloat16)
        for got in (one, *on[:-1]):
            m = got.shape[0]
            assert _same_bits(got, on[-2][:m]), f"rows of {m=}: {first_mismatch(got, on[-2][:m])}"
    if quantize_input:
        monkeypatch.setenv(DECODE_MAX_M_ENV, "64")
        prev = launcher.set_decode_options(fused_act_quant_max_m=16)
        try:
            capped = linear_fp8_block_triton(x[:rows[-1]], w, quantize_input=True)
        finally:
            launcher.set_decode_options(prev)
        assert _same_bits(capped, on[-1]), first_mismatch(capped, on[-1])
    assert _counters_clean()


def test_even_shape_switch_on_equals_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """128 x 256, the mask-free (EVEN) loads, 2 splits: switch on == off at M = 33, W8A8 and
    weight-only, bf16 out."""
    monkeypatch.setenv("MXSERVE_DISABLE_TRITON_ACT_QUANT", "1")
    w = weight(128, 256, seed=5)
    x = _activations(33, 256, seed=6)
    for q, xin in ((True, x), (False, x.bfloat16())):
        monkeypatch.setenv(DECODE_MAX_M_ENV, "16")
        off = linear_fp8_block_triton(xin, w, quantize_input=q, out_dtype=torch.bfloat16)
        monkeypatch.setenv(DECODE_MAX_M_ENV, "64")
        on = linear_fp8_block_triton(xin, w, quantize_input=q, out_dtype=torch.bfloat16)
        assert _same_bits(on, off), f"{q=}: {first_mismatch(on, off)}"
    assert _counters_clean()


def test_bf16_linear_switch_on_equals_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """linear_bf16 takes the same switch: M = 33 in one launch (fused sum) == the prefill tile's split
    + sum launch, bf16 out."""
    n, k = 40, 300
    w = (torch.randn(n, k, generator=torch.Generator().manual_seed(3)) * 0.05).bfloat16().to(DEVICE)
    x = torch.randn(33, k, generator=torch.Generator().manual_seed(4)).to(DEVICE).bfloat16()
    monkeypatch.setenv(DECODE_MAX_M_ENV, "16")
    off = linear_bf16_triton(x, w, out_dtype=torch.bfloat16)
    monkeypatch.setenv(DECODE_MAX_M_ENV, "64")
    monkeypatch.setattr(bf16_launcher, "_sum_groups_kernel", _RefusedKernel())
    on = linear_bf16_triton(x, w, out_dtype=torch.bfloat16)
    assert _same_bits(on, off), first_mismatch(on, off)
    assert _counters_clean()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("n,k", [(1536, 4096)])
def test_gpu_switch_on_equals_off_eager_and_graph(n: int, k: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """GPU: switch on == off bit for bit at M = 17, 33, 64 (W8A8 and weight-only, bf16 out), 10 calls
    in a row (concurrent arrivals of the fused sum), and under CUDA-graph replay of M = 64 on fresh
    inputs; counters all 0 afterwards."""
    w = weight(n, k, seed=12, device="cuda")
    x = torch.randn(64, k, device="cuda")
    for q, xin in ((True, x), (False, x.bfloat16())):
        monkeypatch.setenv(DECODE_MAX_M_ENV, "16")
        off = {m: linear_fp8_block_triton(xin[:m], w, quantize_input=q, out_dtype=torch.bfloat16) for m in ROWS}
        monkeypatch.setenv(DECODE_MAX_M_ENV, "64")
        for m in ROWS:
            for _ in range(10):
                on = linear_fp8_block_triton(xin[:m], w, quantize_input=q, out_dtype=torch.bfloat16)
                assert _same_bits(on, off[m]), f"{m=} {q=}: {first_mismatch(on, off[m])}"
        static_x = xin.clone()
        graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            linear_fp8_block_triton(static_x, w, quantize_input=q, out_dtype=torch.bfloat16)  # warm-up
        torch.cuda.current_stream().wait_stream(stream)
        with torch.cuda.graph(graph):
            static_out = linear_fp8_block_triton(static_x, w, quantize_input=q, out_dtype=torch.bfloat16)
        for i in range(3):
            static_x.copy_(xin * (i + 1))
            graph.replay()
            monkeypatch.setenv(DECODE_MAX_M_ENV, "16")
            expect = linear_fp8_block_triton(static_x, w, quantize_input=q, out_dtype=torch.bfloat16)
            monkeypatch.setenv(DECODE_MAX_M_ENV, "64")
            assert _same_bits(static_out, expect), f"replay {i} {q=}: {first_mismatch(static_out, expect)}"
    assert bool((split_counters(torch.device("cuda", torch.cuda.current_device()), 0) == 0).all())
