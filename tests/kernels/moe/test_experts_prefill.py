"""Variant "bf16-prefill" (issue 10 prefill tile) against "bf16-fused": bit for bit.

Same exact weight values, same activation values, same per-element K order (128-K blocks in order,
even then odd half), the same SwiGLU epilogue and combine (`_experts_prefill_kernel.py`), so no
tolerance: equality (NaN = NaN) on the CPU under the interpreter, for every row-block size. The
GPU check is in test_gpu.py; the fused path's twin comparison in test_experts.py.
"""

import pytest
import torch
from tests.kernels.moe.test_experts import DEVICE, EXPERTS, MODES, D, E, _experts, _routing
from tests.kernels.moe.test_experts_split import _assert_equal, edge_scale_experts

from mxserve.formats import WeightLayout
from mxserve.kernels.moe import moe_experts, prefill


def _run(x, ids, w, mode, variant, experts=EXPERTS, **kw):
    x_dtype, qi, hd, _, _ = MODES[mode]
    return moe_experts(x.to(x_dtype), ids, w, experts, backend="triton", limit=10.0, quantize_inputs=qi,
                       hidden_dtype=hd, variant=variant, **kw)


def _check(x, ids, w, mode, experts=EXPERTS):
    got = _run(x, ids, w, mode, "bf16-prefill", experts)
    _assert_equal(_run(x, ids, w, mode, "bf16-fused", experts), got)
    return got


@pytest.fixture
def config(monkeypatch):
    """prefill.CONFIG, restored after the test."""
    monkeypatch.setattr(prefill, "CONFIG", dict(prefill.CONFIG))
    return prefill.CONFIG


def _one_tile(config, block_m, down_block_n=128):
    config["tiers"] = ((None, prefill.Tile(block_m, 4, 1, down_block_n, 4, 1)),)


@pytest.mark.parametrize("num_tokens", [1, 5, 21])
@pytest.mark.parametrize("mode", ["exact", "faithful"])
def test_bit_identical_to_fused(num_tokens, mode):
    """1 / odd token counts; expert E-1 never gets a token (`_routing`)."""
    x, ids, w = _routing(num_tokens, seed=31)
    assert _check(x, ids, w, mode).shape == (num_tokens, D)


@pytest.mark.parametrize("block_m,down_block_n", [(16, 128), (32, 256), (128, 128), (128, 256)])
def test_every_tile_gives_the_same_bits(config, block_m, down_block_n):
    """Row blocks of 16 / 32 / 128 (several blocks per expert, or one padded far past its rows), down
    programs of 128 / 256 features (the interpreter runs 128 with 128 rows: its product-sum's size
    limit): the same bits as the fused kernel."""
    _one_tile(config, block_m, down_block_n)
    x, ids, w = _routing(13, seed=6)
    _check(x, ids, w, "faithful")


def test_all_tokens_on_one_expert(config):
    """21 rows on expert 2 (two 16-row blocks), 11 + 10 on experts 3 / 0, none on 1, 4, 5."""
    _one_tile(config, 16)
    x, _, w = _routing(21, seed=2)
    ids = torch.tensor([[2, 3 + t % 2, t % 2] for t in range(21)], device=DEVICE)
    _check(x, ids, w, "faithful")


def test_scales_at_the_edges_and_negative_zero_codes():
    """Scale byte 128 (the word's top byte negative as int32), 48, codes 0x88 (-0 twice)."""
    x, ids, w = _routing(3, seed=4)
    _check(x, ids, w, "exact", experts=edge_scale_experts())


def test_batch_invariance():
    """A token alone ("bf16": the stream decode) gives its row of the 9-token prefill tile, bit for bit."""
    x, ids, w = _routing(9, seed=5)
    batch = _run(x, ids, w, "faithful", "bf16-prefill")
    for t in (0, 4, 8):
        alone = _run(x[t:t + 1], ids[t:t + 1], w[t:t + 1], "faithful", "bf16")
        assert torch.equal(alone[0], batch[t]), f"token {t}: max |d| {(alone[0] - batch[t]).abs().max().item()}"


