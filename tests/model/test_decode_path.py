"""The static-shape decode path (`DeepseekV4Model.decode_forward`, the CUDA-graph one) against the
per-chunk path (`forward` on chunks of one token): logits and every cache byte bit-identical.

Five sequences of the tiny-all model (sliding window 32, CSA ratio 4 with top-8, HCA ratio 16)
decode at positions chosen to cross the compression boundaries during the steps (HCA entries
complete at 15, 31, 47; CSA every 4 positions; CSA candidates beyond the top-8 from position 35),
one starting at position 0 (no prefill), in a bucket of 8 (three padding rows). Both paths start
from copies of one cache state after a per-chunk prefill, so page assignments are equal.
"""

from __future__ import annotations

import copy
import dataclasses
import os

import pytest
import torch

from mxserve.kernels.attention_chooser import attention_ops
from mxserve.model.checkpoint import CheckpointReader
from mxserve.model.decode_batch import DecodeBatch, DecodeGeometry, build_decode_batch, paged_slots
from mxserve.model.deepseek_v4 import DeepseekV4Model
from mxserve.model.forward_batch import ForwardBatch
from mxserve.model.kernel_set import REFERENCE_KERNELS
from mxserve.model.kv_state import ModelCacheState, Pool
from mxserve.model.numerics import NumericPolicy

PROMPT_LENGTHS = (0, 13, 30, 34, 46)  # decode positions start here
BUCKET = 8
MAX_POSITIONS = 64
BLOCK_SIZE = 8
EXACT = NumericPolicy.for_mode("exact")


def _caches(state: ModelCacheState) -> dict[str, torch.Tensor]:
    out = {}
    for i, layer in enumerate(state.layers):
        for name in ("window", "compressed", "indexer", "state", "indexer_state"):
            cache = getattr(layer, name)
            if cache is not None:
                out[f"layer {i} {name}"] = cache.buffer
    return out


def _assert_same_caches(a: ModelCacheState, b: ModelCacheState, step: int) -> None:
    ca, cb = _caches(a), _caches(b)
    for name in ca:
        assert torch.equal(ca[name], cb[name]), f"step {step}: {name} bytes differ"


def _prefilled(model: DeepseekV4Model) -> tuple[ModelCacheState, list[int]]:
    """Cache state after prefilling every non-empty prompt; the first decode token of each sequence."""
    state = model.new_cache_state(max_sequences=len(PROMPT_LENGTHS), max_positions=MAX_POSITIONS,
                                  block_size=BLOCK_SIZE)
    gen = torch.Generator().manual_seed(5)
    prompts = [torch.randint(2, model.config.vocab_size, (n,), generator=gen).tolist() for n in PROMPT_LENGTHS]
    live = [i for i, p in enumerate(prompts) if p]
    logits = model.forward(ForwardBatch.from_chunks([prompts[i] for i in live], live, [0] * len(live),
                                                    logits_for="last"), state)
    first = [0] * len(prompts)
    for row, i in enumerate(live):
        first[i] = int(logits[row].argmax())
    return state, first


def _compare(model: DeepseekV4Model, num_steps: int, kernels=None) -> None:
    """`kernels`: switched to after the prefill (the interpreter is slow; only the steps matter)."""
    state_chunks, tokens = _prefilled(model)
    if kernels is not None:
        model.set_kernels(kernels)
    state_decode = copy.deepcopy(state_chunks)
    geometry = DecodeGeometry.for_positions(model.config, BLOCK_SIZE, MAX_POSITIONS)
    seqs = list(range(len(PROMPT_LENGTHS)))
    positions = list(PROMPT_LENGTHS)
    for step in range(num_steps):
        want = model.forward(ForwardBatch.from_chunks([[t] for t in tokens], seqs, positions), state_chunks)
        batch = build_decode_batch(tokens, seqs, positions, state_decode, geometry, num_rows=BUCKET)
        got = model.decode_forward(batch, state_decode, geometry)
        assert got.shape == (BUCKET, model.config.vocab_size)
        assert torch.isfinite(got).all(), f"step {step}: non-finite logits (padding rows included)"
        n = len(seqs)
        assert torch.equal(got[:n], want), f"step {step}: logits differ, max |Δ| {(got[:n] - want).abs().max():.3e}"
        _assert_same_caches(state_chunks, state_decode, step)
        tokens = want.argmax(dim=-1).tolist()
        positions = [p + 1 for p in positions]


@pytest.fixture(scope="module")
def tiny_reader(tiny_all):
    return CheckpointReader(tiny_all)


@pytest.mark.parametrize("numerics", ["exact", "faithful"])
def test_decode_path_equals_per_chunk_path_reference_kernels(tiny_reader, numerics):
    model = DeepseekV4Model(tiny_reader.config, tiny_reader.load(progress=False), numerics=numerics,
                            resident_weights=True)
    _compare(model, num_steps=3)


