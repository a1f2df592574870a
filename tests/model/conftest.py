"""Shared fixtures for the reference-model tests: models built once per config per session."""

from __future__ import annotations

import functools

import torch

from mxserve.model.deepseek_v4 import DeepseekV4Model
from mxserve.model.forward_batch import ForwardBatch
from tests.model.hf_oracle import build_hf_model, hf_to_release_weights


@functools.cache
def hf_weights(name: str):
    from tests.model.oracle_configs import ALL_TEST_CONFIGS

    return hf_to_release_weights(build_hf_model(ALL_TEST_CONFIGS[name], seed=1234))


@functools.cache
def exact_model(name: str) -> DeepseekV4Model:
    from tests.model.oracle_configs import ALL_TEST_CONFIGS

    return DeepseekV4Model(ALL_TEST_CONFIGS[name], hf_weights(name), numerics="exact")


def random_prompt(vocab_size: int, length: int, seed: int) -> list[int]:
    return torch.randint(2, vocab_size, (length,), generator=torch.Generator().manual_seed(seed)).tolist()


def run_in_chunks(model: DeepseekV4Model, tokens: list[int], chunk_size: int) -> torch.Tensor:
    """Feed `tokens` to a fresh cache in chunks of `chunk_size`; fp32 logits for every position."""
    state = model.new_cache_state(max_sequences=1, max_positions=len(tokens), block_size=16)
    out = []
    for start in range(0, len(tokens), chunk_size):
        chunk = tokens[start : start + chunk_size]
        out.append(model.forward(ForwardBatch.from_chunks([chunk], [0], [start]), state))
    return torch.cat(out)


def max_relative_error(ours: torch.Tensor, ref: torch.Tensor) -> float:
    return float(((ours - ref).abs().amax(dim=-1) / ref.abs().amax(dim=-1)).max())
