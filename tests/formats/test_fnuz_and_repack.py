"""OCP<->FNUZ conversion (spec §9) and the lossless MXFP4 -> FP8 block repack (spec §6.6)."""

from __future__ import annotations

import pytest
import torch

from mxserve.formats import (
    E4M3FN,
    E4M3FNUZ,
    assert_tensors_equal,
    dequantize_fp8_block,
    dequantize_mxfp4,
    fp8_fnuz_to_ocp,
    fp8_ocp_to_fnuz,
    mxfp4_to_fp8_block,
    quantize_fp8_block,
    quantize_mxfp4,
)

from .test_block_fp8 import random_weights

# --- FNUZ -------------------------------------------------------------------------------------


def every_finite_ocp_code_grid() -> tuple[torch.Tensor, torch.Tensor]:
    """All 254 non-NaN e4m3fn codes (incl. -0 = 0x80) in 2x2 blocks of 128 rows, with 4 scales."""
    codes = torch.tensor([c for c in range(256) if c & 0x7F != 0x7F], dtype=torch.uint8)
    codes = codes.repeat(2).reshape(254, 2)  # 254 rows, 2 cols
    scales = torch.tensor([[0], [253]], dtype=torch.uint8)  # extremes that still have room
    return codes, scales


def test_ocp_to_fnuz_values_equal_exactly_for_every_code():
    codes, scales = every_finite_ocp_code_grid()
    fz_codes, fz_scales = fp8_ocp_to_fnuz(codes, scales)
    assert fz_scales.tolist() == [[1], [254]]
    assert bool((fz_codes != 0x80).all()), "FNUZ NaN written"
    ocp = dequantize_fp8_block(codes, scales, E4M3FN)
    fnuz = dequantize_fp8_block(fz_codes, fz_scales, E4M3FNUZ)
    assert_tensors_equal(fnuz, ocp, "FNUZ values vs OCP values")
    # and back: bytes identical except that -0 came back as +0
    back_codes, back_scales = fp8_fnuz_to_ocp(fz_codes, fz_scales)
    assert_tensors_equal(back_scales, scales, "scales round trip")
    assert_tensors_equal(back_codes, torch.where(codes == 0x80, 0, codes), "codes round trip")


def test_fnuz_round_trip_on_quantized_weights():
    w = random_weights((300, 260), seed=11, spread=5)
    codes, scales = quantize_fp8_block(w)
    fz = fp8_ocp_to_fnuz(codes, scales)
    assert_tensors_equal(dequantize_fp8_block(*fz, E4M3FNUZ), dequantize_fp8_block(codes, scales), "values")
    back = fp8_fnuz_to_ocp(*fz)
    assert_tensors_equal(
        dequantize_fp8_block(*back), dequantize_fp8_block(codes, scales), "values after round trip"
    )


def test_fnuz_conversion_refuses_what_it_cannot_convert():
    ok_scales = torch.tensor([[127]], dtype=torch.uint8)
    with pytest.raises(ValueError, match="0x7F"):
        fp8_ocp_to_fnuz(torch.tensor([[0x7F]], dtype=torch.uint8), ok_scales)
    with pytest.raises(ValueError, match="0xFF"):
        fp8_ocp_to_fnuz(torch.tensor([[1, 0xFF]], dtype=torch.uint8), ok_scales)
    with pytest.raises(ValueError, match="scale byte 254"):
        fp8_ocp_to_fnuz(torch.zeros(1, 1, dtype=torch.uint8), torch.tensor([[254]], dtype=torch.uint8))
    with pytest.raises(ValueError, match="scale byte 255"):
        fp8_ocp_to_fnuz(torch.zeros(1, 1, dtype=torch.uint8), torch.tensor([[255]], dtype=torch.uint8))
    with pytest.raises(ValueError, match="0x80"):
        fp8_fnuz_to_ocp(torch.tensor([[0x80]], dtype=torch.uint8), ok_scales)
    with pytest.raises(ValueError, match="240"):
        fp8_fnuz_to_ocp(torch.tensor([[0x7F]], dtype=torch.uint8), ok_scales)
    with pytest.raises(ValueError, match="scale byte 0"):
        fp8_fnuz_to_ocp(torch.zeros(1, 1, dtype=torch.uint8), torch.tensor([[0]], dtype=torch.uint8))


# --- MXFP4 -> FP8 repack ---------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(256, 256), (300, 200), (1, 1), (129, 33), (0, 64), (5, 0)])
def test_repack_is_bit_exact(shape):
    w = random_weights(shape, seed=shape[0] * 1000 + shape[1], spread=2)
    packed, scales = quantize_mxfp4(w)
    codes, tile_scales = mxfp4_to_fp8_block(packed, scales, num_cols=shape[1])
    assert codes.shape == shape and tile_scales.shape == (-(-shape[0] // 128), -(-shape[1] // 128))
    assert_tensors_equal(
        dequantize_fp8_block(codes, tile_scales),
        dequantize_mxfp4(packed, scales, num_cols=shape[1]),
        f"repack {shape}",
        signed_zeros=True,
    )


def test_repack_uses_tile_max_over_64_and_reaches_the_8_binade_limit():
    # one tile whose groups span exactly 14 binades (d = +6 .. -8): still exact
    codes4 = torch.full((128, 128), 0x1, dtype=torch.uint8)  # every value 0.5 (the hardest one)
    packed = (codes4[:, 0::2] | (codes4[:, 1::2] << 4)).contiguous()
    scales = torch.full((128, 4), 100, dtype=torch.uint8)
    scales[0, 0] = 114  # max: tile byte = 114 - 6 = 108; 100 - 108 = -8
    codes, tile_scales = mxfp4_to_fp8_block(packed, scales)
    assert tile_scales.tolist() == [[108]]
    assert int(codes[1, 0]) == 0x01  # 0.5 * 2^-8 = 2^-9: e4m3fn's smallest subnormal
    assert_tensors_equal(
        dequantize_fp8_block(codes, tile_scales), dequantize_mxfp4(packed, scales), "limit case"
    )


def test_repack_raises_on_too_wide_scale_spread_naming_the_tile():
    packed = torch.full((200, 64), 0x11, dtype=torch.uint8)  # all values 0.5
    scales = torch.full((200, 4), 120, dtype=torch.uint8)
    scales[130, 1] = 135  # tile (1, 0): tile byte 129, the other groups are 9 binades below
    with pytest.raises(ValueError, match=r"tile \(1, 0\)"):
        mxfp4_to_fp8_block(packed, scales)
    # an all-zero group may sit arbitrarily far below: nothing to lose
    packed2 = packed.clone()
    packed2[128:, :] = 0
    packed2[130, 16:32] = 0x77  # only the high-scale group holds values
    codes, tile_scales = mxfp4_to_fp8_block(packed2, scales)
    assert_tensors_equal(
        dequantize_fp8_block(codes, tile_scales), dequantize_mxfp4(packed2, scales), "zero groups"
    )


def test_repack_rejects_nan_scales():
    with pytest.raises(ValueError, match="NaN"):
        mxfp4_to_fp8_block(torch.zeros(1, 16, dtype=torch.uint8), torch.tensor([[255]], dtype=torch.uint8))
