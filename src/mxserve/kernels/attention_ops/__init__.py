"""Fused attention-side ops of DeepSeek-V4 (spec §3.4) with torch twins and Triton kernels.

What lives here (each op's torch twin is composed from the model's own
functions in `mxserve.model.fused_ref` — RoPE and the norms are model math, which this layer may not
import — and its Triton launcher is in `triton_ops.py`):

* `q_norm_rope`: per-head unweighted RMS + interleaved RoPE of the queries (spec §3.4.1 4-5).
* `rope`: RoPE / inverse RoPE on the last 64 channels (indexer queries, attention output §3.4.6).
* `kv_insert`: window KV: kv_norm + RoPE + cache encoding (fp8_ds_mla / plain rows) + insert at
  the slot (spec §3.4.2).
* `compressor_emit`: a compressor's emit step: per-channel fp64 softmax pooling over the state
  rows, optional BF16 rounding, RMS norm, RoPE at the window's first position, encoding, insert
  (spec §3.4.3 and the indexer keys of §3.4.4). Two launches: the pooling streams the rows over
  (token, channel block) programs (`compressor_pool_triton`), then the `kv_insert` kernel encodes.

Every Triton kernel addresses cache bytes with the cache object's `PageLayout` numbers
(`cache_args.CacheArgs`), restating `PageLayout.addresses` in `_cache_jit.entry_offsets`.
"""

from mxserve.kernels.attention_ops.cache_args import CacheArgs, cache_args

__all__ = ["CacheArgs", "cache_args"]
