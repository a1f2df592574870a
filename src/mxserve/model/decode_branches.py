"""Which parts of a decode step run beside each other (MXSERVE_DECODE_BRANCHES), on the side lanes
of `kernels/side_streams.py`.

Why: at decode a layer is a chain of ~45 short launches, and the longest chains of small ones are
independent of the main path. Each part below reads only tensors that exist before its fork and
writes only what is read after its join, so it can run beside the main path instead of after it:

- attention block (`decode_attention.decode_attention_heads`):
  - lane KV: wkv, then the window-KV insert, then the layer's compressor step (CSA/HCA); reads
    the block input, writes the window, compressor-state and compressed caches;
  - lane INDEXER (CSA), forked twice: first the indexer's compressor and head weights (they
    read the block input only, so they start with the block), then, once the normed q_lora
    exists, the indexer's q, the scores, the top-k and the selected entries' slots;
  - main: wq_a, q_norm, wq_b, the per-head q RMS + RoPE;
  - the sparse attention, which reads what the lanes wrote, comes after both joins;
- MoE block (`moe.moe_forward_parts`): lane SHARED: the shared expert; main: the router and the
  routed experts; joined before the hc_post that adds them.

Every lane runs the same launches on the same inputs as one stream does, so the bits cannot
change (GPU gates: tests/model/test_decode_branches_gpu.py). The step's slot maps are computed on
the main stream before the first fork (`StepAddressMaps.prime`): a map is computed on first use
and kept, and a map first computed on a lane would be read by the main stream unordered.

Off the GPU (and with the switch off) the forks are no-ops and the parts run in the order above
on one stream. `MXSERVE_DECODE_BRANCHES=0` is the off switch (read at every step); prefill
forwards never branch.
"""

from __future__ import annotations

import os

import torch

BRANCHES_ENV = "MXSERVE_DECODE_BRANCHES"
KV = "decode kv"
INDEXER = "decode indexer"
SHARED = "decode shared expert"


def decode_branches_enabled(device: torch.device) -> bool:
    """Branch this decode step: a CUDA device, and the switch not 0 (read at every call)."""
    return device.type == "cuda" and os.environ.get(BRANCHES_ENV, "0") != "0"
