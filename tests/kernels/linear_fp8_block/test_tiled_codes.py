"""linear_fp8_block: codes in 64 x 128 tiles (`tile_fp8_codes`, issue 9's layout experiment) give the
row-major launch's bits. Only the weight addresses change, so every launch shape — decode (one group
per program, masked and mask-free), prefill, grouped, W8A8 and weight-only — must read the same
values into the same arithmetic."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from tests.kernels.linear_fp8_block.test_linear_fp8_block import DEVICE, first_mismatch, weight

from mxserve.kernels.act_quant import quantize_fp8_block
from mxserve.kernels.linear_fp8_block.triton import launch_linear_fp8_block, tile_fp8_codes


def test_tiles_are_the_row_major_bytes_regrouped() -> None:
    codes = torch.arange(128 * 256, dtype=torch.int64).remainder(251).to(torch.uint8).view(128, 256)
    tiled = tile_fp8_codes(codes)
    assert tiled.shape == (2, 2, 64, 128)
    assert torch.equal(tiled[1, 0], codes[64:, :128]) and torch.equal(tiled[0, 1], codes[:64, 128:])
    assert tiled.is_contiguous()


@pytest.mark.parametrize(("n", "k", "m", "tile"), [
    (128, 512, 1, "decode"),   # split-K decode, mask-free loads
    (192, 384, 3, "decode"),   # three row tiles, three K blocks
    (128, 256, 20, "prefill"),  # the GEMM tile
])
@pytest.mark.parametrize("mode", ["weight_only", "w8a8"])
def test_tiled_codes_give_the_row_major_bits(n: int, k: int, m: int, tile: str, mode: str) -> None:
    w = weight(n, k, seed=n + k)
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(m)).to(DEVICE)
    if mode == "w8a8":
        q, s = quantize_fp8_block(x)
        kw = dict(x_scales=s)
        x = q
    else:
        x, kw = x.bfloat16(), {}
    got = launch_linear_fp8_block(x, w, tile=tile, w_tiled=tile_fp8_codes(w.codes), **kw)
    want = launch_linear_fp8_block(x, w, tile=tile, **kw)
    assert torch.equal(got, want), first_mismatch(got, want)


def test_grouped_launch_reads_each_groups_tiles() -> None:
    """wo_a's block-diagonal launch: group g's rows g·N.. are tiles g·N/64.. of the same tiled tensor."""
    groups, n, k = 2, 64, 256
    w = weight(groups * n, k, seed=5)
    x = torch.randn(3, groups, k, generator=torch.Generator().manual_seed(6)).to(DEVICE).bfloat16()
    got = launch_linear_fp8_block(x, w, groups=groups, tile="decode", w_tiled=tile_fp8_codes(w.codes))
    want = launch_linear_fp8_block(x, w, groups=groups, tile="decode")
    assert torch.equal(got, want), first_mismatch(got, want)


def test_a_wrong_tiled_tensor_is_refused() -> None:
    w = weight(128, 256, seed=1)
    x = torch.randn(1, 256).to(DEVICE).bfloat16()
    with pytest.raises(ValueError, match="w_tiled must be tile_fp8_codes"):
        launch_linear_fp8_block(x, w, w_tiled=w.codes)
    with pytest.raises(ValueError, match="tile_fp8_codes: needs uint8 codes"):
        tile_fp8_codes(torch.zeros(100, 256, dtype=torch.uint8))


@pytest.mark.parametrize("quantize_input", [False, True])
@pytest.mark.parametrize("prep_x", [False, True])
def test_the_public_op_passes_the_tiles_to_every_decode_path(quantize_input: bool, prep_x: bool) -> None:
    """`linear_fp8_block_triton` with w_tiled: the fused-quantization W8A8 launch, the prepared-x
    launch and the plain weight-only launch all give the row-major bits."""
    from mxserve.kernels.linear_fp8_block import triton as launcher
    prev = launcher.set_decode_options(prep_x=prep_x)
    try:
        w = weight(128, 256, seed=7)
        x = torch.randn(2, 256, generator=torch.Generator().manual_seed(8)).to(DEVICE).bfloat16()
        got = launcher.linear_fp8_block_triton(x, w, quantize_input=quantize_input, w_tiled=tile_fp8_codes(w.codes))
        want = launcher.linear_fp8_block_triton(x, w, quantize_input=quantize_input)
    finally:
        launcher.set_decode_options(prev)
    assert torch.equal(got, want), first_mismatch(got, want)
