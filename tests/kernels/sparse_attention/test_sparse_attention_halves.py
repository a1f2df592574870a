"""The "halves" sparse-attention kernel (`_fold_kernel`, session 7) on fp8_ds_mla caches.

* Parity with the twin (the tolerance of `test_sparse_attention_triton`) for bf16 and fp32 queries,
  16-byte aligned pages and odd ones (word and byte loads), heads that do not fill a head block,
  chunk boundaries, a chunk without any valid key, a token without any key (exact zeros).
* Its split mode (chunk partials + the combine kernel, any number of channel blocks) and its fold
  mode (one program folds every chunk) give the same bits, so the launcher may pick the mode by the
  number of tokens: a token's output is the same bits alone (split) and in a batch (fold), and
  trailing -1 columns (more chunks that hold no key) change no bit.
* The launcher picks "pieces" unless MXSERVE_SPARSE_ATTENTION_HALVES=1 (opt-in: slower on the H200,
  session 7), and then "halves" only for Flash-shaped fp8_ds_mla layers on a GPU.
On a GPU the same tests run the GPU configuration (32-key chunks, bf16 tensor cores); the test
marked gpu adds the Flash shapes (64 heads, window 128 + top-512) against "pieces" and the twin.
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

from mxserve.kernels.attention_ops.cache_args import EntryMode
from mxserve.kernels.sparse_attention import sparse_attention_ref
from mxserve.kernels.sparse_attention import triton as launcher
from mxserve.kernels.sparse_attention.triton import halves_params, launch_params, sparse_attention_triton

SPLIT = dict(fold_min_tokens=1 << 30)  # never fold
FOLD = dict(fold_min_tokens=1)  # always fold


def _halves(heads: int, **changes) -> launcher.LaunchParams:
    # 16-key chunks under the interpreter (the window list has 3, one of them empty for token 1):
    # the interpreter's cost is per operation and per program, so the lists stay short
    return halves_params(launch_params(EntryMode.DS_MLA, heads, 512), **changes)


def _case(aligned: bool, q_dtype: torch.dtype, num_tokens: int = 2, heads: int = 3):
    """Two fp8_ds_mla caches (pages of 4 and 8 entries, 16-byte aligned page strides or odd ones),
    heads that do not fill a head block, a window list of 3 chunks under the interpreter (token 1's
    second chunk without any key) and a compressed list of one."""
    extra = 16 + (-4 * 584) % 16 if aligned else 5
    window = filled_cache("fp8_ds_mla", 512, 10, 4, extra, seed=61)  # 40 slots
    compressed = filled_cache("fp8_ds_mla", 512, 3, 8, extra + (48 if aligned else 570), seed=62)
    assert (window.layout.block_stride_bytes % 16 == 0) == aligned
    g = torch.Generator().manual_seed(63)
    q = (torch.randn(num_tokens, heads, 512, generator=g) * 0.3).to(q_dtype).to(DEVICE)
    sink = torch.randn(heads, generator=g).to(DEVICE)
    ws = random_slots(num_tokens, 37, 40, 64, 0.1)
    cs = random_slots(num_tokens, 9, 24, 65, 0.1)
    if num_tokens > 1:
        ws[1, 16:32] = -1
    return q, [(window, ws), (compressed, cs)], sink


@pytest.mark.parametrize("aligned,q_dtype,split_blocks,fold_blocks", [(True, torch.bfloat16, 2, 4),
                                                                      (False, torch.float32, 1, 2)])
def test_parity_and_modes_give_the_same_bits(aligned, q_dtype, split_blocks, fold_blocks):
    q, sources, sink = _case(aligned, q_dtype)
    split = sparse_attention_triton(q, sources, sink, 0.05, params=_halves(3, **SPLIT, split_ch_blocks=split_blocks))
    check_close(split, sparse_attention_ref(q, sources, sink, 0.05))
    # a channel's bits depend neither on the mode nor on which channel block computes it
    fold = sparse_attention_triton(q, sources, sink, 0.05, params=_halves(3, **FOLD, fold_ch_blocks=fold_blocks))
    assert torch.equal(fold, split), f"fold mode ({fold_blocks} blocks) differs from split mode ({split_blocks})"


def test_batch_invariance_across_modes_and_padding():
    q, (w, c), sink = _case(True, torch.bfloat16, heads=2)
    ws, cs = w[1], c[1]
    lp = _halves(2, fold_min_tokens=2, fold_ch_blocks=2)  # the batch of 2 folds, a token alone splits
    together = sparse_attention_triton(q, [(w[0], ws), (c[0], cs)], sink, 0.05, params=lp)
    alone = sparse_attention_triton(q[1:2], [(w[0], ws[1:2]), (c[0], cs[1:2])], sink, 0.05, params=lp)
    assert torch.equal(alone[0], together[1]), "a token differs alone (split) vs in a batch (fold)"

    def padded(slots, width):
        return torch.cat([slots, torch.full((slots.shape[0], width - slots.shape[1]), -1, device=DEVICE)], dim=1)

    wide = sparse_attention_triton(q, [(w[0], padded(ws, 48)), (c[0], padded(cs, 17))], sink, 0.05, params=lp)
    assert torch.equal(wide, together), "trailing -1 columns (one more chunk in each list) changed the output"


def test_no_keys_and_refusals():
    q, (w, c), sink = _case(True, torch.bfloat16, num_tokens=1, heads=2)
    none = torch.full_like(w[1], -1)
    for changes in (SPLIT, FOLD):  # only the sink, then no chunk at all: exact zeros
        lp = _halves(2, **changes, fold_ch_blocks=2)
        only_sink = sparse_attention_triton(q, [(w[0], none), (c[0], none[:, :5])], sink, 0.05, params=lp)
        assert torch.equal(only_sink, torch.zeros_like(only_sink))
        empty = sparse_attention_triton(q, [(w[0], w[1][:, :0]), (c[0], c[1][:, :0])], sink, 0.05, params=lp)
        assert torch.equal(empty, torch.zeros_like(empty))
    bf16 = filled_cache("bf16", 512, 2, 4, 0, seed=66)
    with pytest.raises(ValueError, match="halves kernel reads fp8_ds_mla"):
        sparse_attention_triton(q, [(bf16, w[1][:, :3].clamp(max=7))], sink, 0.05, params=_halves(2))
    with pytest.raises(ValueError, match="channel blocks in fold mode"):
        sparse_attention_triton(q, [(w[0], w[1])], sink, 0.05, params=_halves(2, **FOLD, fold_ch_blocks=1))


def test_launcher_picks_halves_for_flash_layers_on_a_gpu_only_when_asked(monkeypatch):
    monkeypatch.setattr(launcher, "interpreting", lambda: False)
    monkeypatch.delenv(launcher.HALVES_ENV, raising=False)
    assert launch_params(EntryMode.DS_MLA, 64, 512).kernel == "pieces"  # opt-in: slower on the H200
    monkeypatch.setenv(launcher.HALVES_ENV, "1")
    flash = launch_params(EntryMode.DS_MLA, 64, 512)
    assert flash.kernel == "halves" and (flash.block_h, flash.block_k, flash.dot) == (64, 32, 1)
    assert launch_params(EntryMode.DS_MLA, 128, 512).kernel == "halves"
    assert launch_params(EntryMode.DS_MLA, 4, 512).kernel == "pieces"  # the default model's 4 heads
    assert launch_params(EntryMode.BF16, 64, 512).kernel == "pieces"


@pytest.mark.gpu
@pytest.mark.skipif(CPU, reason="needs CUDA")
@pytest.mark.parametrize("q_dtype", [torch.bfloat16, torch.float32])
def test_flash_shapes_on_the_gpu(q_dtype, monkeypatch):
    """64 heads x 512, window 128 + 512 compressed entries (pages of 64), 9 tokens: split == fold
    bit for bit, alone == in the batch, within the twin's tolerance, close to "pieces"."""
    monkeypatch.setenv(launcher.HALVES_ENV, "1")  # opt-in since session 7 (slower on the H200)
    window = filled_cache("fp8_ds_mla", 512, 16, 64, 0, seed=71)
    compressed = filled_cache("fp8_ds_mla", 512, 32, 64, 0, seed=72)
    g = torch.Generator().manual_seed(73)
    q = (torch.randn(9, 64, 512, generator=g) * 0.05).to(q_dtype).to(DEVICE)
    sink = torch.randn(64, generator=g).to(DEVICE)
    ws, cs = random_slots(9, 128, 1024, 74, 0.02), random_slots(9, 512, 2048, 75, 0.02)
    sources = [(window, ws), (compressed, cs)]
    lp = launch_params(EntryMode.DS_MLA, 64, 512)
    assert lp.kernel == "halves"
    split = sparse_attention_triton(q, sources, sink, 512**-0.5, params=lp)  # 9 < fold_min_tokens
    fold = sparse_attention_triton(q, sources, sink, 512**-0.5, params=halves_params(lp, **FOLD))
    assert torch.equal(split, fold), "split and fold modes differ"
    alone = sparse_attention_triton(q[4:5], [(window, ws[4:5]), (compressed, cs[4:5])], sink, 512**-0.5)
    assert torch.equal(alone[0], split[4])
    check_close(split, sparse_attention_ref(q, sources, sink, 512**-0.5))
    pieces = sparse_attention_triton(q, sources, sink, 512**-0.5,
                                     params=launcher.LaunchParams(dot=1, block_h=64, block_k=64, piece=64, num_warps=4))
    check_close(split, pieces)
