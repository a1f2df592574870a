"""Grouped expert kernels against the torch twin (CPU: interpreter), batch invariance, edge cases.

Stated tolerances (normwise relative error vs `moe_experts_ref`, fp64-accumulated):
  interpreter (fp32 product-sums): exact numerics <= 1e-6; faithful numerics <= 1e-5 (the FP8
  activations times E2M1 weights are exact products, so only fp32 summation order differs);
  the H200 numbers are in tests/kernels/moe/test_gpu.py.
"""

import pytest
import torch

from mxserve.formats import QuantizedWeight, WeightLayout
from mxserve.kernels.moe import ExpertWeights, moe_experts, moe_experts_ref
from mxserve.kernels.moe.experts import StackedExperts

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
E, D, I, K = 6, 256, 128, 3


def _experts(seed: int = 0, layout: WeightLayout = WeightLayout.MXFP4):
    g = torch.Generator().manual_seed(seed)

    def q(n, m):
        return QuantizedWeight.quantize(torch.randn(n, m, generator=g) * 0.05, layout).to(DEVICE)

    return tuple(ExpertWeights(q(I, D), q(D, I), q(I, D)) for _ in range(E))


EXPERTS = _experts()


def _routing(num_tokens: int, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.stack([torch.randperm(E - 1, generator=g)[:K] for _ in range(num_tokens)]) if num_tokens else \
        torch.zeros(0, K, dtype=torch.int64)  # expert E-1 never gets a token
    w = torch.rand(num_tokens, K, generator=g) + 0.1
    x = torch.randn(num_tokens, D, generator=g) * 2
    return x.to(DEVICE), ids.to(DEVICE), w.to(DEVICE)


MODES = {  # name: (x dtype, quantize_inputs, hidden dtype, variant, repack)
    "exact": (torch.float32, False, torch.float32, "bf16-fused", False),  # "bf16" = split decode: test_experts_split
    "faithful": (torch.bfloat16, True, torch.bfloat16, "bf16-fused", False),
    "faithful-w4a8": (torch.bfloat16, True, torch.bfloat16, "w4a8", False),
    "faithful-repack": (torch.bfloat16, True, torch.bfloat16, "bf16", True),
}
TOL = {"exact": 1e-6, "faithful": 1e-5, "faithful-w4a8": 1e-5, "faithful-repack": 1e-5}


def _run(x, ids, w, mode, experts=EXPERTS, **kw):
    x_dtype, qi, hd, variant, repack = MODES[mode]
    x = x.to(x_dtype)
    ref = moe_experts_ref(x, ids, w, experts, limit=10.0, quantize_inputs=qi, hidden_dtype=hd)
    got = moe_experts(x, ids, w, experts, backend="triton", limit=10.0, quantize_inputs=qi, hidden_dtype=hd,
                      variant=variant, repack_fp8=repack, **kw)
    return ref, got


def _assert_close(ref, got, tol):
    assert got.shape == ref.shape and got.dtype == torch.float32
    assert torch.isfinite(got).all()
    err = ((got - ref).norm() / ref.norm().clamp(min=1e-30)).item()
    worst = (got - ref).abs().argmax().item()
    assert err <= tol, f"normwise {err:.3e} > {tol}; worst at flat {worst}: {got.flatten()[worst]} vs {ref.flatten()[worst]}"


@pytest.mark.parametrize("num_tokens", [1, 5])
@pytest.mark.parametrize("mode", list(MODES))
def test_parity_with_twin(num_tokens, mode):
    x, ids, w = _routing(num_tokens)
    ref, got = _run(x, ids, w, mode)
    _assert_close(ref, got, TOL[mode])


def test_prefill_tile_and_all_tokens_on_one_expert():
    x, ids, w = _routing(21, seed=2)
    ids = torch.tensor([[2, 3 + t % 2, t % 2] for t in range(21)], device=DEVICE)  # every token hits expert 2
    ref, got = _run(x, ids, w, "faithful", tile="prefill")
    _assert_close(ref, got, TOL["faithful"])


def test_fp8_block_experts():
    experts = _experts(seed=5, layout=WeightLayout.FP8_BLOCK)
    x, ids, w = _routing(3)
    ref, got = _run(x, ids, w, "exact", experts=experts)
    _assert_close(ref, got, TOL["exact"])


def test_no_tokens():
    x, ids, w = _routing(0)
    _, got = _run(x, ids, w, "faithful")
    assert got.shape == (0, D)


@pytest.mark.parametrize("mode", ["exact", "faithful-w4a8"])
def test_batch_invariance(mode):
    """A token's output is bitwise the same alone (decode tile) and among 40 others (prefill tile)."""
    x, ids, w = _routing(41, seed=3)
    _, batch = _run(x, ids, w, mode, tile="prefill")
    for t in (0, 17, 40):
        _, alone = _run(x[t:t + 1], ids[t:t + 1], w[t:t + 1], mode, tile="decode")
        assert torch.equal(alone[0], batch[t]), f"token {t}: max |d| {(alone[0] - batch[t]).abs().max().item()}"


def test_stacked_weights_and_errors():
    st = StackedExperts.of(EXPERTS)
    assert st.fmt == "mxfp4" and st.w1.shape == (E, I, D // 2) and st.w2_scales.shape == (E, D, I // 32)
    assert st.nbytes_per_expert == 3 * I * D * 17 // 32  # half a byte per code + a byte per 32
    assert StackedExperts.of(EXPERTS, repack_fp8=True).fmt == "fp8_block"
    x, ids, w = _routing(2)
    with pytest.raises(ValueError, match="quantize_inputs"):
        moe_experts(x, ids, w, EXPERTS, backend="triton", limit=10.0, quantize_inputs=False, variant="w4a8")
    with pytest.raises(ValueError, match="must be quantized"):
        StackedExperts.of([ExpertWeights(torch.zeros(I, D), torch.zeros(D, I), torch.zeros(I, D))])


@pytest.mark.parametrize("qi,hd", [(False, torch.float32), (True, torch.bfloat16)])
def test_shared_expert_on_the_fp8_gemm(qi, hd):
    from mxserve.kernels.moe import expert_ffn_ref
    from mxserve.kernels.moe.shared import expert_ffn_fp8

    shared = _experts(seed=7, layout=WeightLayout.FP8_BLOCK)[0]
    x, _, w = _routing(3)
    x = x.to(hd)
    ref = expert_ffn_ref(x, shared, limit=10.0, quantize_inputs=qi, row_scale=w[:, 0], hidden_dtype=hd)
    got = expert_ffn_fp8(x, shared, limit=10.0, quantize_inputs=qi, row_scale=w[:, 0], hidden_dtype=hd)
    _assert_close(ref, got, 1e-2 if hd == torch.bfloat16 else 1e-5)  # bf16 hidden: rare FP8/bf16 rounding flips
