"""linear_fp8_block: the single-launch ordered split-K (fused sum) against the two-launch twin.

Under the interpreter the programs of a grid run one after another (axis 2, the split axis,
innermost), so "which program arrives last" is fixed there; the tests rotate the split index
(`_SPLIT_ROTATE`) to make another split the last arrival and require the same bits. What the
interpreter cannot show — concurrent arrivals, memory ordering — the GPU tests and
`benchmarks/kernels.py --check` cover on the H200.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from tests.kernels.linear_fp8_block.test_linear_fp8_block import DEVICE, first_mismatch, weight

from mxserve.kernels.linear_fp8_block import triton as launcher
from mxserve.kernels.linear_fp8_block.triton import (
    grouped_linear_fp8_block_triton,
    kb_per_group,
    launch_linear_fp8_block,
    linear_fp8_block_triton,
    prepare_activation_fp16,
    split_counters,
)


def _num_groups(n: int, k: int) -> int:
    num_kb = -(-k // 128)
    return -(-num_kb // kb_per_group(n, k))


def _counters_clean() -> bool:
    buf = split_counters(torch.device(DEVICE), 0)
    return bool((buf == 0).all())


@pytest.mark.parametrize("variant", ["bf16", "w8a8"])
def test_fused_equals_two_launch_bitwise(variant: str) -> None:
    """Decode: the fused sum gives the two-launch bits, also when split 0 rather than the last
    split arrives last; the counters are back at 0 after every call. N and K are not multiples of
    the block (72 = 64 + 8 features, 700 = 5·128 + 60 channels: 6 splits)."""
    n, k, m = 72, 700, 5
    assert _num_groups(n, k) == 6
    w = weight(n, k, seed=n)
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(k)).to(DEVICE)
    xin = x.bfloat16() if variant == "bf16" else x
    q = variant == "w8a8"
    twin = linear_fp8_block_triton(xin, w, quantize_input=q, split_sum="two_launch")
    for rotate in (0, 1):
        launcher._SPLIT_ROTATE["value"] = rotate
        try:
            fused = linear_fp8_block_triton(xin, w, quantize_input=q, split_sum="fused")
        finally:
            launcher._SPLIT_ROTATE["value"] = 0
        assert torch.equal(fused, twin), f"rotate={rotate}: {first_mismatch(fused, twin)}"
        assert _counters_clean()


def test_fused_batch_invariance_and_m_tiles() -> None:
    """Rows of M = 1 and 7 (fused, one 16-row tile) equal those of M = 40 with the decode tile
    forced (fused, three row tiles, partial last tile) and of M = 40 through the prefill path
    (two-launch split): the bits do not depend on M, the tile or the summation path."""
    n, k = 72, 520
    w = weight(n, k, seed=21)
    x = torch.randn(40, k, generator=torch.Generator().manual_seed(4)).to(DEVICE).bfloat16()
    forced = linear_fp8_block_triton(x, w, tile="decode")
    prefill = linear_fp8_block_triton(x, w, tile="prefill")
    assert torch.equal(forced, prefill), first_mismatch(forced, prefill)
    for m in (1, 7):
        part = linear_fp8_block_triton(x[:m], w)
        assert torch.equal(part, prefill[:m]), f"M={m}: {first_mismatch(part, prefill[:m])}"
    assert _counters_clean()


def test_one_group_layer_decode_matches_prefill() -> None:
    """K <= 128: one group, so decode stores straight from the one-group-per-program code (no
    partials, no counters); its rows equal the in-program (prefill) path's bit for bit."""
    n, k = 200, 100
    assert _num_groups(n, k) == 1
    w = weight(n, k, seed=22)
    x = torch.randn(24, k, generator=torch.Generator().manual_seed(5)).to(DEVICE)
    full = linear_fp8_block_triton(x, w, tile="prefill")
    for m in (1, 7):
        part = linear_fp8_block_triton(x[:m], w)
        assert torch.equal(part, full[:m]), f"M={m}: {first_mismatch(part, full[:m])}"


