"""Choosing the attention-side kernels (op "attention") once per model, with reasons.

Candidates in priority order answer `is_supported(platform)` and `can_implement(spec)` (the style
of `mxserve.kernels.chooser`). The Triton candidate covers every fused attention op of issue 11
(q RMS + RoPE, RoPE/inverse RoPE, window-KV insert, compressor emit, indexer scores from the key
cache, tie-broken top-k, sparse attention reading cache bytes); it is off unless forced
(`kernel_overrides={"attention": "triton"}`) until its H200 gates pass (docs/benchmarks.md).
`attention_ops(backend)` returns the op → function map whose keys are `KernelSet` slot names;
the engine builds its KernelSet with `dataclasses.replace(kernels, **attention_ops(choice.backend))`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mxserve.kernels.chooser import Choice, Platform, ReferenceCandidate, choose_first, triton_cuda_support


@dataclass(frozen=True)
class AttentionSpec:
    head_dim: int
    rope_dim: int
    kv_cache_mode: str  # "fp8_ds_mla", "bf16", "fp32"
    index_head_dim: int
    max_indexer_candidates: int  # compressed CSA entries of the longest sequence (max_model_len // 4)


class TritonAttention:
    name = "triton"

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def is_supported(self, platform: Platform) -> tuple[bool, str]:
        return triton_cuda_support(platform, enabled=self.enabled, off_reason=(
            "off by default until the issue-11 gates pass (force with kernel_overrides {'attention': 'triton'})"))

    def can_implement(self, spec: AttentionSpec) -> tuple[bool, str]:
        from mxserve.kernels.topk.triton import MAX_CANDIDATES

        if spec.kv_cache_mode == "fp8_ds_mla" and (spec.head_dim, spec.rope_dim) != (512, 64):
            return False, f"fp8_ds_mla needs head_dim 512 / rope 64, got {spec.head_dim}/{spec.rope_dim}"
        if spec.max_indexer_candidates > MAX_CANDIDATES:
            return False, f"{spec.max_indexer_candidates} indexer candidates exceed the top-k kernel's {MAX_CANDIDATES}"
        return True, f"fused kernels on {spec.kv_cache_mode} caches, head_dim {spec.head_dim}"


def attention_candidates(*, enable_triton: bool) -> list:
    return [TritonAttention(enable_triton), ReferenceCandidate()]


def choose_attention(spec: AttentionSpec, platform: Platform, *, forced: str | None = None) -> Choice:
    """First supported candidate that can implement `spec`, with the reasons for those passed over."""
    if forced not in (None, "triton", "reference"):
        raise ValueError(f"attention: unknown backend {forced!r}; known: ['reference', 'triton']")
    return choose_first("attention", attention_candidates(enable_triton=forced == "triton"), spec, platform, forced)


# ops whose Triton kernels give their twins' bits in every numerics (writers, RoPE, selection); the
# fp8_ds_mla readers (attention, indexer scores) sum in another order and match within tolerance
BIT_EXACT_OPS = ("q_norm_rope", "rope", "kv_insert", "compressor_state_write", "compressor_emit", "topk")


def attention_ops(backend: str) -> dict[str, Callable]:
    """KernelSet slot name → implementation for `backend` ("reference": empty, keep the defaults).

    Importing the Triton launchers happens here, only when that backend is chosen."""
    if backend == "reference":
        return {}
    if backend != "triton":
        raise ValueError(f"attention: unknown backend {backend!r}; known: ['reference', 'triton']")
    from mxserve.kernels.attention_ops.state_write import compressor_state_write_triton
    from mxserve.kernels.attention_ops.triton_ops import (
        compressor_emit_triton,
        kv_insert_triton,
        q_norm_rope_triton,
        rope_triton,
    )
    from mxserve.kernels.indexer.triton import indexer_scores_cache_triton
    from mxserve.kernels.sparse_attention.triton import sparse_attention_triton
    from mxserve.kernels.topk.triton import topk_tiebroken_triton

    return {
        "q_norm_rope": q_norm_rope_triton, "rope": rope_triton, "kv_insert": kv_insert_triton,
        "compressor_state_write": compressor_state_write_triton,
        "compressor_emit": compressor_emit_triton, "indexer_scores_cache": indexer_scores_cache_triton,
        "topk": _topk_kwargs(topk_tiebroken_triton), "sparse_attention": sparse_attention_triton,
    }


def _topk_kwargs(fn: Callable) -> Callable:
    """The KernelSet top-k slot is called as topk(scores, k, num_valid=...)."""

    def topk(scores, k, *, valid_mask=None, num_valid=None):
        return fn(scores, k, valid_mask, num_valid)

    return topk
