"""The simplest correct generation loop: one sequence, prefill then greedy decode, no engine.

It is the reference the engine is compared against (same tokens for every request, whatever the
batching), and the loop the verification tools use to score a stream at fixed contexts.
"""

from __future__ import annotations

import torch

from mxserve.model.deepseek_v4 import DeepseekV4Model
from mxserve.model.forward_batch import ForwardBatch


def greedy_generate(model: DeepseekV4Model, prompt: list[int], num_new: int) -> tuple[list[int], torch.Tensor]:
    """Prompt + `num_new` argmax tokens, and the logits of every context [len(prompt) + num_new - 1, V]."""
    state = model.new_cache_state(max_sequences=1, max_positions=len(prompt) + num_new + 1, block_size=16)
    logits = [model.forward(ForwardBatch.from_chunks([prompt], [0], [0]), state)]
    tokens = list(prompt)
    for _ in range(num_new):
        tokens.append(int(logits[-1][-1].argmax()))
        if len(tokens) < len(prompt) + num_new:
            logits.append(model.forward(ForwardBatch.from_chunks([[tokens[-1]]], [0], [len(tokens) - 1]), state))
    return tokens, torch.cat(logits)


def teacher_forced_logits(model: DeepseekV4Model, tokens: list[int], num_prompt: int) -> torch.Tensor:
    """Logits of every context of `tokens` (prefill the prompt, then decode the given tokens one by one)."""
    state = model.new_cache_state(max_sequences=1, max_positions=len(tokens) + 1, block_size=16)
    logits = [model.forward(ForwardBatch.from_chunks([tokens[:num_prompt]], [0], [0]), state)]
    for pos in range(num_prompt, len(tokens) - 1):
        logits.append(model.forward(ForwardBatch.from_chunks([[tokens[pos]]], [0], [pos]), state))
    return torch.cat(logits)
