"""Device-agnostic: every codec gives the same bytes and values on CUDA as on CPU (skipped without CUDA)."""

from __future__ import annotations

import pytest
import torch

from mxserve.formats import (
    ALL_FORMATS,
    E2M1,
    UE8M0,
    assert_tensors_equal,
    decode,
    decode_ds_mla,
    dequantize_fp8_block,
    dequantize_mxfp4,
    encode,
    encode_ds_mla,
    encode_indexer_key_fp8,
    fake_quant_e2m1_pow2,
    fake_quant_fp8_pow2,
    fp8_ocp_to_fnuz,
    mxfp4_to_fp8_block,
    quantize_fp8_block,
    quantize_mxfp4,
)

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


def same_on_cuda(fn, *args, what: str) -> None:
    cpu = fn(*args)
    gpu = fn(*(a.cuda() if isinstance(a, torch.Tensor) else a for a in args))
    cpu, gpu = (cpu, gpu) if isinstance(cpu, tuple) else ((cpu,), (gpu,))
    for i, (c, g) in enumerate(zip(cpu, gpu, strict=True)):
        assert g.device.type == "cuda", f"{what}[{i}] came back on {g.device}"
        assert_tensors_equal(g, c, f"{what}[{i}] cuda vs cpu", signed_zeros=True)


def test_codecs_match_cpu_bit_for_bit():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4096, generator=g) * torch.exp2(torch.randint(-30, 20, (4096,), generator=g).float())
    for fmt in ALL_FORMATS:
        codes = torch.arange(fmt.num_codes, dtype=torch.uint8)
        same_on_cuda(lambda c, f=fmt: decode(c, f), codes, what=f"decode {fmt}")
        if fmt is not UE8M0:
            same_on_cuda(lambda v, f=fmt: encode(v, f), x, what=f"encode {fmt}")
    same_on_cuda(lambda v: encode(v, UE8M0), x.abs(), what="encode ue8m0")
    same_on_cuda(lambda v: encode(v, E2M1), x.double(), what="encode e2m1 float64")


def test_quantizers_and_entry_codecs_match_cpu():
    g = torch.Generator().manual_seed(1)
    w = torch.randn(300, 259, generator=g)
    same_on_cuda(quantize_fp8_block, w, what="quantize_fp8_block")
    same_on_cuda(quantize_mxfp4, w, what="quantize_mxfp4")
    codes, scales = quantize_fp8_block(w)
    same_on_cuda(dequantize_fp8_block, codes, scales, what="dequantize_fp8_block")
    same_on_cuda(fp8_ocp_to_fnuz, codes, scales, what="fp8_ocp_to_fnuz")
    packed, mx_scales = quantize_mxfp4(w)
    same_on_cuda(
        lambda p, s: dequantize_mxfp4(p, s, num_cols=259), packed, mx_scales, what="dequantize_mxfp4"
    )
    same_on_cuda(lambda p, s: mxfp4_to_fp8_block(p, s, 259), packed, mx_scales, what="mxfp4_to_fp8_block")
    x = torch.randn(7, 512, generator=g).to(torch.bfloat16)
    same_on_cuda(encode_ds_mla, x, what="encode_ds_mla")
    same_on_cuda(decode_ds_mla, encode_ds_mla(x), what="decode_ds_mla")
    same_on_cuda(encode_indexer_key_fp8, x[:, :128], what="encode_indexer_key_fp8")
    same_on_cuda(fake_quant_fp8_pow2, x, what="fake_quant_fp8_pow2")
    same_on_cuda(fake_quant_e2m1_pow2, x, what="fake_quant_e2m1_pow2")
