"""What a front needs to know about a loaded engine without holding its weights.

The HTTP server validates prompts, counts tokens and renders chat templates before anything reaches
the engine, so it needs the checkpoint's config, the tokenizer and the context limit the engine
actually resolved. `EngineInfo` carries exactly that: the threaded front builds it from its
`LLMEngine`, the process front receives it (pickled) from the engine process once the engine has
loaded. `encode_prompt` is the one definition of how a completion prompt becomes token ids; the
`LLMEngine` uses it too. No torch here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mxserve.config import ModelConfig
from mxserve.engine.tokenizer import Tokenizer


@dataclass(frozen=True)
class EngineInfo:
    model_config: ModelConfig  # the checkpoint's config (layout, bos/eos ids, vocab_size)
    max_model_len: int  # tokens per request, prompt + output, as the engine resolved it
    tokenizer: Tokenizer | None  # None: the checkpoint ships no tokenizer.json (token-id prompts only)

    def encode_prompt(self, prompt: str | Sequence[int]) -> tuple[str | None, list[int]]:
        return encode_prompt(prompt, self.tokenizer, self.model_config)


def encode_prompt(prompt: str | Sequence[int], tokenizer: Tokenizer | None,
                  model_config: ModelConfig) -> tuple[str | None, list[int]]:
    """(text or None, token ids). Text prompts get BOS + the tokenizer's ids (as HF's default encode
    does for DeepSeek). ValueError for an empty prompt, ids outside the model's vocabulary, or text
    on a checkpoint without a tokenizer."""
    if isinstance(prompt, str):
        if tokenizer is None:
            raise ValueError("this checkpoint ships no tokenizer.json: pass prompts as token ids")
        if not prompt:
            raise ValueError("prompt is empty")
        return prompt, [model_config.bos_token_id, *tokenizer.encode(prompt)]
    ids = list(prompt)
    if not ids:
        raise ValueError("prompt is empty (no token ids)")
    if not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
        raise ValueError("prompt token ids must be integers")
    bad = [t for t in ids if not 0 <= t < model_config.vocab_size]
    if bad:
        raise ValueError(f"prompt token id {bad[0]} outside the vocabulary [0, {model_config.vocab_size})")
    return None, ids