def test_default_variant_takes_the_prefill_tile_at_prefill_sizes(monkeypatch):
    """"bf16" runs the prefill tile above the split decode's sizes (SPLIT_MAX_PAIRS_PER_EXPERT pairs
    per expert on average, set to 1 here: 6 pairs), and on request (tile="prefill"); the split
    decode below; the fused tile on experts the bf16 scale decode cannot take."""
    import mxserve.kernels.moe.experts as experts_mod

    monkeypatch.setenv(experts_mod.MMA_ORDER_ENV, "0")  # the routing of the other K order (the MMA order's: test_experts_mma_order)
    calls = []
    real = experts_mod.prefill_experts
    monkeypatch.setattr(experts_mod, "prefill_experts", lambda *a, **k: calls.append(a[0].shape[0]) or real(*a, **k))
    monkeypatch.setattr(experts_mod, "SPLIT_MAX_PAIRS_PER_EXPERT", 1)
    monkeypatch.setattr(experts_mod, "STREAM_DEFAULT_MAX_PAIRS", 0)
    big = _routing(3, seed=7)  # 9 pairs > 6
    _assert_equal(_run(*big, "faithful", "bf16-fused"), _run(*big, "faithful", "bf16"))
    assert calls == [3]
    _run(*_routing(2, seed=7), "faithful", "bf16")  # 6 pairs: the split decode
    assert calls == [3]
    _run(*_routing(2, seed=7), "faithful", "bf16", tile="prefill")
    assert calls == [3, 2]
    large_scales = _experts(seed=12)
    large_scales[1].w2.scales[0, 0] = 129
    _run(*big, "faithful", "bf16", experts=large_scales)
    assert calls == [3, 2], "scale byte 129: the fused tile"


def test_tile_depends_on_the_pair_count_and_dtypes_only():
    """The default tiers at the Flash MoE's 256 experts: 32 rows up to 32 pairs per expert on average,
    64 up to 64, 128 above; fp32 activations at most 64 rows (shared memory)."""
    assert [prefill.tile_for(n * 256, 256).block_m for n in (17, 32, 33, 64, 65, 96)] == [32, 32, 64, 64, 128, 128]
    assert prefill.tile_for(65 * 256, 256).down_block_n == 256
    assert [prefill.tile_for(n * 256, 256, fp32_activations=True).block_m for n in (32, 33, 96)] == [32, 64, 64]


@pytest.mark.parametrize("dtype,quant", [(torch.bfloat16, True), (torch.float32, True), (torch.float32, False)])
def test_prep_is_the_stream_prep(dtype, quant):
    """The prep kernel (16 tokens a program, 5 here: masked rows) writes the stream decode's prep
    values bit for bit: a NaN row, zeros, values spanning 12 binades."""
    from mxserve.kernels.moe._experts_prefill_kernel import _moe_prefill_prep_kernel
    from mxserve.kernels.moe._experts_stream_kernel import _moe_stream_prep_kernel

    g = torch.Generator().manual_seed(3)
    x = (torch.randn(5, D, generator=g) * torch.logspace(-6, 6, D, base=2.0)).to(dtype).to(DEVICE)
    x[1, 130] = float("nan")
    x[3, :128] = 0
    want, got = torch.empty_like(x), torch.full_like(x, 7.0)
    cnt = torch.empty((1,), dtype=torch.int32, device=DEVICE)
    _moe_stream_prep_kernel[(5, D // 128)](x, want, cnt, 0, x.stride(0), want.stride(0), QUANT=quant, ZERO_PER=1,
                                           num_warps=1)
    _moe_prefill_prep_kernel[(1, D // 128)](x, got, 5, x.stride(0), got.stride(0), QUANT=quant, ROWS=16, num_warps=4)
    same = (got == want) | (got.isnan() & want.isnan())
    assert same.all(), f"first mismatch at {torch.nonzero(~same)[0].tolist()}"
    assert got.isnan().any()


def test_refuses_fp8_block_and_large_scale_bytes():
    x, ids, w = _routing(2)
    with pytest.raises(ValueError, match="bf16-prefill"):
        _run(x, ids, w, "exact", "bf16-prefill", experts=_experts(seed=5, layout=WeightLayout.FP8_BLOCK))
    big = _experts(seed=12)
    big[1].w2.scales[0, 0] = 129
    with pytest.raises(ValueError, match="129 > 128"):
        _run(x, ids, w, "exact", "bf16-prefill", experts=big)
    assert len(EXPERTS) == E
