"""fp8_ds_mla entry codec (spec §8.1): byte positions, writer rule, round-trip bound."""

from __future__ import annotations

import math

import pytest
import torch

from mxserve.formats import (
    DS_MLA_DATA_BYTES,
    DS_MLA_ENTRY_BYTES,
    DS_MLA_SCALE_BYTES,
    E4M3FN,
    assert_tensors_equal,
    assert_within,
    decode_ds_mla,
    decode_ds_mla_parts,
    encode,
    encode_ds_mla,
    encode_ds_mla_parts,
    fake_quant_fp8_pow2,
)

from .test_block_fp8 import half_ulp_bound


def test_sizes():
    assert (DS_MLA_ENTRY_BYTES, DS_MLA_DATA_BYTES, DS_MLA_SCALE_BYTES) == (584, 576, 8)


def test_hand_built_entry_bytes_at_exact_offsets():
    x = torch.zeros(512)
    x[0] = 448.0  # block 0: amax 448 -> e 0 -> byte 127, code 0x7E
    x[1] = -1.0  # 0xB8 at scale 1
    x[64] = 3.0  # block 1: amax 3 -> 3/448 -> 2^-7 -> byte 120; 3 * 2^7 = 384 -> 0x7C
    x[65] = 2.0**-7 * 0.5  # 0.5 at scale 2^-7 -> 0x30
    x[
        447
    ] = -1e-5  # block 6: amax floor 1e-4 -> e -22 -> byte 105; bf16(-1e-5) * 2^22 = -42 (a tie) -> -40 = 0xE2
    x[448] = 1.0  # RoPE: bf16 0x3F80 -> bytes 0x80, 0x3F
    x[449] = -2.5  # bf16 0xC020 -> 0x20, 0xC0
    x[511] = 1.0 + 2.0**-8  # rounds to bf16 1.0 (tie to even) -> 0x80, 0x3F
    e = encode_ds_mla(x)
    assert e.shape == (584,) and e.dtype == torch.uint8
    assert e[0] == 0x7E and e[1] == 0xB8 and e[2] == 0x00
    assert e[64] == 0x7C and e[65] == 0x30
    assert e[447] == 0xE2, hex(int(e[447]))
    assert e[448:452].tolist() == [0x80, 0x3F, 0x20, 0xC0]
    assert e[574:576].tolist() == [0x80, 0x3F]
    assert e[576:583].tolist() == [127, 120, 105, 105, 105, 105, 105]
    assert e[583] == 0  # pad byte
    d = decode_ds_mla(e)
    assert d[0] == 448.0 and d[1] == -1.0 and d[64] == 3.0 and d[65] == 2.0**-8
    assert d[447] == -40 * 2.0**-22 and d[448] == 1.0 and d[449] == -2.5 and d[511] == 1.0


def test_writer_rounds_to_bf16_before_the_block_amax():
    # 448.5 is not a bf16 value: it rounds to 448 first, so the block keeps scale 2^0 (byte 127);
    # without the bf16 step the amax 448.5 > 448 would pick 2^1
    x = torch.zeros(512, dtype=torch.float32)
    x[0] = 448.5
    assert float(torch.tensor(448.5).to(torch.bfloat16)) == 448.0
    assert encode_ds_mla(x)[576] == 127


def test_scale_byte_clamp():
    # bf16's largest finite value gives e = ceil(log2(3.39e38 / 448)) = 120 -> byte 247, the top
    # of the finite range the writer can meet; the clamp to 254 can only bind for non-finite x
    x = torch.zeros(512)
    x[0] = float(torch.finfo(torch.bfloat16).max)
    assert encode_ds_mla(x)[576] == 247
    x[0] = math.inf
    entry = encode_ds_mla(x)
    assert entry[576] == 254  # never 255 (NaN)


def test_round_trip_matches_fake_quant_and_bound():
    g = torch.Generator().manual_seed(0)
    x = (
        torch.randn(3, 17, 512, generator=g) * torch.exp2(torch.randint(-12, 8, (3, 17, 1), generator=g))
    ).to(torch.bfloat16)
    entries = encode_ds_mla(x)
    assert entries.shape == (3, 17, 584)
    y = decode_ds_mla(entries)
    assert y.dtype == torch.float32 and y.shape == (3, 17, 512)
    # the NoPE part is exactly the reference's act_quant with blocks of 64, the RoPE part exact
    assert_tensors_equal(
        y[..., :448], fake_quant_fp8_pow2(x[..., :448], block=64).float(), "nope == act_quant"
    )
    assert_tensors_equal(y[..., 448:], x[..., 448:].float(), "rope exact")
    scales = torch.exp2(entries[..., 576:583].float() - 127).repeat_interleave(64, dim=-1)
    xf = x[..., :448].float()
    assert_within(y[..., :448], xf, half_ulp_bound(xf, scales, E4M3FN), "nope half-ulp")
    assert bool((entries[..., 583] == 0).all())


def test_parts_are_the_entry_split_and_codes_are_e4m3fn():
    x = torch.randn(5, 512)
    data, scales = encode_ds_mla_parts(x)
    assert data.shape == (5, 576) and scales.shape == (5, 8)
    assert_tensors_equal(torch.cat([data, scales], -1), encode_ds_mla(x), "parts == entry")
    assert_tensors_equal(decode_ds_mla_parts(data, scales), decode_ds_mla(encode_ds_mla(x)), "decode parts")
    s = torch.exp2(scales[:, :7].float() - 127).repeat_interleave(64, dim=-1)
    xb = x.to(torch.bfloat16).float()[:, :448]
    assert_tensors_equal(data[:, :448], encode((xb / s).clamp(-448, 448), E4M3FN), "codes")


def test_shape_errors():
    with pytest.raises(ValueError, match="512"):
        encode_ds_mla(torch.zeros(511))
    with pytest.raises(ValueError, match="584"):
        decode_ds_mla(torch.zeros(576, dtype=torch.uint8))
    assert encode_ds_mla(torch.zeros(0, 512)).shape == (0, 584)
