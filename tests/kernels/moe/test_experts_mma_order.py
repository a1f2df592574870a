"""The MMA K order of the whole MoE (MXSERVE_MOE_MMA_ORDER=1; by shape when unset) on the CPU under the
interpreter: a token's bits are the same alone (the splitk decode) and inside batches that take the
prefill tile in MMA order (32- and 64-row blocks), in faithful and exact numerics; the values are the
fp64 twin's within the tolerances of every bf16 variant (test_experts.TOL). The H200 checks are in
test_gpu.py (test_mma_order_*).

The layer is test_experts_stream_splitk's (E 5, D = I = 256, top-3), so 1 / 11 / 100 tokens are 3 / 33
/ 300 pairs. MMA_DECODE_MAX_PAIRS is lowered to 32 here so that 33 and 300 pairs take the prefill tile
(at its shipped 512 the interpreter would run 300 pairs through ~10k decode programs).
"""

import pytest
import torch
from tests.kernels.moe.test_experts import MODES, TOL, _assert_close
from tests.kernels.moe.test_experts_stream_splitk import LAYER, _routing

from mxserve.kernels.moe import experts, moe_experts, moe_experts_ref, prefill, stream_splitk


@pytest.fixture
def mma_order(monkeypatch):
    monkeypatch.setenv(experts.MMA_ORDER_ENV, "1")
    monkeypatch.setattr(experts, "MMA_DECODE_MAX_PAIRS", 32)


def _run(x, ids, w, mode, variant="bf16", tile="auto"):
    x_dtype, qi, hd, _, _ = MODES[mode]
    return moe_experts(x.to(x_dtype), ids, w, LAYER, backend="triton", limit=10.0, quantize_inputs=qi,
                       hidden_dtype=hd, variant=variant, tile=tile)


def _equal(a, b, what):
    assert torch.equal(a, b), f"{what}: max |d| {(a - b).abs().max().item():.3e}"


def test_token_bits_alone_and_in_batches(mma_order):
    """Exact numerics (fp32 activations as bf16 hi + lo: sums whose fp32 rounding depends on the order;
    faithful numerics' e4m3 x e2m1 products mostly sum exactly in fp32, which would hide an order change
    here). Tokens 0 and 7 alone (3 pairs: the splitk decode) == their rows at 11 tokens (33 pairs:
    prefill tile, 32-row blocks) == their rows at 100 tokens (300 pairs, 60 an expert: 64-row blocks);
    the 11-token batch through the decode (tile "decode") gives the same bits, the 100-token batch the
    twin's values."""
    mode = "exact"
    x, ids, w = _routing(100, seed=31)
    x_dtype, qi, hd, _, _ = MODES[mode]
    assert prefill.tile_for(33, 5).block_m == 32 and prefill.tile_for(300, 5).block_m == 64
    big = _run(x, ids, w, mode)
    small = _run(x[:11], ids[:11], w[:11], mode)
    _equal(_run(x[:11], ids[:11], w[:11], mode, tile="decode"), small, "11 tokens: decode vs prefill tile")
    for t in (0, 7):
        alone = _run(x[t:t + 1], ids[t:t + 1], w[t:t + 1], mode)
        _equal(alone[0], small[t], f"token {t} alone vs in 11")
        _equal(alone[0], big[t], f"token {t} alone vs in 100")
    ref = moe_experts_ref(x.to(x_dtype), ids, w, LAYER, limit=10.0, quantize_inputs=qi, hidden_dtype=hd)
    _assert_close(ref, big, TOL[mode])


def test_switch_and_the_splitk_variant(mma_order, monkeypatch):
    """On: "bf16" gives "bf16-stream-splitk"'s bits (no K split) at 3 and 33 pairs, and no longer the old
    order's ("bf16-prefill"); the splitk variant's large calls take the MMA prefill tile too. Off: "bf16"
    is the old order again. A K split configured for the variant does not reach "bf16" (whole K).
    Exact numerics, so that the two orders' fp32 sums differ (test above)."""
    x, ids, w = _routing(11, seed=9)
    on = _run(x, ids, w, "exact")
    _equal(on, _run(x, ids, w, "exact", "bf16-stream-splitk"), "switch on vs splitk variant (33 pairs)")
    old = _run(x, ids, w, "exact", "bf16-prefill")
    assert not torch.equal(on, old), "the MMA order gave the old order's bits: the switch did nothing"
    monkeypatch.setitem(stream_splitk.CONFIG, "gate_up_k_split", 128)
    monkeypatch.setitem(stream_splitk.CONFIG, "down_k_split", 128)
    one = _run(x[:1], ids[:1], w[:1], "exact")
    _equal(one[0], on[0], "bf16 with a K split configured for the variant")
    monkeypatch.setenv(experts.MMA_ORDER_ENV, "0")
    _equal(_run(x, ids, w, "exact"), old, "switch off vs bf16-prefill")


def test_shape_rule_and_switch(monkeypatch):
    """Unset or "auto": the MMA order from MMA_ORDER_MIN_DIM (Flash's 4096) on, not on the default
    model's 256; "1" / "0" force it; any other value is an error, not a silent default."""
    monkeypatch.delenv(experts.MMA_ORDER_ENV, raising=False)
    assert experts.mma_order_for(4096) and experts.mma_order_for(7168)
    assert not experts.mma_order_for(256) and not experts.mma_order_for(experts.MMA_ORDER_MIN_DIM - 1)
    monkeypatch.setenv(experts.MMA_ORDER_ENV, "auto")
    assert experts.mma_order_for(4096) and not experts.mma_order_for(256)
    monkeypatch.setenv(experts.MMA_ORDER_ENV, "1")
    assert experts.mma_order_for(256)
    monkeypatch.setenv(experts.MMA_ORDER_ENV, "0")
    assert not experts.mma_order_for(4096)
    monkeypatch.setenv(experts.MMA_ORDER_ENV, "yes")
    with pytest.raises(ValueError, match="MXSERVE_MOE_MMA_ORDER"):
        experts.mma_order_for(4096)
