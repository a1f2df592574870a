"""MoE backend choice: reference always available, Triton only when forced and able, with reasons."""

import pytest
import torch

from mxserve.formats import QuantizedWeight, WeightLayout
from mxserve.kernels.chooser import Platform, parse_overrides_env
from mxserve.kernels.moe import ExpertWeights, expert_ffn_ref, moe_experts_ref, route_ref
from mxserve.kernels.moe.chooser import MoESpec, choose_moe, moe_kernel_slots

H200 = Platform("cuda", (9, 0), False, True)
A100 = Platform("cuda", (8, 0), False, True)
CPU = Platform("cpu", None, False, True)


def _spec(**kw):
    base = dict(name="layers.3.ffn", num_experts=256, hidden=2048, dim=4096, layout="mxfp4", quantize_inputs=True,
                min_scale_byte=110, max_group_spread=4)
    return MoESpec(**{**base, **kw})


def test_reference_by_default_with_reasons():
    choice = choose_moe(_spec(), H200)
    assert choice.backend == "reference"
    assert "off by default" in choice.reason and "moe=triton" in choice.reason


@pytest.mark.parametrize("forced", ["triton", "triton-w4a8", "triton-repack"])
def test_forced_variant_on_h200(forced):
    choice = choose_moe(_spec(), H200, forced=forced)
    assert choice.backend == forced and choice.reason.startswith("forced; ")


def test_forced_but_unable_falls_back_with_the_reason():
    assert "NVIDIA GPU" in choose_moe(_spec(), CPU, forced="triton").reason
    choice = choose_moe(_spec(), A100, forced="triton-w4a8")
    assert choice.backend == "reference" and "sm_89+" in choice.reason
    assert "faithful" in choose_moe(_spec(quantize_inputs=False), H200, forced="triton-w4a8").reason
    assert "binades" in choose_moe(_spec(max_group_spread=15), H200, forced="triton-w4a8").reason
    assert "full precision" in choose_moe(_spec(layout=None), H200, forced="triton").reason
    assert "subnormal" in choose_moe(_spec(min_scale_byte=3), H200, forced="triton").reason
    assert choose_moe(_spec(), H200, forced="reference").backend == "reference"
    with pytest.raises(ValueError, match="unknown backend"):
        choose_moe(_spec(), H200, forced="cuda-magic")


def test_spec_of_weights_and_override_env():
    def q(n, m):
        return QuantizedWeight.quantize(torch.randn(n, m) * 0.05, WeightLayout.MXFP4)

    spec = MoESpec.of("l0", [ExpertWeights(q(128, 256), q(256, 128), q(128, 256))], quantize_inputs=True)
    assert (spec.layout, spec.hidden, spec.dim, spec.num_experts) == ("mxfp4", 128, 256, 1)
    assert 0 <= spec.max_group_spread <= 255 and spec.min_scale_byte > 100
    full = MoESpec.of("l1", [ExpertWeights(torch.zeros(128, 256), torch.zeros(256, 128), torch.zeros(128, 256))],
                      quantize_inputs=False)
    assert full.layout is None
    assert parse_overrides_env({"MXSERVE_KERNEL_OVERRIDES": "moe=triton-w4a8"}) == {"moe": "triton-w4a8"}


def test_kernel_slots():
    ref = moe_kernel_slots("reference")
    assert ref == {"route": route_ref, "moe_experts": moe_experts_ref, "expert_ffn": expert_ffn_ref}
    tri = moe_kernel_slots("triton-w4a8", shared_backend="triton")
    assert tri["route"].__name__ == "route_triton" and tri["moe_experts"].keywords["variant"] == "w4a8"
    assert tri["expert_ffn"].__name__ == "expert_ffn_fp8"
    assert moe_kernel_slots("triton-repack")["moe_experts"].keywords["repack_fp8"] is True
    with pytest.raises(ValueError, match="unknown backend"):
        moe_kernel_slots("cuda-magic")


def test_split_decode_backend():
    choice = choose_moe(_spec(max_scale_byte=127), H200, forced="triton-split")
    assert choice.backend == "triton-split" and "split decode" in choice.reason
    assert "overflows" in choose_moe(_spec(max_scale_byte=129), H200, forced="triton-split").reason
    assert "MXFP4" in choose_moe(_spec(layout="fp8_block"), H200, forced="triton-split").reason
    assert moe_kernel_slots("triton-split")["moe_experts"].keywords["variant"] == "bf16-split"
    assert moe_kernel_slots("triton")["moe_experts"].keywords["variant"] == "bf16"  # split decode where it applies
    assert moe_kernel_slots("triton-fused")["moe_experts"].keywords["variant"] == "bf16-fused"  # the off switch
    assert choose_moe(_spec(), H200, forced="triton-fused").backend == "triton-fused"


def test_stream_decode_backend():
    choice = choose_moe(_spec(max_scale_byte=128), H200, forced="triton-stream")
    assert choice.backend == "triton-stream" and "stream decode" in choice.reason
    assert "overflows" in choose_moe(_spec(max_scale_byte=129), H200, forced="triton-stream").reason
    assert "MXFP4" in choose_moe(_spec(layout="fp8_block"), H200, forced="triton-stream").reason
    assert moe_kernel_slots("triton-stream")["moe_experts"].keywords["variant"] == "bf16-stream"
    assert choose_moe(_spec(), H200).backend == "reference"  # opt-in: never chosen unless forced
    # the split-K stream decode: same conditions, its own variant
    choice = choose_moe(_spec(max_scale_byte=128), H200, forced="triton-stream-splitk")
    assert choice.backend == "triton-stream-splitk" and "stream-splitk decode" in choice.reason
    assert "overflows" in choose_moe(_spec(max_scale_byte=129), H200, forced="triton-stream-splitk").reason
    assert moe_kernel_slots("triton-stream-splitk")["moe_experts"].keywords["variant"] == "bf16-stream-splitk"
