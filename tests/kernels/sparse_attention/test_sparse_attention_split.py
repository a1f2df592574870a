"""The split-K sparse attention (chunk partials + ordered combine) at chunk boundaries, under the
interpreter (on a GPU the same checks run on the device's kernels).

* The GPU's entry pieces (64 channels: one fp8_ds_mla NoPE group with its one scale per key, or
  the BF16 RoPE channels; 16/32-bit word loads when the page stride is aligned) are forced on the
  interpreter with `LaunchParams(piece=64)`, for every KV encoding, aligned and not, and a head
  dim whose last piece is partial: same tolerance as the default parameters.
* Key counts that are not a multiple of the chunk, chunks without any valid key (leading, in the
  middle, trailing), tokens without any key: parity, and exact zeros where only the sink remains.
* Padding the slot lists with -1 columns (the CUDA-graph decode batch) changes no bit; a token's
  output is bit-identical alone, in a batch, and when the launcher slices the batch to bound
  its workspace.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from tests.kernels.sparse_attention.test_sparse_attention_triton import (
    CPU,
    DEVICE,
    check_close,
    filled_cache,
    random_slots,
)

from mxserve.kernels.sparse_attention import sparse_attention_ref
from mxserve.kernels.sparse_attention import triton as launcher
from mxserve.kernels.sparse_attention.triton import LaunchParams, sparse_attention_triton

# the GPU's piece width under the interpreter (DOT 0); small chunks make many chunk boundaries
GPU_PIECES = LaunchParams(dot=0, block_h=4, block_k=8, piece=64, num_warps=4) if CPU else None


def _entry_bytes(mode: str, head_dim: int) -> int:
    return 584 if mode == "fp8_ds_mla" else head_dim * (2 if mode == "bf16" else 4)


@pytest.mark.parametrize("aligned", [True, False])
@pytest.mark.parametrize("mode,head_dim,q_dtype", [("fp8_ds_mla", 512, torch.float32), ("bf16", 160, torch.bfloat16),
                                                    ("fp32", 96, torch.float32)])
def test_gpu_entry_pieces(mode, head_dim, q_dtype, aligned):
    block = 4
    entry = _entry_bytes(mode, head_dim)
    extra = (-block * entry) % 16 + 16 if aligned else 3  # page stride a multiple of 16, or odd
    window = filled_cache(mode, head_dim, 5, block, extra, seed=21)
    compressed = filled_cache(mode, head_dim, 3, block, extra + (32 if aligned else 574), seed=22)
    assert (window.layout.block_stride_bytes % 16 == 0) == aligned
    g = torch.Generator().manual_seed(23)
    heads = 3  # a head block of 4 with a masked row
    q = (torch.randn(2, heads, head_dim, generator=g) * 0.3).to(q_dtype).to(DEVICE)
    sink = torch.randn(heads, generator=g).to(DEVICE)
    sources = [(window, random_slots(2, 11, 20, 24)), (compressed, random_slots(2, 7, 12, 25))]  # 2 + 1 chunks
    out = sparse_attention_triton(q, sources, sink, head_dim**-0.5, params=GPU_PIECES)
    check_close(out, sparse_attention_ref(q, sources, sink, head_dim**-0.5))
    if mode == "fp8_ds_mla":
        alone = sparse_attention_triton(q[1:2], [(c, s[1:2]) for c, s in sources], sink, head_dim**-0.5,
                                        params=GPU_PIECES)
        assert torch.equal(alone[0], out[1])


def test_chunk_boundaries_and_chunks_without_keys():
    window = filled_cache("fp8_ds_mla", 512, 12, 4, 5, seed=31)  # 48 slots
    compressed = filled_cache("fp8_ds_mla", 512, 4, 8, 1, seed=32)
    g = torch.Generator().manual_seed(33)
    num_tokens, heads = 5, 4
    q = (torch.randn(num_tokens, heads, 512, generator=g) * 0.2).bfloat16().to(DEVICE)
    sink = torch.randn(heads, generator=g).to(DEVICE)
    ws = random_slots(num_tokens, 37, 48, 34, 0.1)  # 37 = 2 chunks of 16 + 5
    cs = random_slots(num_tokens, 19, 32, 35, 0.1)
    ws[0, :16] = -1  # token 0: the first chunk has no key (the fold starts from an empty partial)
    ws[1, 16:32] = -1  # token 1: a middle chunk has none
    ws[2, 32:] = -1  # token 2: the short last chunk has none ...
    cs[2, 16:] = -1  # ... nor the compressed list's last
    ws[3] = -1  # token 3: only the sink
    cs[3] = -1
    sources = [(window, ws), (compressed, cs)]
    out = sparse_attention_triton(q, sources, sink, 0.044)
    ref = sparse_attention_ref(q, sources, sink, 0.044)
    assert torch.equal(out[3], torch.zeros_like(out[3]))
    keep = [0, 1, 2, 4]
    check_close(out[keep], ref[keep])
    no_lists = sparse_attention_triton(q, [(window, ws[:, :0]), (compressed, cs[:, :0])], sink, 0.044)
    assert torch.equal(no_lists, torch.zeros_like(no_lists))


def test_padding_slicing_and_batch_change_no_bit(monkeypatch):
    window = filled_cache("fp8_ds_mla", 512, 6, 4, 3, seed=41)
    compressed = filled_cache("fp8_ds_mla", 512, 3, 8, 7, seed=42)
    g = torch.Generator().manual_seed(43)
    q = (torch.randn(3, 8, 512, generator=g) * 0.3).float().to(DEVICE)
    sink = torch.randn(8, generator=g).to(DEVICE)
    ws, cs = random_slots(3, 11, 24, 44), random_slots(3, 13, 24, 45)
    out = sparse_attention_triton(q, [(window, ws), (compressed, cs)], sink, 0.05)

    def padded(slots, width):
        return torch.cat([slots, torch.full((slots.shape[0], width - slots.shape[1]), -1, device=DEVICE)], dim=1)

    wide = sparse_attention_triton(q, [(window, padded(ws, 33)), (compressed, padded(cs, 17))], sink, 0.05)
    assert torch.equal(wide, out), "trailing -1 columns changed the output"
    monkeypatch.setattr(launcher, "WORKSPACE_MAX_BYTES", 1)  # one token per launch
    sliced = sparse_attention_triton(q, [(window, ws), (compressed, cs)], sink, 0.05)
    assert torch.equal(sliced, out), "slicing the batch changed the output"
    alone = sparse_attention_triton(q[2:3], [(window, ws[2:3]), (compressed, cs[2:3])], sink, 0.05)
    assert torch.equal(alone[0], out[2])


def test_head_dim_above_512_is_refused():
    cache = filled_cache("bf16", 640, 2, 4, 0, seed=51)
    q = torch.randn(1, 2, 640, device=DEVICE)
    with pytest.raises(ValueError, match="head_dim 640 > 512"):
        sparse_attention_triton(q, [(cache, torch.zeros(1, 1, dtype=torch.int64, device=DEVICE))],
                                torch.zeros(2, device=DEVICE), 1.0)
