"""Seeded prompt sets for the serving benchmark, as token-id lists of an exact length.

Prompts go to the server as token ids, so every request has exactly `prompt_len` prompt tokens
whatever the tokenizer does with text. Two sets:
* `random`: BOS, then ids drawn uniformly from the vocabulary (BOS excluded) — the usual
  synthetic load (vLLM's "random" dataset); it says nothing about text, only about shapes.
* `text`: BOS, then a window of real text tokens (the default model's held-out sample,
  tokenized by the server under test) starting at a seeded offset, wrapping around the text.
Both derive only from `seed`, so a run can be repeated request for request.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

DATASETS = ("random", "text")


def random_prompts(num_prompts: int, prompt_len: int, *, vocab_size: int, bos_id: int | None,
                   seed: int) -> list[list[int]]:
    """`num_prompts` prompts of `prompt_len` ids (the first is BOS when `bos_id` is given)."""
    _check(num_prompts, prompt_len)
    if vocab_size < 2:
        raise ValueError(f"vocab_size={vocab_size} leaves no ids to draw from")
    rng = random.Random(f"random/{seed}")
    body_len = prompt_len - (bos_id is not None)
    prompts = []
    for _ in range(num_prompts):
        body = []
        while len(body) < body_len:
            token = rng.randrange(vocab_size)
            if token != bos_id:
                body.append(token)
        prompts.append(([bos_id] if bos_id is not None else []) + body)
    return prompts


def text_prompts(num_prompts: int, prompt_len: int, *, text_ids: Sequence[int], bos_id: int | None,
                 seed: int) -> list[list[int]]:
    """`num_prompts` windows of the tokenized text (`text_ids`, no BOS), BOS first when given."""
    _check(num_prompts, prompt_len)
    if not text_ids:
        raise ValueError("the text tokenized to no tokens")
    rng = random.Random(f"text/{seed}")
    body_len = prompt_len - (bos_id is not None)
    n = len(text_ids)
    prompts = []
    for _ in range(num_prompts):
        start = rng.randrange(n)
        body = [text_ids[(start + i) % n] for i in range(body_len)]
        prompts.append(([bos_id] if bos_id is not None else []) + body)
    return prompts


def _check(num_prompts: int, prompt_len: int) -> None:
    if num_prompts <= 0 or prompt_len <= 0:
        raise ValueError(f"need num_prompts > 0 and prompt_len > 0, got {num_prompts=}, {prompt_len=}")
