"""Launches per decode step, counted on the CPU (`launch_count`: aten compute ops + Triton launches,
every Triton kernel as the H200 runs it, the kernels counted rather than run): upper bounds that
fail when glue creeps back into the step. Each small launch costs ~2-5 us of a CUDA-graph step.

Counts (session 6), packaged default model / the Flash-shaped CSA + HCA step at tiny sizes:
478 / 181 before; 396 / 110 with the step maps in one launch, the MoE's shared-expert add and cast
inside hc_post and the embedding gathered straight into the streams; 313 / 89 now, with the shared
expert's SwiGLU in one launch, the attention output rounded inside the inverse RoPE, and (another
change) the projections' bf16 rounding in the linear's store."""

from __future__ import annotations

import os

import pytest

from tests.model.launch_count import decode_step_launches

pytest.importorskip("triton")
pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs the Triton interpreter")

# model → (most launches a step, CSA layers: the one per-layer slot map left (of the top-k entries),
# layers: one shared-expert SwiGLU launch each)
BOUNDS = {"default": (313, 3, 8), "tiny-flash": (89, 1, 2)}


@pytest.mark.parametrize("model", sorted(BOUNDS))
def test_decode_step_launches_stay_within_the_pinned_count(model):
    counter = decode_step_launches(model, execute=False)
    most, num_csa, num_layers = BOUNDS[model]
    assert counter.total <= most, f"{model}: {counter.total} launches a decode step (pinned {most}):\n{counter.report()}"
    assert counter.triton["_step_maps_kernel"] == 1, counter.report()
    assert counter.triton["_paged_slots_kernel"] == num_csa, counter.report()
    assert counter.triton["_shared_swiglu_kernel"] == num_layers, counter.report()
    int_ops = {op: n for op, n in counter.aten.items() if op in ("add", "sub", "div", "remainder", "where", "arange",
                                                                   "eq", "lt", "cat", "scalar_tensor", "clamp", "silu")}
    assert not int_ops, f"{model}: address math or SwiGLU glue is back in the step: {int_ops}"
    assert counter.aten["add"] == 0 and counter.aten["clone"] == 0, counter.report()  # MoE add, embedding copy


# MXSERVE_HC_FUSED=1 (session 17): hc_pre + block norm and hc_head + final norm in 2 launches, not 4,
# at both models' sizes (their rows fit one finish program, their K few splits)
FUSED_BOUNDS = {"default": 279, "tiny-flash": 79}


@pytest.mark.parametrize("model", sorted(FUSED_BOUNDS))
def test_fused_hc_drops_the_sums_of_squares_and_block_norm_launches(model, monkeypatch):
    monkeypatch.setenv("MXSERVE_HC_FUSED", "1")
    counter = decode_step_launches(model, execute=False)
    _, _, num_layers = BOUNDS[model]
    assert counter.total <= FUSED_BOUNDS[model], f"{model}: {counter.total} launches:\n{counter.report()}"
    assert counter.triton["_hc_sumsq_kernel"] == 0, counter.report()
    assert counter.triton["_rms_norm_kernel"] == num_layers, counter.report()  # the q low-rank norms only
    assert counter.triton["_hc_mix_kernel"] == counter.triton["_hc_finish_kernel"] == 2 * num_layers + 1
