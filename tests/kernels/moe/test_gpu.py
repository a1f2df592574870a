"""H200: MoE kernels at the Flash expert shape (D 4096, I 2048), parity and batch invariance.

Stated GPU tolerances (normwise relative error vs the fp64 twin, faithful numerics): bf16 variant
<= 2e-3, W4A8 on FP8 tensor cores <= 1e-2 (Hopper's FP8 MMA accumulates with fewer bits, ~1e-4
relative per 128-K block; the hidden state is then re-quantized to e4m3, where a ~1e-4 shift flips
the rounding of ~0.1-0.2% of values by one e4m3 ulp (12.5%), a normwise ~4e-3: measured 2.2e-3 to
7.6e-3 over T = 1..1024 on the H200, 2026-11-29); exact mode
(fp32 activations as hi + lo bf16) <= 1e-4. The full sweep is `benchmarks/moe.py`.
"""

import pytest
import torch

from mxserve.formats import QuantizedWeight
from mxserve.kernels.moe import ExpertWeights, moe_experts_ref, route_ref
from mxserve.kernels.moe.experts import StackedExperts, moe_experts_triton
from mxserve.kernels.moe.router import route_triton

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]
E, D, I, K = 16, 4096, 2048, 6


@pytest.fixture(scope="module")
def layer():
    g = torch.Generator(device="cuda").manual_seed(0)
    mats = {}
    for name, (n, k) in (("w1", (I, D)), ("w3", (I, D)), ("w2", (D, I))):
        mats[name] = (torch.randint(0, 256, (E, n, k // 2), dtype=torch.uint8, device="cuda", generator=g),
                      torch.randint(112, 123, (E, n, k // 32), dtype=torch.uint8, device="cuda", generator=g))
    st = StackedExperts("mxfp4", *mats["w1"], *mats["w3"], *mats["w2"], E, I, D)
    experts = [ExpertWeights(*(QuantizedWeight.from_mxfp4(mats[n][0][e], mats[n][1][e], D if n != "w2" else I)
                               for n in ("w1", "w2", "w3"))) for e in range(E)]
    gate = (torch.randn(E, D, device="cuda", generator=g) * 0.02).bfloat16()
    return st, experts, gate


@pytest.mark.parametrize("num_tokens", [1, 64, 300])
def test_router_bit_equal(layer, num_tokens):
    _, _, gate = layer
    x = torch.randn(num_tokens, D, device="cuda").bfloat16()
    bias = torch.randn(E, device="cuda") * 0.01
    w_ref, i_ref = route_ref(x, gate, top_k=K, routed_scaling=1.5, bias=bias)
    w, i = route_triton(x, gate, top_k=K, routed_scaling=1.5, bias=bias)
    assert torch.equal(i, i_ref) and torch.equal(w, w_ref)


@pytest.mark.parametrize("num_tokens", [1, 64, 300])
@pytest.mark.parametrize("variant,tol", [("bf16", 2e-3), ("w4a8", 1e-2)])
def test_parity_and_invariance(layer, num_tokens, variant, tol):
    st, experts, gate = layer
    x = torch.randn(num_tokens, D, device="cuda").bfloat16()
    w, ids = route_ref(x, gate, top_k=K, routed_scaling=1.5, bias=torch.zeros(E, device="cuda"))
    kw = dict(limit=10.0, quantize_inputs=True, hidden_dtype=torch.bfloat16)
    ref = moe_experts_ref(x, ids, w, experts, **kw)
    got = moe_experts_triton(x, ids, w, st, variant=variant, **kw)
    err = ((got - ref).norm() / ref.norm()).item()
    assert err <= tol, f"{variant} T={num_tokens}: normwise {err:.3e} > {tol}"
    one = moe_experts_triton(x[:1], ids[:1], w[:1], st, variant=variant, **kw)
    assert torch.equal(one[0], got[0]), "token 0 alone differs from token 0 in the batch"


def test_exact_mode(layer):
    st, experts, gate = layer
    x = torch.randn(5, D, device="cuda")
    w, ids = route_ref(x, gate, top_k=K, routed_scaling=1.5, bias=torch.zeros(E, device="cuda"))
    ref = moe_experts_ref(x, ids, w, experts, limit=10.0, quantize_inputs=False)
    got = moe_experts_triton(x, ids, w, st, limit=10.0, quantize_inputs=False)
    assert ((got - ref).norm() / ref.norm()).item() <= 1e-4


# "bf16-split" (PTX nibble decode, bf16 scale products, 64-feature wgmma tiles): 1 and 40 tokens run the
# split decode here (16 experts: up to 256 pairs), 300 the fused prefill tile in both. "bf16-stream"
# (3 launches, rows from the ids, pipelined int32 scale words and even/odd x copies, fused SwiGLU and
# combine by arrival counters): 1, 40, 85 tokens (6 .. 510 pairs: both id-scan widths). "bf16-prefill" (the
# stream K loop over 32/64/128-row blocks of the sort, gate and up in one loop): 1, 40, 300 tokens.
DECODE_VARIANT_TOKENS = ([("bf16-split", n) for n in (1, 40, 300)] + [("bf16-stream", n) for n in (1, 40, 85)]
                         + [("bf16-prefill", n) for n in (1, 40, 300)])


@pytest.mark.parametrize("variant,num_tokens", DECODE_VARIANT_TOKENS)
@pytest.mark.parametrize("quantize_inputs", [True, False])
def test_decode_variant_bit_identical_to_fused(layer, variant, num_tokens, quantize_inputs):
    """The decode variants give the fused kernel's bits; token 0 alone equals token 0 in the batch."""
    st, _, gate = layer
    x = torch.randn(num_tokens, D, device="cuda")
    x = x.bfloat16() if quantize_inputs else x
    w, ids = route_ref(x, gate, top_k=K, routed_scaling=1.5, bias=torch.zeros(E, device="cuda"))
    kw = dict(limit=10.0, quantize_inputs=quantize_inputs,
              hidden_dtype=torch.bfloat16 if quantize_inputs else torch.float32)
    fused = moe_experts_triton(x, ids, w, st, variant="bf16-fused", **kw)
    got = moe_experts_triton(x, ids, w, st, variant=variant, **kw)
    diff = got != fused
    assert not diff.any(), f"{int(diff.sum())} differ, max |d| {(got - fused).abs().max().item():.3e}"
    one = moe_experts_triton(x[:1], ids[:1], w[:1], st, variant=variant, **kw)
    assert torch.equal(one[0], got[0])


def test_stream_decode_all_tokens_on_the_same_experts(layer):
    """Worst-case routing: 64 tokens all on experts 0..5 (4 row blocks of 16 per expert)."""
    st, _, _ = layer
    x = torch.randn(64, D, device="cuda").bfloat16()
    ids = torch.arange(K, device="cuda").repeat(64, 1)
    w = torch.rand(64, K, device="cuda") + 0.1
    kw = dict(limit=10.0, quantize_inputs=True, hidden_dtype=torch.bfloat16)
    fused = moe_experts_triton(x, ids, w, st, variant="bf16-fused", **kw)
    got = moe_experts_triton(x, ids, w, st, variant="bf16-stream", **kw)
    assert torch.equal(got, fused), f"max |d| {(got - fused).abs().max().item():.3e}"


@pytest.mark.parametrize("variant", ["bf16-stream", "bf16-stream-splitk"])
def test_stream_decode_graph_replay(layer, variant):
    """Captured once, replayed on new routings: the arrival counters are zeroed inside every call
    (prep kernel), so replays 2 and 3 equal eager calls bit for bit."""
    st, _, gate = layer
    kw = dict(limit=10.0, quantize_inputs=True, hidden_dtype=torch.bfloat16, variant=variant)
    x = torch.randn(3, D, device="cuda").bfloat16()
    w, ids = route_ref(x, gate, top_k=K, routed_scaling=1.5, bias=torch.zeros(E, device="cuda"))
    moe_experts_triton(x, ids, w, st, **kw)  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = moe_experts_triton(x, ids, w, st, **kw)
    for seed in (1, 2):
        g = torch.Generator(device="cuda").manual_seed(seed)
        x.copy_(torch.randn(3, D, device="cuda", generator=g).bfloat16())
        w_new, ids_new = route_ref(x, gate, top_k=K, routed_scaling=1.5, bias=torch.zeros(E, device="cuda"))
        w.copy_(w_new)
        ids.copy_(ids_new)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, moe_experts_triton(x, ids, w, st, **kw)), f"replay {seed} differs from eager"


# "bf16-stream-splitk" (weights widened into the wgmma registers; K unsplit as shipped): its own
# bits, so tolerances. Against the fp64 twin those of "bf16" above (faithful 2e-3, exact 1e-4); against
# "bf16-stream" (only the fp32 summation groups differ; faithful: a flipped bf16 / e4m3 rounding of h
# now and then) 1e-3 faithful, 1e-5 exact. Tokens 1, 16, 85 (both id-scan widths) with real routing and
# 16 tokens all on experts 0..5 (one 16-row block each, TOP_K x 2 arrivals per combine tile).
SPLITK_TOL = {True: (2e-3, 1e-3), False: (1e-4, 1e-5)}  # quantize_inputs: (vs twin, vs bf16-stream)


@pytest.mark.parametrize("num_tokens,routing", [(1, "real"), (16, "real"), (85, "real"), (16, "worst")])
@pytest.mark.parametrize("quantize_inputs", [True, False])
def test_stream_splitk_parity_and_invariance(layer, num_tokens, routing, quantize_inputs):
    from mxserve.kernels.moe import stream_splitk

    st, experts, gate = layer
    assert stream_splitk.num_splits(D, stream_splitk.CONFIG["gate_up_k_split"]) >= 1
    x = torch.randn(num_tokens, D, device="cuda")
    x = x.bfloat16() if quantize_inputs else x
    w, ids = route_ref(x, gate, top_k=K, routed_scaling=1.5, bias=torch.zeros(E, device="cuda"))
    if routing == "worst":
        ids = torch.arange(K, device="cuda").repeat(num_tokens, 1)
    kw = dict(limit=10.0, quantize_inputs=quantize_inputs,
              hidden_dtype=torch.bfloat16 if quantize_inputs else torch.float32)
    ref = moe_experts_ref(x, ids, w, experts, **kw)
    got = moe_experts_triton(x, ids, w, st, variant="bf16-stream-splitk", **kw)
    stream = moe_experts_triton(x, ids, w, st, variant="bf16-stream", **kw)
    tol_twin, tol_stream = SPLITK_TOL[quantize_inputs]
    err_twin = ((got - ref).norm() / ref.norm()).item()
    err_stream = ((got - stream).norm() / stream.norm()).item()
    assert err_twin <= tol_twin, f"vs twin: normwise {err_twin:.3e} > {tol_twin}"
    assert err_stream <= tol_stream, f"vs bf16-stream: normwise {err_stream:.3e} > {tol_stream}"
    for t in {0, num_tokens - 1}:
        one = moe_experts_triton(x[t:t + 1], ids[t:t + 1], w[t:t + 1], st, variant="bf16-stream-splitk", **kw)
        assert torch.equal(one[0], got[t]), f"token {t} alone differs from token {t} in the batch"


# MXSERVE_MOE_MMA_ORDER=1: variant "bf16" in the MMA K order at every size (the splitk decode without a
# K split up to 512 pairs, the prefill tile in that order above). Tolerances SPLITK_TOL (vs the twin, vs
# the old order). 64 tokens = 384 pairs (the decode; tile "prefill": 32-row blocks), 300 tokens = 1800
# pairs (the prefill tile, 128-row blocks faithful, 64 exact); every token alone (6 pairs) is the decode.
@pytest.mark.parametrize("num_tokens,quantize_inputs", [(64, True), (300, True), (300, False)])
def test_mma_order_parity_and_invariance(layer, monkeypatch, num_tokens, quantize_inputs):
    from mxserve.kernels.moe import experts as experts_mod

    st, experts, gate = layer
    x = torch.randn(num_tokens, D, device="cuda")
    x = x.bfloat16() if quantize_inputs else x
    w, ids = route_ref(x, gate, top_k=K, routed_scaling=1.5, bias=torch.zeros(E, device="cuda"))
    kw = dict(limit=10.0, quantize_inputs=quantize_inputs,
              hidden_dtype=torch.bfloat16 if quantize_inputs else torch.float32)
    ref = moe_experts_ref(x, ids, w, experts, **kw)
    monkeypatch.setenv(experts_mod.MMA_ORDER_ENV, "0")
    old = moe_experts_triton(x, ids, w, st, **kw) if quantize_inputs else None
    monkeypatch.setenv(experts_mod.MMA_ORDER_ENV, "1")
    got = moe_experts_triton(x, ids, w, st, **kw)
    tol_twin, tol_old = SPLITK_TOL[quantize_inputs]
    err_twin = ((got - ref).norm() / ref.norm()).item()
    assert err_twin <= tol_twin, f"vs twin: normwise {err_twin:.3e} > {tol_twin}"
    if old is not None:
        err_old = ((got - old).norm() / old.norm()).item()
        assert err_old <= tol_old, f"vs the old order: normwise {err_old:.3e} > {tol_old}"
    for t in {0, num_tokens // 2, num_tokens - 1}:
        one = moe_experts_triton(x[t:t + 1], ids[t:t + 1], w[t:t + 1], st, **kw)
        assert torch.equal(one[0], got[t]), f"token {t} alone (decode) differs from token {t} in the batch"
    if num_tokens * K <= experts_mod.MMA_DECODE_MAX_PAIRS:
        tile = moe_experts_triton(x, ids, w, st, tile="prefill", **kw)
        assert torch.equal(tile, got), "the MMA prefill tile differs from the decode at the same batch"
