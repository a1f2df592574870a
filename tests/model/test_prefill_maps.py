"""The prefill forward's slot maps, computed once per forward (`chunk_batch.ChunkTables`), against
the per-layer maps they replace (MXSERVE_PREFILL_LAYER_MAPS=1): the same integers map by map, and
the same logits and cache bytes through the model.

The batch: four sequences of the tiny-all model (sliding window 32, CSA ratio 4, HCA ratio 16)
with prompts of 5, 13, 17 and 1 tokens, then continuation chunks of 3, 1, 20 and 2 (the widths
of the rows' candidate lists differ, some are 0). The fused path (all maps in one
`step_slot_maps`, as on CUDA) is forced on the CPU, where it runs the torch twin.
"""

from __future__ import annotations

import copy

import pytest
import torch

import mxserve.model.chunk_batch as chunk_batch
from mxserve.config import AttentionKind
from mxserve.model.checkpoint import CheckpointReader
from mxserve.model.chunk_batch import LAYER_MAPS_ENV, ChunkTables, chunk_tables
from mxserve.model.compressor import indexer_compressor_site, kind_compressor_site
from mxserve.model.deepseek_v4 import DeepseekV4Model
from mxserve.model.forward_batch import ForwardBatch
from mxserve.model.kv_state import Pool

PROMPTS = (5, 13, 17, 1)
CONTINUATIONS = (3, 1, 20, 2)
BLOCK_SIZE = 8


@pytest.fixture(scope="module")
def model(tiny_all) -> DeepseekV4Model:
    reader = CheckpointReader(tiny_all)
    return DeepseekV4Model(reader.config, reader.load(progress=False), numerics="faithful")


def _batches(vocab: int):
    gen = torch.Generator().manual_seed(5)
    starts = [0] * len(PROMPTS)
    for lengths in (PROMPTS, CONTINUATIONS):
        chunks = [torch.randint(2, vocab, (n,), generator=gen).tolist() for n in lengths]
        yield ForwardBatch.from_chunks(chunks, list(range(len(lengths))), starts, logits_for="last")
        starts = [s + n for s, n in zip(starts, lengths, strict=True)]


def _maps(tables: ChunkTables) -> dict[str, torch.Tensor]:
    cfg = tables.config
    out = {"window write": tables.window_write(), "window read": tables.window_read()}
    for name, site in (("csa", kind_compressor_site(cfg, AttentionKind.CSA)),
                       ("hca", kind_compressor_site(cfg, AttentionKind.HCA)), ("indexer", indexer_compressor_site(cfg))):
        a = tables.compressor(site)
        out |= {f"{name} state": a.state_slots, f"{name} entry": a.entry_slots,
                f"{name} entry position": a.entry_positions, f"{name} rows": a.row_slots}
    for pool, ratio in ((Pool.HCA, cfg.compress_rate_hca), (Pool.INDEXER, cfg.compress_rate_csa)):
        ids, slots = tables.candidates(pool, ratio)
        out |= {f"{pool} visible": tables.visible(ratio), f"{pool} ids": ids, f"{pool} slots": slots}
    for index, chunk in enumerate(tables.batch.chunks):
        out[f"chunk {index} keys"] = tables.chunk_slots(Pool.INDEXER, index, chunk.end_pos // cfg.compress_rate_csa)
    return out


@pytest.mark.parametrize("fused", [False, True])
def test_shared_maps_equal_the_per_layer_maps(model, fused):
    state = model.new_cache_state(max_sequences=len(PROMPTS), max_positions=64, block_size=BLOCK_SIZE)
    for batch in _batches(model.config.vocab_size):
        for c in batch.chunks:
            state.ensure_capacity(c.seq_id, c.end_pos)
        host = ChunkTables.host_tables(state, batch)
        want = _maps(ChunkTables(state, batch, host, shared=False))
        shared = ChunkTables(state, batch, host, shared=True, fused=fused)
        got, again = _maps(shared), _maps(shared)
        assert want.keys() == got.keys()
        for name, w in want.items():
            assert got[name].dtype == w.dtype and torch.equal(got[name], w), f"{name}: {got[name]} != {w}"
            assert again[name] is got[name], f"{name} was computed twice"


def test_tables_are_rebuilt_when_the_batch_positions_or_pages_change(model, monkeypatch):
    monkeypatch.delenv(LAYER_MAPS_ENV, raising=False)
    state = model.new_cache_state(max_sequences=len(PROMPTS), max_positions=64, block_size=BLOCK_SIZE)
    batch = next(_batches(model.config.vocab_size))
    first = chunk_tables(state, batch)
    assert chunk_tables(state, batch) is first  # the next layer of the forward
    state.block_tables[Pool.WINDOW][0] = [*state.block_tables[Pool.WINDOW][0]]  # a new list, same pages
    assert chunk_tables(state, batch) is first
    state.block_tables[Pool.HCA][2].append(7)  # a page more
    second = chunk_tables(state, batch)
    assert second is not first
    batch.positions.add_(0)  # written in place
    assert chunk_tables(state, batch) is not second


def _forwards(model: DeepseekV4Model, monkeypatch, layer_maps: bool, fused: bool = False):
    if layer_maps:
        monkeypatch.setenv(LAYER_MAPS_ENV, "1")
    else:
        monkeypatch.delenv(LAYER_MAPS_ENV, raising=False)
    monkeypatch.setattr(chunk_batch, "use_triton", lambda t: fused)
    state = model.new_cache_state(max_sequences=len(PROMPTS), max_positions=64, block_size=BLOCK_SIZE)
    logits = [model.forward(batch, state) for batch in _batches(model.config.vocab_size)]
    caches = {f"layer {i} {name}": getattr(layer, name).buffer.clone() for i, layer in enumerate(state.layers)
              for name in ("window", "compressed", "indexer", "state", "indexer_state")
              if getattr(layer, name) is not None}
    return logits, caches


@pytest.mark.parametrize("fused", [False, True])
def test_prefill_logits_and_caches_equal_the_per_layer_maps(model, monkeypatch, fused):
    want_logits, want_caches = _forwards(copy.deepcopy(model), monkeypatch, layer_maps=True)
    got_logits, got_caches = _forwards(model, monkeypatch, layer_maps=False, fused=fused)
    for step, (got, want) in enumerate(zip(got_logits, want_logits, strict=True)):
        assert torch.isfinite(want).all()
        assert torch.equal(got, want), f"forward {step}: logits differ, max |Δ| {(got - want).abs().max():.3e}"
    for name, want in want_caches.items():
        assert torch.equal(got_caches[name], want), f"{name} bytes differ"
