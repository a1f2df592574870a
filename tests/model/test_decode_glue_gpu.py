"""On a GPU, the decode step's glue fusions change no bit: the packaged default model with every
Triton kernel (hc included), one `decode_forward` step of 3 rows + 1 padding row, against the same
step with the fusions switched back to the ops they replace:

* the step's slot maps in one launch (`step_slot_maps`) vs map by map
  (MXSERVE_TORCH_PAGED_SLOTS=1, the twin path's ops);
* the MoE's shared expert added and rounded inside `hc_post` vs torch's add and cast before it;
* the shared expert's SwiGLU in one launch vs torch's clamps, silu, product and cast
  (MXSERVE_TORCH_SHARED_SWIGLU=1);
* the inverse RoPE rounding the attention output to the stream dtype inside its launch (no switch:
  its bits are checked by tests/kernels/attention_ops/test_fused_writers.py on CUDA).

Logits and every cache byte must be equal. Also the fused maps alone against the twin on CUDA
tensors. (CPU: the interpreter tests next to each kernel; tests/model/test_decode_path.py.)"""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from mxserve.kernels.chooser import ALL_TRITON

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def _caches(state) -> dict[str, torch.Tensor]:
    return {f"layer {i} {name}": getattr(layer, name).buffer for i, layer in enumerate(state.layers)
            for name in ("window", "compressed", "indexer", "state", "indexer_state") if getattr(layer, name) is not None}


def random_decode_step(model):
    """(static batch, cache state, geometry) of one decode step of 3 rows + 1 padding row at positions
    that complete a CSA entry (3, 127: ratio 4) and an HCA entry (127, 383: ratio 128), every cache
    filled with arbitrary bytes (the step reads them back)."""
    from mxserve.model.decode_batch import DecodeBatch, DecodeGeometry, build_decode_batch

    state = model.new_cache_state(max_sequences=3, max_positions=512, block_size=64, device="cuda")
    geometry = DecodeGeometry.for_positions(model.config, state.block_size, 512)
    host = build_decode_batch([5, 6, 7], ["a", "b", "c"], [3, 127, 383], state, geometry, num_rows=4)
    static = DecodeBatch.empty(4, geometry, device="cuda")
    static.copy_(host)
    gen = torch.Generator(device="cuda").manual_seed(0)
    for caches in _caches(state).values():
        if caches.dtype == torch.uint8:
            caches.copy_(torch.randint(0, 256, caches.shape, generator=gen, device="cuda", dtype=torch.uint8) & 0x3F)
        else:
            caches.copy_(torch.randn(caches.shape, generator=gen, device="cuda").to(caches.dtype))
    return static, state, geometry


def step_with_switch_on_and_off(model, monkeypatch, env: str, after_on=None):
    """One `random_decode_step` run with the environment switch `env` at "1", then at "0", each on
    its own copy of the cache state: (logits on, logits off, state on, state off). `after_on()` runs
    between the two (a check of what the "on" step left behind)."""
    static, state, geometry = random_decode_step(model)
    state_on, state_off = copy.deepcopy(state), copy.deepcopy(state)
    monkeypatch.setenv(env, "1")
    on = model.decode_forward(static, state_on, geometry)
    if after_on is not None:
        after_on()
    monkeypatch.setenv(env, "0")
    off = model.decode_forward(static, state_off, geometry)
    return on, off, state_on, state_off


def assert_same_step(a: torch.Tensor, b: torch.Tensor, state_a, state_b) -> None:
    """Two runs of one decode step: finite logits for the 3 real rows, equal logits, every cache byte equal."""
    torch.cuda.synchronize()
    assert torch.isfinite(a[:3]).all()
    assert torch.equal(a, b), f"logits differ, max |Δ| {(a - b).abs().max():.3e}"
    for name, buf in _caches(state_a).items():
        assert torch.equal(buf, _caches(state_b)[name]), f"{name} bytes differ"


def test_gpu_decode_step_fusions_are_bit_identical(monkeypatch):
    from mxserve import LLM

    llm = LLM(device="cuda", max_model_len=512, progress=False, kernel_overrides=ALL_TRITON)
    model = llm.engine.model
    assert model.kernels.label("hc_post") == "triton"
    static, state, geometry = random_decode_step(model)
    state_fused, state_plain = copy.deepcopy(state), copy.deepcopy(state)

    fused = model.decode_forward(static, state_fused, geometry)

    fused_kernels = model.kernels
    hc_post = fused_kernels.hc_post

    def hc_post_unfused(block_out, streams, post, comb, *, addend=None):  # the ops before the fusion
        if addend is not None:
            block_out = (block_out + addend).to(streams.dtype)
        return hc_post(block_out, streams, post, comb)

    monkeypatch.setenv("MXSERVE_TORCH_PAGED_SLOTS", "1")
    monkeypatch.setenv("MXSERVE_TORCH_SHARED_SWIGLU", "1")
    model.set_kernels(dataclasses.replace(fused_kernels, hc_post=hc_post_unfused))
    try:
        plain = model.decode_forward(static, state_plain, geometry)
    finally:
        model.set_kernels(fused_kernels)
    assert_same_step(fused, plain, state_fused, state_plain)


def test_gpu_step_maps_equal_the_twin():
    from mxserve.kernels.paged_slots.step_maps import step_slot_maps_triton
    from mxserve.kernels.paged_slots.step_maps_ref import (
        CandidateMapSpec,
        SiteMapSpec,
        StepMapSpec,
        step_slot_maps_ref,
    )

    spec = StepMapSpec(64, "w", 128, (SiteMapSpec("cs", "c", 4, True), SiteMapSpec("is", "i", 4, True),
                                      SiteMapSpec("hs", "h", 128, False)),
                       (CandidateMapSpec("h", 128, 64), CandidateMapSpec("i", 4, 2048)))
    g = torch.Generator().manual_seed(1)
    rows = 64
    positions = torch.randint(0, 8192, (rows,), generator=g)
    positions[:6] = torch.tensor([0, 3, 127, 128, 8191, 383])
    widths = {"w": 128, "cs": 128, "is": 128, "hs": 128, "c": 32, "i": 32, "h": 1}
    tables = {}
    for name, width in widths.items():
        t = torch.randint(0, 10_000, (rows, width), generator=g)
        t[torch.rand(rows, width, generator=g) < 0.1] = -1
        t[-3:] = -1  # padding rows
        tables[name] = t
    want = step_slot_maps_ref(positions, tables, spec)
    got = step_slot_maps_triton(positions.cuda(), {k: v.cuda() for k, v in tables.items()}, spec)
    pairs = [(got.window_write, want.window_write), (got.window_read, want.window_read)]
    for a, b in zip(got.sites, want.sites, strict=True):
        pairs += [(a.state_slots, b.state_slots), (a.entry_slots, b.entry_slots),
                  (a.entry_positions, b.entry_positions), (a.row_slots, b.row_slots)]
    for a, b in zip(got.candidates, want.candidates, strict=True):
        pairs += [(a.entry_ids, b.entry_ids), (a.slots, b.slots), (a.visible, b.visible)]
    for i, (a, b) in enumerate(pairs):
        assert torch.equal(a.cpu(), b), f"map {i} differs"
