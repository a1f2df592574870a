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

from mxserve.kernels.chooser import Choice, Platform


@dataclass(frozen=True)
class AttentionSpec:
    head_dim: int
    rope_dim: int
    kv_cache_mode: str  # "fp8_ds_mla", "bf16", "fp32"
    index_head_dim: int
    max_indexer_candidates: int  # compressed CSA entries of the longest sequence (max_model_len // 4)


class ReferenceAttention:
    name = "reference"

    def is_supported(self, platform: Platform) -> tuple[bool, str]:
        return True, "torch reference runs everywhere"

    def can_implement(self, spec: AttentionSpec) -> tuple[bool, str]:
        return True, "the spec itself (fp64 accumulation)"


class TritonAttention:
    name = "triton"

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def is_supported(self, platform: Platform) -> tuple[bool, str]:
        if not self.enabled:
            return False, "off by default until the issue-11 gates pass (force with kernel_overrides {'attention': 'triton'})"
        if not platform.has_triton:
            return False, "triton is not installed"
        if platform.device_type != "cuda" or platform.is_rocm:
            return False, f"needs an NVIDIA GPU, device is {platform.device_type}"
        if platform.capability < (8, 0):
            return False, f"needs sm_80+ (bf16 tensor cores), got sm_{platform.capability[0]}{platform.capability[1]}"
        return True, f"CUDA sm_{platform.capability[0]}{platform.capability[1]}"

    def can_implement(self, spec: AttentionSpec) -> tuple[bool, str]:
        from mxserve.kernels.topk.triton import MAX_CANDIDATES

        if spec.kv_cache_mode == "fp8_ds_mla" and (spec.head_dim, spec.rope_dim) != (512, 64):
            return False, f"fp8_ds_mla needs head_dim 512 / rope 64, got {spec.head_dim}/{spec.rope_dim}"
        if spec.max_indexer_candidates > MAX_CANDIDATES:
            return False, f"{spec.max_indexer_candidates} indexer candidates exceed the top-k kernel's {MAX_CANDIDATES}"
        return True, f"fused kernels on {spec.kv_cache_mode} caches, head_dim {spec.head_dim}"


def attention_candidates(*, enable_triton: bool) -> list:
    return [TritonAttention(enable_triton), ReferenceAttention()]


def choose_attention(spec: AttentionSpec, platform: Platform, *, forced: str | None = None) -> Choice:
    """First supported candidate that can implement `spec`, with the reasons for those passed over."""
    if forced not in (None, "triton", "reference"):
        raise ValueError(f"attention: unknown backend {forced!r}; known: ['reference', 'triton']")
    candidates = attention_candidates(enable_triton=forced == "triton")
    if forced == "reference":
        candidates = [c for c in candidates if c.name == "reference"]
    passed_over = []
    for cand in candidates:
        ok, why = cand.is_supported(platform)
        if ok:
            ok, why = cand.can_implement(spec)
        if ok:
            skipped = f" (passed over: {'; '.join(passed_over)})" if passed_over else ""
            return Choice(cand.name, ("forced; " if forced == cand.name else "") + why + skipped)
        passed_over.append(f"{cand.name}: {why}")
    raise ValueError(f"attention: no implementation fits ({'; '.join(passed_over)})")


def attention_ops(backend: str) -> dict[str, Callable]:
    """KernelSet slot name → implementation for `backend` ("reference": empty, keep the defaults).

    Importing the Triton launchers happens here, only when that backend is chosen."""
    if backend == "reference":
        return {}
    if backend != "triton":
        raise ValueError(f"attention: unknown backend {backend!r}; known: ['reference', 'triton']")
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
        "compressor_emit": compressor_emit_triton, "indexer_scores_cache": indexer_scores_cache_triton,
        "topk": _topk_kwargs(topk_tiebroken_triton), "sparse_attention": sparse_attention_triton,
    }


def _topk_kwargs(fn: Callable) -> Callable:
    """The KernelSet top-k slot is called as topk(scores, k, num_valid=...)."""

    def topk(scores, k, *, valid_mask=None, num_valid=None):
        return fn(scores, k, valid_mask, num_valid)

    return topk
