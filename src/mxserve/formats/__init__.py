"""mxserve.formats: number formats as data and their exact codecs (see docs/architecture.md).

Owns every byte-level fact about DeepSeek-V4's number formats: the format descriptors, scalar
encode/decode, E2M1 packing, block-FP8 and MXFP4 weight quantization, OCP<->FNUZ conversion, the
lossless MXFP4->FP8 repack, activation fake quantization, the fp8_ds_mla KV entry and indexer key
codecs, and `QuantizedWeight`. Everything is plain torch, device-agnostic and exact.
"""

from mxserve.formats.activation_quant import fake_quant_e2m1_pow2, fake_quant_fp8_pow2, fake_quant_pow2
from mxserve.formats.block_fp8 import FP8_AMAX_FLOOR, FP8_BLOCK, dequantize_fp8_block, quantize_fp8_block
from mxserve.formats.blocks import block_grid
from mxserve.formats.bytes_view import as_uint8_bytes
from mxserve.formats.codec import code_value, decode, decode_table, encode, round_to_format
from mxserve.formats.compare import assert_tensors_equal, assert_within
from mxserve.formats.descriptor import (
    ALL_FORMATS,
    E2M1,
    E4M3FN,
    E4M3FNUZ,
    E5M2,
    FORMATS_BY_NAME,
    INT8,
    UE8M0,
    FloatFormat,
    NanEncoding,
)
from mxserve.formats.ds_mla_entry import (
    DS_MLA_DATA_BYTES,
    DS_MLA_ENTRY_BYTES,
    DS_MLA_SCALE_BYTES,
    decode_ds_mla,
    decode_ds_mla_parts,
    encode_ds_mla,
    encode_ds_mla_parts,
)
from mxserve.formats.fnuz import fp8_fnuz_to_ocp, fp8_ocp_to_fnuz
from mxserve.formats.indexer_key import (
    decode_indexer_key_fp8,
    decode_indexer_key_mxfp4,
    encode_indexer_key_fp8,
    encode_indexer_key_mxfp4,
)
from mxserve.formats.mxfp4 import MXFP4_AMAX_FLOOR, MXFP4_BLOCK, dequantize_mxfp4, quantize_mxfp4
from mxserve.formats.packing import pack_e2m1, unpack_e2m1
from mxserve.formats.pow2 import exp2_int, pow2_ceil_exponent, ue8m0_byte, ue8m0_value
from mxserve.formats.quantized_weight import QuantizedWeight, WeightLayout
from mxserve.formats.repack import mxfp4_to_fp8_block

__all__ = [
    "ALL_FORMATS",
    "DS_MLA_DATA_BYTES",
    "DS_MLA_ENTRY_BYTES",
    "DS_MLA_SCALE_BYTES",
    "E2M1",
    "E4M3FN",
    "E4M3FNUZ",
    "E5M2",
    "FORMATS_BY_NAME",
    "FP8_AMAX_FLOOR",
    "FP8_BLOCK",
    "INT8",
    "MXFP4_AMAX_FLOOR",
    "MXFP4_BLOCK",
    "UE8M0",
    "FloatFormat",
    "NanEncoding",
    "QuantizedWeight",
    "WeightLayout",
    "as_uint8_bytes",
    "assert_tensors_equal",
    "assert_within",
    "block_grid",
    "code_value",
    "decode",
    "decode_ds_mla",
    "decode_ds_mla_parts",
    "decode_indexer_key_fp8",
    "decode_indexer_key_mxfp4",
    "decode_table",
    "dequantize_fp8_block",
    "dequantize_mxfp4",
    "encode",
    "encode_ds_mla",
    "encode_ds_mla_parts",
    "encode_indexer_key_fp8",
    "encode_indexer_key_mxfp4",
    "exp2_int",
    "fake_quant_e2m1_pow2",
    "fake_quant_fp8_pow2",
    "fake_quant_pow2",
    "fp8_fnuz_to_ocp",
    "fp8_ocp_to_fnuz",
    "mxfp4_to_fp8_block",
    "pack_e2m1",
    "pow2_ceil_exponent",
    "quantize_fp8_block",
    "quantize_mxfp4",
    "round_to_format",
    "ue8m0_byte",
    "ue8m0_value",
    "unpack_e2m1",
]
