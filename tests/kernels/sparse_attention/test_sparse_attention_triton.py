"""Sparse attention with sink: the Triton kernel (interpreted on the CPU) vs `sparse_attention_ref`.

The kernel reads the caches' bytes itself (fp8_ds_mla codes x UE8M0 scales, BF16 RoPE; or plain
rows) through the caches' layout numbers, so every case here uses page strides that are not
multiples of anything and slots that cross page boundaries.

Tolerance (stated, the twin is fp64 rounded once): max |out - ref| <= 2e-6 * max |ref| per token
under the interpreter (fp32 product-sums and fp32 exp); on a GPU (bf16 tensor cores on exact
bf16 operands, probabilities split hi + lo) <= 2e-4. Batch invariance is exact: a token's
output is bit-identical whether it runs alone or among others.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from mxserve.kernels.cache import PagedKVCache
from mxserve.kernels.sparse_attention import sparse_attention_ref
from mxserve.kernels.sparse_attention.triton import sparse_attention_triton

CPU = not torch.cuda.is_available()
DEVICE = "cpu" if CPU else "cuda"
TOL = 2e-6 if CPU else 2e-4


def filled_cache(mode: str, head_dim: int, num_blocks: int, block_size: int, extra_stride: int, seed: int):
    entry = 584 if mode == "fp8_ds_mla" else head_dim * (2 if mode == "bf16" else 4)
    cache = PagedKVCache(num_blocks, block_size, mode=mode, head_dim=head_dim,
                         block_stride_bytes=block_size * entry + extra_stride, device=DEVICE)
    g = torch.Generator().manual_seed(seed)
    values = torch.randn(num_blocks * block_size, head_dim, generator=g) * 2
    values[::7, :64] *= 1e-6  # tiny NoPE groups (small scales, subnormal codes)
    cache.write(torch.arange(num_blocks * block_size, device=DEVICE), values.to(DEVICE))
    return cache


def random_slots(num_tokens: int, k: int, num_slots: int, seed: int, pad_fraction: float = 0.25):
    g = torch.Generator().manual_seed(seed)
    slots = torch.stack([torch.randperm(num_slots, generator=g)[:k] for _ in range(num_tokens)])
    pad = torch.rand(num_tokens, k, generator=g) < pad_fraction
    return torch.where(pad, -1, slots).to(DEVICE)


def check_close(out: torch.Tensor, ref: torch.Tensor) -> None:
    err = (out.double() - ref.double()).abs().amax(dim=(1, 2))
    bound = TOL * ref.double().abs().amax(dim=(1, 2)).clamp(min=1e-30)
    worst = int((err / bound).argmax())
    assert bool((err <= bound).all()), f"token {worst}: max err {err[worst]:.3e} > {bound[worst]:.3e}"


@pytest.mark.parametrize(
    "mode,head_dim,q_dtype,heads",
    [("fp8_ds_mla", 512, torch.bfloat16, 8), ("fp8_ds_mla", 512, torch.float32, 20), ("bf16", 192, torch.bfloat16, 4),
     ("fp32", 256, torch.float32, 3)],
)
def test_parity_with_twin(mode, head_dim, q_dtype, heads):
    window = filled_cache(mode, head_dim, 6, 4, 3, seed=1)  # 24 slots, pages of 4
    compressed = filled_cache(mode, head_dim, 3, 8, 577, seed=2)
    num_tokens = 5
    g = torch.Generator().manual_seed(3)
    q = (torch.randn(num_tokens, heads, head_dim, generator=g) * 0.2).to(q_dtype).to(DEVICE)
    sink = torch.randn(heads, generator=g).to(DEVICE)
    sources = [(window, random_slots(num_tokens, 19, 24, 4)), (compressed, random_slots(num_tokens, 21, 24, 5))]
    sources[0][1][2] = -1  # a token with no window keys
    sources[1][1][2] = -1  # ... and no compressed keys: the sink takes all mass, output 0
    out = sparse_attention_triton(q, sources, sink, head_dim**-0.5)
    ref = sparse_attention_ref(q, sources, sink, head_dim**-0.5)
    assert torch.equal(out[2], torch.zeros_like(out[2]))
    check_close(out[[0, 1, 3, 4]], ref[[0, 1, 3, 4]])


def test_single_source_and_empty_lists():
    cache = filled_cache("fp8_ds_mla", 512, 4, 4, 1, seed=6)
    q = torch.randn(3, 4, 512, device=DEVICE).bfloat16()
    sink = torch.zeros(4, device=DEVICE)
    slots = random_slots(3, 7, 16, 7, 0.0)
    check_close(sparse_attention_triton(q, [(cache, slots)], sink, 0.05),
                sparse_attention_ref(q, [(cache, slots)], sink, 0.05))
    empty = torch.empty(3, 0, dtype=torch.int64, device=DEVICE)
    check_close(sparse_attention_triton(q, [(cache, slots), (cache, empty)], sink, 0.05),
                sparse_attention_ref(q, [(cache, slots)], sink, 0.05))


def test_batch_invariance_bitwise():
    window = filled_cache("fp8_ds_mla", 512, 6, 4, 3, seed=8)
    compressed = filled_cache("fp8_ds_mla", 512, 3, 8, 5, seed=9)
    q = torch.randn(6, 8, 512, device=DEVICE).bfloat16()
    sink = torch.randn(8, device=DEVICE)
    ws, cs = random_slots(6, 11, 24, 10), random_slots(6, 13, 24, 11)
    together = sparse_attention_triton(q, [(window, ws), (compressed, cs)], sink, 0.044)
    for t in (0, 3, 5):
        alone = sparse_attention_triton(q[t : t + 1], [(window, ws[t : t + 1]), (compressed, cs[t : t + 1])], sink, 0.044)
        assert torch.equal(alone[0], together[t]), f"token {t} differs alone vs in a batch of 6"


def test_bad_input_is_refused(monkeypatch):
    monkeypatch.setenv("MXSERVE_CHECK_SLOTS", "1")  # slot values are checked on a GPU only when asked (a host read)
    cache = filled_cache("fp8_ds_mla", 512, 2, 4, 0, seed=12)
    q = torch.randn(2, 4, 512, device=DEVICE)
    slots = torch.zeros(2, 3, dtype=torch.int64, device=DEVICE)
    with pytest.raises(ValueError, match="sink"):
        sparse_attention_triton(q, [(cache, slots)], torch.zeros(3, device=DEVICE), 1.0)
    with pytest.raises(ValueError, match="out of range"):
        sparse_attention_triton(q, [(cache, slots + 100)], torch.zeros(4, device=DEVICE), 1.0)
    with pytest.raises(ValueError, match="head_dim"):
        sparse_attention_triton(q[..., :256], [(cache, slots)], torch.zeros(4, device=DEVICE), 1.0)