@pytest.mark.slow  # the interpreter runs every attention kernel
@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="CPU tensors need the Triton interpreter")
def test_decode_path_equals_per_chunk_path_triton_attention(tiny_reader):
    """Every attention op Triton (interpreted on the CPU), faithful numerics: fp8_ds_mla caches,
    FP8 indexer keys, the per-row indexer slots of the decode batch."""
    pytest.importorskip("triton")
    model = DeepseekV4Model(tiny_reader.config, tiny_reader.load(progress=False), numerics="faithful",
                            resident_weights=True)
    _compare(model, num_steps=2, kernels=dataclasses.replace(REFERENCE_KERNELS, **attention_ops("triton")))


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="CPU tensors need the Triton interpreter")
def test_decode_path_with_the_triton_slot_map(tiny_reader, monkeypatch):
    """The decode step's slots from the one-launch Triton map (what CUDA runs): the same logits
    and cache bytes as the per-chunk path."""
    pytest.importorskip("triton")
    monkeypatch.setenv("MXSERVE_TRITON_PAGED_SLOTS", "1")
    model = DeepseekV4Model(tiny_reader.config, tiny_reader.load(progress=False), numerics="exact",
                            resident_weights=True)
    _compare(model, num_steps=3)


def test_paged_slots_is_the_cache_state_address_rule(tiny_reader):
    state = ModelCacheState(tiny_reader.config, EXACT, num_blocks=16, block_size=4)
    state.set_block_tables("a", {"window": [7, 2, 9]})
    state.set_block_tables("b", {"window": [3]})
    geometry = DecodeGeometry.for_positions(tiny_reader.config, 4, 20)
    batch = build_decode_batch([5, 6], ["a", "b"], [10, 3], state, geometry, num_rows=3)
    indices = torch.tensor([[-1, 0, 5, 11, 12, 19], [-1, 0, 3, 4, 8, 19], [0, 1, 2, 3, 4, 5]])
    got = paged_slots(batch.block_tables[Pool.WINDOW], indices, 4)
    assert got[0].tolist() == state.slots(Pool.WINDOW, "a", indices[0]).tolist() == [-1, 28, 9, 39, -1, -1]
    assert got[1].tolist() == state.slots(Pool.WINDOW, "b", indices[1]).tolist() == [-1, 12, 15, -1, -1, -1]
    assert got[2].tolist() == [-1] * 6  # a padding row addresses nothing


def test_build_decode_batch_refuses_what_a_device_check_would_sync_for(tiny_reader):
    state = ModelCacheState(tiny_reader.config, EXACT, num_blocks=16, block_size=4)
    geometry = DecodeGeometry.for_positions(tiny_reader.config, 4, 20)
    vocab = tiny_reader.config.vocab_size
    with pytest.raises(ValueError, match=f"token id {vocab} is not in"):
        build_decode_batch([vocab], [0], [3], state, geometry, num_rows=1)
    with pytest.raises(ValueError, match=r"position 20 is not in \[0, 20\)"):
        build_decode_batch([1], [0], [20], state, geometry, num_rows=1)
    with pytest.raises(ValueError, match="2 sequences do not fit 1 rows"):
        build_decode_batch([1, 1], [0, 1], [0, 0], state, geometry, num_rows=1)
    empty = DecodeBatch.empty(2, geometry)
    assert empty.token_ids.tolist() == [0, 0] and (empty.block_tables[Pool.HCA] == -1).all()



@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="CPU tensors need the Triton interpreter")
@pytest.mark.parametrize("fused", ["0", "1"], ids=["hc", "hc fused"])
def test_decode_step_with_the_triton_hc_equals_the_reference_kernels(tiny_reader, monkeypatch, fused):
    """The hc ops and block norms Triton (MXSERVE_HC_FUSED off and on: hc_pre + norm in 4 or 2
    launches) against the reference kernels, one decode step from one prefilled state: the same
    logits and cache bytes (the Triton hc ops give the twins' bits in the interpreter)."""
    pytest.importorskip("triton")
    from mxserve.kernels.hyper_connection import hc_ops

    monkeypatch.setenv("MXSERVE_HC_FUSED", fused)
    model = DeepseekV4Model(tiny_reader.config, tiny_reader.load(progress=False), numerics="faithful",
                            resident_weights=True)
    state_ref, tokens = _prefilled(model)
    state_hc = copy.deepcopy(state_ref)
    geometry = DecodeGeometry.for_positions(model.config, BLOCK_SIZE, MAX_POSITIONS)
    seqs, positions = list(range(len(PROMPT_LENGTHS))), list(PROMPT_LENGTHS)
    want = model.decode_forward(build_decode_batch(tokens, seqs, positions, state_ref, geometry, num_rows=BUCKET),
                                state_ref, geometry)
    model.set_kernels(dataclasses.replace(REFERENCE_KERNELS, **hc_ops("triton")))
    got = model.decode_forward(build_decode_batch(tokens, seqs, positions, state_hc, geometry, num_rows=BUCKET),
                               state_hc, geometry)
    assert torch.equal(got, want), f"logits differ, max |Δ| {(got - want).abs().max():.3e}"
    _assert_same_caches(state_ref, state_hc, 0)