def test_grouped_fused_equals_two_launch() -> None:
    """wo_a's grouped launch (groups on grid axis 2 with the splits): one counter per (group, tile)."""
    g, r, k = 3, 128, 300
    w = weight(g * r, k, seed=23)
    x = torch.randn(5, g, k, generator=torch.Generator().manual_seed(6)).to(DEVICE).bfloat16()
    fused = grouped_linear_fp8_block_triton(x, w, split_sum="fused")
    twin = grouped_linear_fp8_block_triton(x, w, split_sum="two_launch")
    assert torch.equal(fused, twin), first_mismatch(fused, twin)
    assert _counters_clean()


def test_prepared_activations_give_the_in_kernel_bits() -> None:
    """The experiment path (activations scaled by their own launch, X_MODE 3) equals the in-kernel
    preparation bit for bit: decode (fused) and the one-group decode; bad inputs are refused."""
    for n, k in ((72, 700), (64, 100)):
        w = weight(n, k, seed=24)
        x = torch.randn(5, k, generator=torch.Generator().manual_seed(7)).to(DEVICE).bfloat16()
        x[0, :128] *= 2.0**60  # an extreme block: the scaling must match exactly
        x[1] = 0.0
        hi, inv = prepare_activation_fp16(x)
        assert hi.dtype == torch.float16 and inv.shape == (5, -(-k // 128))
        expect = linear_fp8_block_triton(x, w)
        out = launch_linear_fp8_block(hi, w, x_inv=inv)
        assert torch.equal(out, expect), f"{(n, k)}: {first_mismatch(out, expect)}"
    with pytest.raises(ValueError, match="x_inv"):
        launch_linear_fp8_block(hi.float(), w, x_inv=inv)
    with pytest.raises(ValueError, match="prepare_activation_fp16"):
        prepare_activation_fp16(x.float())


def test_counter_pool_grows_and_keeps_old_buffers(monkeypatch: pytest.MonkeyPatch) -> None:
    device = torch.device("cpu")
    monkeypatch.setattr(launcher, "_counters", {})
    monkeypatch.setattr(launcher, "_outgrown_counters", [])
    monkeypatch.setattr(launcher, "_MIN_COUNTERS", 8)
    first = split_counters(device, 5)
    assert first.numel() == 8 and first.dtype == torch.int32 and not first.any()
    assert split_counters(device, 8) is first
    grown = split_counters(device, 9)
    assert grown.numel() == 16 and launcher._outgrown_counters == [first]


def test_split_sum_validation() -> None:
    w = weight(64, 256)
    with pytest.raises(ValueError, match="split_sum="):
        linear_fp8_block_triton(torch.randn(2, 256, device=DEVICE), w, split_sum="three_launch")
    with pytest.raises(ValueError, match="mode="):
        launcher.set_split_sum("never")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("n,k", [(1536, 4096), (4096, 8192), (4096, 2048)])
def test_gpu_fused_equals_two_launch_eager_and_graph(n: int, k: int) -> None:
    """GPU: fused == two launches bit for bit, 20 calls in a row (concurrent arrivals: a missing
    release/acquire would show as an occasional mismatch), and under CUDA-graph replay on fresh
    inputs (the counters reset inside the graph); counters all 0 afterwards."""
    w = weight(n, k, seed=12, device="cuda")
    x = torch.randn(16, k, device="cuda")
    for xin, q in ((x.bfloat16(), False), (x, True)):
        for m in (1, 7, 16):
            twin = linear_fp8_block_triton(xin[:m], w, quantize_input=q, split_sum="two_launch")
            for _ in range(20):
                fused = linear_fp8_block_triton(xin[:m], w, quantize_input=q, split_sum="fused")
                assert torch.equal(fused, twin), f"{m=} {q=}: {first_mismatch(fused, twin)}"
        static_x = xin.clone()
        graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            linear_fp8_block_triton(static_x, w, quantize_input=q)  # warm-up: autotuning, counters
        torch.cuda.current_stream().wait_stream(stream)
        with torch.cuda.graph(graph):
            static_out = linear_fp8_block_triton(static_x, w, quantize_input=q)
        for i in range(5):
            static_x.copy_(xin * (i + 1))
            graph.replay()
            expect = linear_fp8_block_triton(static_x, w, quantize_input=q, split_sum="two_launch")
            assert torch.equal(static_out, expect), f"replay {i} {q=}: {first_mismatch(static_out, expect)}"
    assert bool((split_counters(torch.device("cuda", torch.cuda.current_device()), 0) == 0).all())
