"""Fused q path, RoPE and window-KV insert: Triton kernels (interpreted on the CPU) vs their twins.

Tolerance: none. The kernels restate the twins' arithmetic step by step (fp64 mean of squares,
fp32 RoPE with fp64 cos/sin rounded once, the cache codec's rounding), so results and cache
bytes are compared bit for bit. Caches use page strides that are not multiples of anything
(B*584 + 1) and slots that cross page boundaries, with -1 padding lanes, so a kernel that got
the address function wrong writes a byte the twin does not (field-notes §3).
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from mxserve.kernels.attention_ops.triton_ops import kv_insert_triton, q_norm_rope_triton, rope_triton
from mxserve.kernels.cache import PagedIndexerKeyCache, PagedKVCache
from mxserve.model.fused_ref import kv_insert_ref, q_norm_rope_ref, rope_ref
from mxserve.model.rope import inverse_frequencies

DEVICE = "cpu" if not torch.cuda.is_available() else "cuda"
SENTINEL = 0xA5


def first_mismatch(a: torch.Tensor, b: torch.Tensor) -> str:
    idx = (a != b).nonzero()
    if not len(idx):
        return "equal"
    at = tuple(int(i) for i in idx[0])
    return f"{int((a != b).sum())} mismatches, first at {at}: {a[at].item()!r} vs {b[at].item()!r}"


def assert_bitwise(a: torch.Tensor, b: torch.Tensor) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape
    ai = a.contiguous().view(torch.uint8) if a.dtype != torch.uint8 else a
    bi = b.contiguous().view(torch.uint8) if b.dtype != torch.uint8 else b
    assert torch.equal(ai, bi), first_mismatch(a.float() if a.dtype != torch.uint8 else a,
                                               b.float() if b.dtype != torch.uint8 else b)


def inv_freq(yarn: bool) -> torch.Tensor:
    from mxserve.config import YarnScaling

    scaling = YarnScaling(factor=16.0, original_max_position_embeddings=65536, beta_fast=32.0, beta_slow=1.0)
    return inverse_frequencies(64, 160000.0 if yarn else 10000.0, scaling if yarn else None).to(DEVICE)


def positions(n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.cat([torch.tensor([0, 1, 65535, 1_000_003]), torch.randint(0, 300_000, (n,), generator=g)])[:n].to(DEVICE)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("head_dim", [512, 192])
def test_q_norm_rope_bitwise(dtype, head_dim):
    g = torch.Generator().manual_seed(1)
    q = (torch.randn(5, 3, head_dim, generator=g) * 3).to(dtype).to(DEVICE)
    pos, f = positions(5, 2), inv_freq(True)
    assert_bitwise(q_norm_rope_triton(q, pos, f, 1e-6), q_norm_rope_ref(q, pos, f, 1e-6))


@pytest.mark.parametrize("inverse", [False, True])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_rope_and_inverse_bitwise(inverse, dtype):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(6, 4, 128, generator=g).to(dtype).to(DEVICE)
    pos, f = positions(6, 4), inv_freq(False)
    assert_bitwise(rope_triton(x, pos, f, inverse=inverse), rope_ref(x, pos, f, inverse=inverse))


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32])
def test_inverse_rope_of_fp32_attention_output_rounded_inside(out_dtype):
    """fp32 x (the sparse attention's output) rounded to the stream dtype inside the launch: the same
    bits as the cast before it (values on bf16 ties included), and as the twin's out_dtype."""
    g = torch.Generator().manual_seed(4)
    x = torch.randn(6, 4, 128, generator=g) * 5
    x.view(-1)[:6] = torch.tensor([1 + 2.0**-8, 1 + 3 * 2.0**-8, -(1 + 2.0**-8), 3 * 2.0**-9, 1e-30, -0.0])  # (no
    # subnormals: the interpreter's bf16 loads and stores flush them, in the existing bf16 path too)
    x, (pos, f) = x.to(DEVICE), (positions(6, 4), inv_freq(True))
    want = rope_ref(x.to(out_dtype), pos, f, inverse=True)
    assert_bitwise(rope_ref(x, pos, f, inverse=True, out_dtype=out_dtype), want)
    got = rope_triton(x, pos, f, inverse=True, out_dtype=out_dtype)
    assert got.dtype == out_dtype
    assert_bitwise(got, want)


def _kv_cache(mode: str, head_dim: int, block_size: int, stride: int | None) -> PagedKVCache:
    cache = PagedKVCache(5, block_size, mode=mode, head_dim=head_dim, block_stride_bytes=stride, device=DEVICE)
    cache.buffer.fill_(SENTINEL)
    return cache


@pytest.mark.parametrize(
    "mode,head_dim,block_size,extra_stride",
    [("fp8_ds_mla", 512, 4, 1), ("fp8_ds_mla", 512, 3, 577), ("bf16", 192, 4, 3), ("fp32", 256, 2, 5)],
)
def test_kv_insert_bytes_equal_twin(mode, head_dim, block_size, extra_stride):
    page = block_size * (584 if mode == "fp8_ds_mla" else head_dim * (2 if mode == "bf16" else 4))
    ours, ref = (_kv_cache(mode, head_dim, block_size, page + extra_stride) for _ in range(2))
    g = torch.Generator().manual_seed(5)
    n = 9
    kv = (torch.randn(n, head_dim, generator=g) * 4).to(torch.bfloat16 if mode != "fp32" else torch.float32)
    kv[2, :64] *= 1e-7  # a tiny NoPE group: the 1e-4 amax floor and subnormal codes
    kv[3, 64:128] = 0.0
    kv = kv.to(DEVICE)
    # slots across page boundaries (pages 0..4), unordered, with padding lanes
    slots = torch.tensor([block_size - 1, block_size, -1, 0, 2 * block_size + 1, 4 * block_size + block_size - 1,
                          -1, 3 * block_size, 4 * block_size], device=DEVICE)
    w = (1 + 0.1 * torch.randn(head_dim, generator=g)).to(torch.bfloat16).to(DEVICE)
    pos, f = positions(n, 6), inv_freq(True)
    kv_insert_triton(kv, w, 1e-6, pos, f, ours, slots)
    kv_insert_ref(kv, w, 1e-6, pos, f, ref, slots)
    assert_bitwise(ours.buffer, ref.buffer)
    assert int((ours.buffer != SENTINEL).sum()) > 0


def test_kv_insert_rejects_duplicates_and_bad_slots(monkeypatch):
    monkeypatch.setenv("MXSERVE_CHECK_SLOTS", "1")  # slot values are checked on a GPU only when asked (a host read)
    cache = _kv_cache("fp8_ds_mla", 512, 4, None)
    kv = torch.randn(2, 512, device=DEVICE).bfloat16()
    pos, f = positions(2, 1), inv_freq(False)
    w = torch.ones(512, device=DEVICE)
    with pytest.raises(ValueError, match="more than once"):
        kv_insert_triton(kv, w, 1e-6, pos, f, cache, torch.tensor([3, 3], device=DEVICE))
    with pytest.raises(ValueError, match="out of range"):
        kv_insert_triton(kv, w, 1e-6, pos, f, cache, torch.tensor([0, 20], device=DEVICE))
    with pytest.raises(ValueError, match=r"kv must be \[T, 512\]"):
        kv_insert_triton(kv[:, :256], w, 1e-6, pos, f, cache, torch.tensor([0, 1], device=DEVICE))


def test_indexer_key_cache_mode_is_addressed_like_the_twin():
    """The FP8 indexer codec (128 codes + fp32 scale) through the kv-insert kernel's store path."""
    ours, ref = (PagedIndexerKeyCache(3, 4, block_stride_bytes=4 * 132 + 7, device=DEVICE) for _ in range(2))
    for c in (ours, ref):
        c.buffer.fill_(SENTINEL)
    g = torch.Generator().manual_seed(9)
    k = (torch.randn(5, 128, generator=g) * 2).bfloat16().to(DEVICE)
    slots = torch.tensor([3, 4, -1, 11, 0], device=DEVICE)
    w = torch.ones(128, device=DEVICE)
    pos, f = positions(5, 10), inv_freq(True)
    kv_insert_triton(k, w, 1e-6, pos, f, ours, slots)
    kv_insert_ref(k, w, 1e-6, pos, f, ref, slots)
    assert_bitwise(ours.buffer, ref.buffer)
