"""One path for prefill, chunked prefill and decode; causality; batch invariance (exact mode)."""

from __future__ import annotations

import pytest
import torch

from mxserve.model.forward_batch import ForwardBatch
from tests.model.conftest import exact_model, max_relative_error, random_prompt, run_in_chunks
from tests.model.oracle_configs import ALL_TEST_CONFIGS

NUM_TOKENS = 260  # crosses every config's compressed windows; indexer top-k < candidates
CHUNK_TOL = 1e-5
BATCH_TOL = 1e-6


@pytest.mark.parametrize("name", sorted(ALL_TEST_CONFIGS))
def test_prefill_equals_decode_and_chunked_prefill(name):
    model = exact_model(name)
    tokens = random_prompt(model.config.vocab_size, NUM_TOKENS, seed=11)
    full = run_in_chunks(model, tokens, NUM_TOKENS)
    for chunk_size in (1, 7, 64):
        chunked = run_in_chunks(model, tokens, chunk_size)
        err = max_relative_error(chunked, full)
        assert err <= CHUNK_TOL, f"{name}: chunk size {chunk_size} differs from one prefill by {err:.3e}"


@pytest.mark.parametrize("name", sorted(ALL_TEST_CONFIGS))
def test_appending_tokens_never_changes_earlier_logits(name):
    model = exact_model(name)
    tokens = random_prompt(model.config.vocab_size, NUM_TOKENS, seed=12)
    long = run_in_chunks(model, tokens, NUM_TOKENS)
    short = run_in_chunks(model, tokens[:173], 173)
    assert torch.equal(long[:173], short) or max_relative_error(long[:173], short) <= BATCH_TOL


@pytest.mark.parametrize("name", sorted(ALL_TEST_CONFIGS))
def test_batch_of_eight_equals_each_alone(name):
    model = exact_model(name)
    lengths = [1, 5, 17, 40, 63, 97, 130, 211]
    prompts = [random_prompt(model.config.vocab_size, n, seed=100 + i) for i, n in enumerate(lengths)]
    alone = [run_in_chunks(model, p, len(p)) for p in prompts]

    state = model.new_cache_state(max_sequences=8, max_positions=max(lengths) + 8, block_size=16)
    batched = model.forward(ForwardBatch.from_chunks(prompts, list(range(8)), [0] * 8), state)
    offset = 0
    for i, (prompt, ref) in enumerate(zip(prompts, alone, strict=True)):
        err = max_relative_error(batched[offset : offset + len(prompt)], ref)
        assert err <= BATCH_TOL, f"{name}: sequence {i} (len {len(prompt)}) in a batch of 8 differs by {err:.3e}"
        offset += len(prompt)

    # a mixed step: every sequence decodes one more token in one batch (different positions)
    next_tokens = [[int(ref[-1].argmax())] for ref in alone]
    step = model.forward(ForwardBatch.from_chunks(next_tokens, list(range(8)), lengths), state)
    for i, prompt in enumerate(prompts):
        solo = run_in_chunks(model, prompt + next_tokens[i], len(prompt) + 1)[-1:]
        err = max_relative_error(step[i : i + 1], solo)
        assert err <= BATCH_TOL, f"{name}: decode of sequence {i} in a mixed batch differs by {err:.3e}"
