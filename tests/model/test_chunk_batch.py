"""The batched chunk path (`mxserve.model.chunk_batch`: one slot map, compressor step and
sparse-attention launch for every chunk of a batch) against the per-chunk loop it replaces
(MXSERVE_PER_CHUNK_ATTENTION=1): every logit and every cache byte bit-identical.

Two forwards of the tiny-all model (sliding window 32, CSA ratio 4 with top-8, HCA ratio 16) on
four sequences: prompts of 5, 13, 17 and 1 tokens, then chunks of 3, 1, 20 and 2 tokens after
them (chunked-prefill continuations, a decode row, and a chunk that crosses the CSA top-8 and two
HCA entries), so the rows' compressed lists have different widths and the padding is exercised.
With the Triton kernels (interpreted, slow) the prompts run on the reference kernels and only the
continuation on Triton: its caches then hold both paths' entries.
"""

from __future__ import annotations

import copy
import dataclasses
import os

import pytest
import torch

from mxserve.kernels.attention_chooser import attention_ops
from mxserve.model.checkpoint import CheckpointReader
from mxserve.model.chunk_batch import PER_CHUNK_ENV
from mxserve.model.deepseek_v4 import DeepseekV4Model
from mxserve.model.forward_batch import ForwardBatch
from mxserve.model.kernel_set import REFERENCE_KERNELS

PROMPTS = (5, 13, 17, 1)
CONTINUATIONS = (3, 1, 20, 2)
BLOCK_SIZE = 8


def _caches(state) -> dict[str, torch.Tensor]:
    return {f"layer {i} {name}": getattr(layer, name).buffer for i, layer in enumerate(state.layers)
            for name in ("window", "compressed", "indexer", "state", "indexer_state") if getattr(layer, name) is not None}


def _two_forwards(model: DeepseekV4Model, monkeypatch, per_chunk: bool, second_kernels=None
                  ) -> tuple[list[torch.Tensor], dict]:
    if per_chunk:
        monkeypatch.setenv(PER_CHUNK_ENV, "1")
    else:
        monkeypatch.delenv(PER_CHUNK_ENV, raising=False)
    gen = torch.Generator().manual_seed(11)
    vocab, seqs = model.config.vocab_size, list(range(len(PROMPTS)))
    state = model.new_cache_state(max_sequences=len(PROMPTS), max_positions=64, block_size=BLOCK_SIZE)
    logits = []
    starts = [0] * len(PROMPTS)
    for lengths in (PROMPTS, CONTINUATIONS):
        if lengths is CONTINUATIONS and second_kernels is not None:
            model.set_kernels(second_kernels)
        chunks = [torch.randint(2, vocab, (n,), generator=gen).tolist() for n in lengths]
        logits.append(model.forward(ForwardBatch.from_chunks(chunks, seqs, starts), state))
        starts = [s + n for s, n in zip(starts, lengths, strict=True)]
    return logits, _caches(state)


def _compare(model: DeepseekV4Model, monkeypatch, second_kernels=None) -> None:
    want_logits, want_caches = _two_forwards(copy.deepcopy(model), monkeypatch, True, second_kernels)
    got_logits, got_caches = _two_forwards(model, monkeypatch, False, second_kernels)
    for step, (got, want) in enumerate(zip(got_logits, want_logits, strict=True)):
        assert torch.isfinite(want).all()
        assert torch.equal(got, want), f"forward {step}: logits differ, max |Δ| {(got - want).abs().max():.3e}"
    for name, want in want_caches.items():
        assert torch.equal(got_caches[name], want), f"{name} bytes differ"


@pytest.fixture(scope="module")
def tiny_reader(tiny_all):
    return CheckpointReader(tiny_all)


@pytest.mark.parametrize("numerics", ["exact", "faithful"])
def test_batched_chunks_equal_per_chunk_loop_reference_kernels(tiny_reader, monkeypatch, numerics):
    model = DeepseekV4Model(tiny_reader.config, tiny_reader.load(progress=False), numerics=numerics)
    _compare(model, monkeypatch)


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="CPU tensors need the Triton interpreter")
def test_batched_chunks_equal_per_chunk_loop_triton_attention(tiny_reader, monkeypatch):
    """The Triton sparse attention (split-K fold over the −1-padded lists), compressor, indexer and
    top-k kernels, interpreted: the padding folds as nothing, bit for bit."""
    pytest.importorskip("triton")
    model = DeepseekV4Model(tiny_reader.config, tiny_reader.load(progress=False), numerics="faithful")
    _compare(model, monkeypatch, second_kernels=dataclasses.replace(REFERENCE_KERNELS, **attention_ops("triton")))


def test_an_observer_keeps_the_per_chunk_loop(tiny_reader, monkeypatch):
    """Observers see values per sequence, so a forward with one never takes the batched path."""
    monkeypatch.delenv(PER_CHUNK_ENV, raising=False)
    model = DeepseekV4Model(tiny_reader.config, tiny_reader.load(progress=False), numerics="exact")
    seen: list[object] = []

    class Sequences:
        def on_attention_values(self, layer_id, seq_id, site, values):
            seen.append(seq_id)

        def on_moe_output(self, layer_id, batch, out):
            pass

        def on_layer_output(self, layer_id, batch, streams):
            pass

    model.observer = Sequences()
    state = model.new_cache_state(max_sequences=2, max_positions=16, block_size=BLOCK_SIZE)
    model.forward(ForwardBatch.from_chunks([[3, 4, 5], [6, 7]], ["a", "b"], [0, 0]), state)
    assert {"a", "b"} <= set(seen)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_batched_chunks_equal_per_chunk_loop_all_triton(monkeypatch):
    """The packaged default model on CUDA with every Triton kernel, both numerics' kernels as the
    engine picks them (faithful): eight prompts of different lengths, then a continuation chunk of
    each; logits and cache bytes of the batched path equal the per-chunk loop's."""
    from mxserve import LLM

    llm = LLM(device="cuda", max_model_len=512, progress=False,
              kernel_overrides={"linear": "triton", "moe": "triton", "attention": "triton", "hc": "triton"})
    model = llm.engine.model
    gen = torch.Generator().manual_seed(3)
    lengths = [(25, 1), (3, 40), (130, 9), (1, 1), (64, 65), (7, 128), (200, 3), (12, 5)]
    chunks = [[torch.randint(2, model.config.vocab_size, (n,), generator=gen).tolist() for n in pair]
              for pair in lengths]
    results = []
    for per_chunk in (True, False):
        if per_chunk:
            monkeypatch.setenv(PER_CHUNK_ENV, "1")
        else:
            monkeypatch.delenv(PER_CHUNK_ENV, raising=False)
        state = model.new_cache_state(max_sequences=len(lengths), max_positions=512, block_size=64, device="cuda")
        seqs, starts, logits = list(range(len(lengths))), [0] * len(lengths), []
        for step in range(2):
            step_chunks = [c[step] for c in chunks]
            with torch.no_grad():
                logits.append(model.forward(ForwardBatch.from_chunks(step_chunks, seqs, starts, device="cuda"), state))
            starts = [s + len(c) for s, c in zip(starts, step_chunks, strict=True)]
        results.append((logits, {k: v.clone() for k, v in _caches(state).items()}))
    (want_logits, want_caches), (got_logits, got_caches) = results
    for got, want in zip(got_logits, want_logits, strict=True):
        assert torch.equal(got, want), f"logits differ, max |Δ| {(got - want).abs().max():.3e}"
    for name, want in want_caches.items():
        assert torch.equal(got_caches[name], want), f"{name} bytes differ"
