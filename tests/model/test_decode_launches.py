"""Launches per decode step, counted on the CPU (`launch_count`: aten compute ops + Triton launches,
every Triton kernel as the H200 runs it, the kernels counted rather than run): upper bounds that
fail when glue creeps back into the step. Each small launch costs ~2-5 us of a CUDA-graph step.

Counts when pinned (session 6): the packaged default model 478 → 396, the Flash-shaped CSA + HCA
step at tiny sizes 181 → 110 (step maps in one launch; the MoE's shared-expert add and cast inside
hc_post; the embedding gathered straight into the streams)."""

from __future__ import annotations

import os

import pytest

from tests.model.launch_count import decode_step_launches

pytest.importorskip("triton")
pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs the Triton interpreter")

# model → (most launches a step, CSA layers: the one per-layer slot map left, of the top-k entries)
BOUNDS = {"default": (396, 3), "tiny-flash": (110, 1)}


@pytest.mark.parametrize("model", sorted(BOUNDS))
def test_decode_step_launches_stay_within_the_pinned_count(model, monkeypatch):
    monkeypatch.setenv("MXSERVE_TRITON_PAGED_SLOTS", "1")  # the slot maps as CUDA runs them
    monkeypatch.delenv("MXSERVE_TORCH_PAGED_SLOTS", raising=False)
    counter = decode_step_launches(model, execute=False)
    most, num_csa = BOUNDS[model]
    assert counter.total <= most, f"{model}: {counter.total} launches a decode step (pinned {most}):\n{counter.report()}"
    assert counter.triton["_step_maps_kernel"] == 1, counter.report()
    assert counter.triton["_paged_slots_kernel"] == num_csa, counter.report()
    int_ops = {op: n for op, n in counter.aten.items() if op in ("add", "sub", "div", "remainder", "where", "arange",
                                                                   "eq", "lt", "cat", "scalar_tensor")}
    assert not int_ops, f"{model}: address math is back in the step: {int_ops}"
    assert counter.aten["add"] == 0 and counter.aten["clone"] == 0, counter.report()  # MoE add, embedding copy
