"""DSpark block attention (dsv4-0731 §3.2 step 5): window of committed context + the whole block.

For one sequence with a draft block at positions q … q+K−1 (q = the anchor's position), every
block query attends, with the sink, to
  * the stage's context window: positions max(0, q−W) … q−1 of its `DraftWindows` cache, and
  * all K block tokens (non-causal inside the block), whose K = V come from this stage's
    `wkv(x_block)` → kv_norm → RoPE at their own positions.
No compressor, no indexer (draft stages are sliding-only, compress ratio 0); the main RoPE table.
The block's own K/V is never cached: it is encoded into a scratch cache of the window's format
(so faithful mode stores it as fp8_ds_mla exactly like a window entry) and read back through
the same sparse-attention op as the target uses, with both sources as slot lists.
"""

from __future__ import annotations

import torch

from mxserve.config import ModelConfig
from mxserve.kernels.cache import PagedKVCache
from mxserve.model.attention import AttentionWeights
from mxserve.model.kernel_set import KernelSet
from mxserve.model.numerics import NumericPolicy


def draft_block_attention(
    x: torch.Tensor, positions: torch.Tensor, w: AttentionWeights, *, block_width: int,
    window_cache: PagedKVCache, window_slots: torch.Tensor, config: ModelConfig, policy: NumericPolicy,
    kernels: KernelSet, inv_freq: torch.Tensor,
) -> torch.Tensor:
    """x [B·K, D] (normed block input, stream dtype), positions [B·K]; window_slots [B, W] (−1 =
    no entry) → [B·K, D] in the stream dtype. Rows b·K … b·K+K−1 are sequence b's block."""
    cfg, sd, qi = config, policy.stream_dtype, policy.quantize_gemm_inputs
    num_rows, heads, head_dim = x.shape[0], cfg.num_attention_heads, cfg.head_dim
    if num_rows % block_width:
        raise ValueError(f"draft_block_attention: {num_rows} rows is not a multiple of block_width={block_width}")
    num_seqs = num_rows // block_width

    # the target's ops (`kernels`): per-head RMS + RoPE of q, fused kv norm + RoPE + encode + insert
    qr = kernels.rms_norm(kernels.linear(x, w.wq_a, quantize_input=qi, out_dtype=sd), w.q_norm, cfg.rms_norm_eps)
    q = kernels.linear(qr, w.wq_b, quantize_input=qi, out_dtype=sd).view(num_rows, heads, head_dim)
    q = kernels.q_norm_rope(q, positions, inv_freq, cfg.rms_norm_eps)
    kv = kernels.linear(x, w.wkv, quantize_input=qi, out_dtype=sd)

    scratch = PagedKVCache(1, num_rows, mode=policy.kv_cache_dtype.value, head_dim=head_dim,
                           rope_dim=cfg.qk_rope_head_dim, device=x.device)
    kernels.kv_insert(kv, w.kv_norm, cfg.rms_norm_eps, positions, inv_freq, scratch,
                      torch.arange(num_rows, device=x.device))

    out = torch.empty(num_rows, heads, head_dim, dtype=torch.float32, device=x.device)
    block = torch.arange(block_width, device=x.device)
    for b in range(num_seqs):
        rows = slice(b * block_width, (b + 1) * block_width)
        sources = [
            (window_cache, window_slots[b][None, :].expand(block_width, -1)),
            (scratch, (b * block_width + block)[None, :].expand(block_width, -1)),  # non-causal: all K
        ]
        out[rows] = kernels.sparse_attention(q[rows], sources, w.sink, head_dim**-0.5)
    out = kernels.rope(out, positions, inv_freq, inverse=True, out_dtype=sd)
    grouped = kernels.grouped_linear(out.reshape(num_rows, cfg.o_groups, -1), w.wo_a, out_dtype=sd)
    return kernels.linear(grouped.flatten(1), w.wo_b, quantize_input=qi, out_dtype=sd)
