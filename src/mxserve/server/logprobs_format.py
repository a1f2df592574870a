"""Engine logprobs → the two OpenAI shapes.

* Completions (legacy): `{"tokens", "token_logprobs", "top_logprobs", "text_offset"}`, one entry
  per token; with `echo`, the prompt's tokens come first and the first prompt token has `null`
  logprob and top_logprobs (nothing precedes it). `top_logprobs` maps token text → logprob and,
  as vLLM does, always contains the chosen token, so `chosen == max(top.values())` tells a greedy
  token (lm-eval's `is_greedy`).
* Chat: `{"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}]}`.

Token text is the token decoded on its own (special tokens kept); a token that is part of a
multi-byte character decodes to U+FFFD, and its raw bytes are not recoverable from the text, so
`bytes` is the UTF-8 of that text (as vLLM reports it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mxserve.engine.outputs import TokenLogprobs
from mxserve.engine.tokenizer import Tokenizer


def _finite(value: float) -> float:
    # JSON has no -inf; a token the model gives zero probability gets the most negative float.
    return value if value > -1e308 else -1e308


class TokenText:
    """Per-token decode with a cache (the same few ids recur across a response)."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tokenizer = tokenizer
        self._cache: dict[int, str] = {}

    def __call__(self, token_id: int) -> str:
        text = self._cache.get(token_id)
        if text is None:
            text = self._cache[token_id] = self._tokenizer.decode([token_id])
        return text


class CompletionLogprobs:
    """Accumulates the legacy logprobs object; `extend` may be called per stream chunk."""

    def __init__(self, token_text: TokenText, *, text_offset: int = 0) -> None:
        self._token_text = token_text
        self._offset = text_offset

    def entries(self, token_ids: Sequence[int], logprobs: Sequence[TokenLogprobs | None]) -> dict[str, list[Any]]:
        tokens, token_logprobs, tops, offsets = [], [], [], []
        for token_id, record in zip(token_ids, logprobs, strict=True):
            text = self._token_text(token_id)
            tokens.append(text)
            offsets.append(self._offset)
            self._offset += len(text)
            if record is None:
                token_logprobs.append(None)
                tops.append(None)
                continue
            token_logprobs.append(_finite(record.logprob))
            top = {self._token_text(t): _finite(lp) for t, lp in record.top.items()}
            top[text] = _finite(record.logprob)
            tops.append(top)
        return {"tokens": tokens, "token_logprobs": token_logprobs, "top_logprobs": tops, "text_offset": offsets}


def chat_logprobs(token_text: TokenText, token_ids: Sequence[int], logprobs: Sequence[TokenLogprobs],
                  *, num_top: int) -> list[dict[str, Any]]:
    content = []
    for token_id, record in zip(token_ids, logprobs, strict=True):
        text = token_text(token_id)
        ranked = sorted(record.top.items(), key=lambda item: -item[1])[:num_top]
        content.append({
            "token": text,
            "logprob": _finite(record.logprob),
            "bytes": list(text.encode("utf-8")),
            "top_logprobs": [{"token": token_text(t), "logprob": _finite(lp), "bytes": list(token_text(t).encode())}
                             for t, lp in ranked],
        })
    return content
