"""The two named numeric modes of the reference model (docs/numerics.md).

- `exact`: fp32 math everywhere, fp32 cache rows, no activation quantization. It computes the
  model's real-valued function as closely as fp32 allows; the transformers oracle is compared
  in this mode. (A BF16 cache would round every cached K/V to 8 mantissa bits, ~2e-3 relative,
  which alone exceeds the 1e-4 oracle gate, so the exact mode keeps cache rows in fp32; the
  `bf16` cache is available as an explicit choice.)
- `faithful` (default): the QAT simulation the checkpoint was trained with (spec §7): BF16
  residual streams, FP8 activation quantization (per token × 128 channels, power-of-two scales)
  before every FP8/FP4 GEMM, the `fp8_ds_mla` KV cache (NoPE FP8 in 64-channel blocks, RoPE
  BF16), FP8 indexer keys, compressed entries rounded to BF16 before their norm, fp32 logits.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import torch


class NumericMode(StrEnum):
    EXACT = "exact"
    FAITHFUL = "faithful"


class KVCacheDtype(StrEnum):
    FP8_DS_MLA = "fp8_ds_mla"
    BF16 = "bf16"
    FP32 = "fp32"


@dataclass(frozen=True)
class NumericPolicy:
    mode: NumericMode
    stream_dtype: torch.dtype  # residual streams and block inputs between ops
    quantize_gemm_inputs: bool  # FP8 QAT on activations entering FP8/FP4 GEMMs
    kv_cache_dtype: KVCacheDtype  # window and compressed KV
    indexer_cache_fp8: bool  # FP8 indexer keys (else fp32 rows)
    round_compressed_to_bf16: bool  # ĉ → BF16 before the compressor norm (reference)

    @classmethod
    def for_mode(cls, mode: NumericMode | str, kv_cache_dtype: KVCacheDtype | str | None = None) -> NumericPolicy:
        mode = NumericMode(mode)
        if mode is NumericMode.EXACT:
            policy = cls(mode, torch.float32, False, KVCacheDtype.FP32, False, False)
        else:
            policy = cls(mode, torch.bfloat16, True, KVCacheDtype.FP8_DS_MLA, True, True)
        if kv_cache_dtype is not None:
            policy = cls(
                policy.mode, policy.stream_dtype, policy.quantize_gemm_inputs, KVCacheDtype(kv_cache_dtype),
                policy.indexer_cache_fp8, policy.round_compressed_to_bf16,
            )
        return policy
