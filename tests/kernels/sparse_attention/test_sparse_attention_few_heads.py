"""The "few_heads" sparse-attention kernel (`_few_heads_kernel`, session 8) on fp8_ds_mla caches.

* Parity with the fp64 twin (`test_sparse_attention_triton`'s tolerance) for bf16 and fp32 queries,
  16-byte aligned pages and odd ones (word and byte loads), chunk boundaries in both lists, a chunk
  without any valid key, a token without any key (exact zeros), one source only.
* Batch invariance: a token's output is the same bits alone and in the batch, and trailing -1
  columns (more chunks that hold no key) change no bit; the prefetch changes no bit either.
* The launcher picks it only when MXSERVE_SPARSE_ATTENTION_FEW_HEADS=1, for fp8_ds_mla layers of at
  most 16 heads.
The kernel's arithmetic is the same under the interpreter and on a GPU (fp32 products and sums);
on a GPU the test marked gpu adds the packaged default model's shapes (4 heads, window 128 +
64 compressed entries, pages of 64) against the twin and the "pieces" kernel.
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
from mxserve.kernels.sparse_attention.triton import few_heads_params, launch_params, sparse_attention_triton


def _case(aligned: bool, q_dtype: torch.dtype, num_tokens: int = 3, heads: int = 2):
    """Two fp8_ds_mla caches (pages of 4 and 8, aligned strides or odd ones), a window list of 37
    columns (3 chunks of 16 under the interpreter; token 1's second chunk without any key) and a
    compressed list of 9."""
    extra = 16 + (-4 * 584) % 16 if aligned else 5
    window = filled_cache("fp8_ds_mla", 512, 10, 4, extra, seed=81)  # 40 slots
    compressed = filled_cache("fp8_ds_mla", 512, 3, 8, extra + (48 if aligned else 570), seed=82)
    assert (window.layout.block_stride_bytes % 16 == 0) == aligned
    g = torch.Generator().manual_seed(83)
    q = (torch.randn(num_tokens, heads, 512, generator=g) * 0.3).to(q_dtype).to(DEVICE)
    sink = torch.randn(heads, generator=g).to(DEVICE)
    ws = random_slots(num_tokens, 37, 40, 84, 0.1)
    cs = random_slots(num_tokens, 9, 24, 85, 0.1)
    ws[1, 16:32] = -1
    return q, [(window, ws), (compressed, cs)], sink


@pytest.mark.parametrize("aligned,q_dtype", [(True, torch.bfloat16), (False, torch.float32)])
def test_parity_with_twin(aligned, q_dtype):
    q, sources, sink = _case(aligned, q_dtype)
    sources[0][1][2] = -1  # token 2: no key at all, the sink takes all mass
    sources[1][1][2] = -1
    out = sparse_attention_triton(q, sources, sink, 0.05, params=few_heads_params())
    assert torch.equal(out[2], torch.zeros_like(out[2]))
    check_close(out[:2], sparse_attention_ref(q, sources, sink, 0.05)[:2])
    (w, ws), _ = sources
    one = sparse_attention_triton(q[:2], [(w, ws[:2])], sink, 0.05, params=few_heads_params())
    check_close(one, sparse_attention_ref(q[:2], [(w, ws[:2])], sink, 0.05))


def test_batch_invariance_and_padding():
    q, (w, c), sink = _case(True, torch.bfloat16)
    lp = few_heads_params()
    together = sparse_attention_triton(q, [w, c], sink, 0.05, params=lp)
    alone = sparse_attention_triton(q[1:2], [(w[0], w[1][1:2]), (c[0], c[1][1:2])], sink, 0.05, params=lp)
    assert torch.equal(alone[0], together[1]), "a token differs alone vs in a batch of 3"
    serial = sparse_attention_triton(q, [w, c], sink, 0.05, params=few_heads_params(prefetch=False))
    assert torch.equal(serial, together), "loading each chunk in its own iteration changed the output"

    def padded(slots, width):
        return torch.cat([slots, torch.full((slots.shape[0], width - slots.shape[1]), -1, device=DEVICE)], dim=1)

    wide = sparse_attention_triton(q, [(w[0], padded(w[1], 48)), (c[0], padded(c[1], 17))], sink, 0.05, params=lp)
    assert torch.equal(wide, together), "trailing -1 columns (one more chunk in each list) changed the output"


def test_launcher_picks_few_heads_only_when_asked(monkeypatch):
    monkeypatch.delenv(launcher.FEW_HEADS_ENV, raising=False)
    assert launch_params(EntryMode.DS_MLA, 4, 512).kernel == "pieces"
    monkeypatch.setenv(launcher.FEW_HEADS_ENV, "1")
    assert launch_params(EntryMode.DS_MLA, 4, 512).kernel == "few_heads"
    assert launch_params(EntryMode.DS_MLA, 16, 512).kernel == "few_heads"
    assert launch_params(EntryMode.DS_MLA, 64, 512).kernel == "pieces"
    assert launch_params(EntryMode.BF16, 4, 512).kernel == "pieces"
    bf16 = filled_cache("bf16", 512, 2, 4, 0, seed=86)
    q = torch.randn(1, 2, 512, device=DEVICE)
    with pytest.raises(ValueError, match="few_heads kernel reads fp8_ds_mla"):
        sparse_attention_triton(q, [(bf16, torch.zeros(1, 3, dtype=torch.int64, device=DEVICE))],
                                torch.zeros(2, device=DEVICE), 0.05, params=few_heads_params())


@pytest.mark.gpu
@pytest.mark.skipif(CPU, reason="needs CUDA")
@pytest.mark.parametrize("hca", [False, True])
def test_default_model_shapes_on_the_gpu(hca):
    """4 heads x 512, window 128 + 64 top-k (CSA) or 32 (HCA) entries, pages of 64, 64 tokens:
    alone == in the batch, within the twin's tolerance, close to "pieces"."""
    window = filled_cache("fp8_ds_mla", 512, 128, 64, 0, seed=91)
    compressed = filled_cache("fp8_ds_mla", 512, 32, 64, 0, seed=92)
    g = torch.Generator().manual_seed(93)
    q = (torch.randn(64, 4, 512, generator=g) * 0.05).bfloat16().to(DEVICE)
    sink = torch.randn(4, generator=g).to(DEVICE)
    ws = random_slots(64, 128, 8192, 94, 0.02)
    cs = random_slots(64, 32 if hca else 64, 2048, 95, 0.02)
    sources = [(window, ws), (compressed, cs)]
    out = sparse_attention_triton(q, sources, sink, 512**-0.5, params=few_heads_params())
    for t in (0, 37):
        alone = sparse_attention_triton(q[t:t + 1], [(window, ws[t:t + 1]), (compressed, cs[t:t + 1])], sink,
                                        512**-0.5, params=few_heads_params())
        assert torch.equal(alone[0], out[t])
    check_close(out, sparse_attention_ref(q, sources, sink, 512**-0.5))
    pieces = sparse_attention_triton(q, sources, sink, 512**-0.5,
                                     params=launcher.LaunchParams(dot=1, block_h=16, block_k=32, piece=64, num_warps=8))
    check_close(out, pieces)
