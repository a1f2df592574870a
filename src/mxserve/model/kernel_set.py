"""The op implementations one model instance calls, fixed when the model is built.

The model's math never names a backend: every kernel-shaped op goes through `ctx.kernels.<op>`.
`KernelSet()` is the all-reference set (the spec, fp64-accumulated, batch-invariant by
construction). The engine builds another set from the kernel chooser's per-op, per-layer
decisions (`mxserve.kernels.chooser`) and passes it to `DeepseekV4Model(kernels=...)`; each
slot keeps its reference's signature, so a test can swap a single op and compare.
`labels` names the backend behind each slot, for the startup log and `mxserve verify`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from mxserve.kernels.compressor import compress_pool_ref
from mxserve.kernels.hyper_connection import hc_head_ref, hc_post_ref, hc_pre_ref
from mxserve.kernels.indexer import indexer_scores_ref
from mxserve.kernels.linear import grouped_linear_ref, linear_ref
from mxserve.kernels.moe import expert_ffn_ref, moe_experts_ref, route_ref
from mxserve.kernels.rms_norm import rms_norm
from mxserve.kernels.sparse_attention import sparse_attention_ref
from mxserve.kernels.topk import topk_tiebroken
from mxserve.model.fused_ref import compressor_state_write_ref, kv_insert_ref, q_norm_rope_ref, rope_ref


@dataclass(frozen=True)
class KernelSet:
    linear: Callable = linear_ref  # (x, weight, *, quantize_input=False, out_dtype=None) -> [T, N] fp32 or out_dtype
    grouped_linear: Callable = grouped_linear_ref  # (x [T, G, K], weight [G·R, K], *, out_dtype=None) -> [T, G, R]
    route: Callable = route_ref  # MoE router, see route_ref
    moe_experts: Callable = moe_experts_ref  # routed experts, see moe_experts_ref
    expert_ffn: Callable = expert_ffn_ref  # the shared expert, see expert_ffn_ref
    compress_pool: Callable = compress_pool_ref  # compressor softmax pooling
    indexer_scores: Callable = indexer_scores_ref  # CSA indexer scores
    topk: Callable = topk_tiebroken  # tie-broken top-k selection
    sparse_attention: Callable = sparse_attention_ref  # attention with the sink over cache slots
    # fused attention-side ops (issue 11; twins in mxserve.model.fused_ref, kernels in
    # mxserve.kernels.attention_ops, chosen by mxserve.kernels.attention_chooser)
    q_norm_rope: Callable = q_norm_rope_ref  # per-head RMS + RoPE of q
    rope: Callable = rope_ref  # RoPE / inverse RoPE (indexer q, attention output)
    kv_insert: Callable = kv_insert_ref  # window KV norm + RoPE + encode + insert
    compressor_state_write: Callable = compressor_state_write_ref  # [a | z + ape] rows → state cache
    # None = the unfused composition of the slots above (compress_pool / indexer_scores on keys
    # read through the cache), so swapping those single ops keeps working:
    compressor_emit: Callable | None = None  # pooling + norm + RoPE + encode + insert of entries
    indexer_scores_cache: Callable | None = None  # indexer scores against keys in the paged cache
    # manifold-constrained hyper-connections (twins in mxserve.kernels.hyper_connection.reference,
    # chosen by mxserve.kernels.hyper_connection.chooser, override op "hc")
    hc_pre: Callable = hc_pre_ref  # streams [T, hc, D] -> (block input, post, comb)
    hc_post: Callable = hc_post_ref  # (block out, streams, post, comb) -> new streams
    hc_head: Callable = hc_head_ref  # the final collapse streams -> [T, D]
    # None = hc_pre / hc_head followed by rms_norm (the slots above, so swapping one still counts):
    hc_pre_norm: Callable | None = None  # (streams, w, norm weight) -> (normed block input, post, comb)
    hc_head_norm: Callable | None = None  # (streams, fn, base, scale, norm weight) -> the head's input
    rms_norm: Callable = rms_norm  # (x [T, D], weight [D], eps) -> x's dtype; block, q low-rank and final norms
    labels: Mapping[str, str] = field(default_factory=dict)  # op -> backend description ("reference" if absent)

    def label(self, op: str) -> str:
        return self.labels.get(op, "reference")


REFERENCE_KERNELS = KernelSet()
