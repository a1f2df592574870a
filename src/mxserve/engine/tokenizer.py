"""The checkpoint's tokenizer: HF `tokenizers` over `tokenizer.json`, plus the DeepSeek-V4
special-token ids looked up by string.

Contract (spec §10):
* `encode(text)` never adds special tokens (`add_special_tokens=False`): the prompt string built
  by `mxserve.engine.prompt.encode_messages` already starts with BOS, and a second BOS would
  change the model's input.
* the special tokens the engine needs (BOS, EOS, `<｜User｜>`, `<｜Assistant｜>`, `<think>`,
  `</think>`, `｜DSML｜`, `<｜latest_reminder｜>`) must all be in the vocabulary; a tokenizer that
  lacks one is refused at load time with an error naming it.
* `tokenizer_config.json`, when present, must name the same BOS/EOS strings the encoder writes.
* `check_ids(ids, vocab_size)` refuses ids the *model* cannot embed: DeepSeek's tokenizer may
  hold a few more entries than the model's `vocab_size` (spec §13).

No torch here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mxserve.engine.prompt.templates import (
    ASSISTANT,
    BOS,
    DSML,
    EOS,
    LATEST_REMINDER,
    THINK_END,
    THINK_START,
    USER,
)

TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"


@dataclass(frozen=True)
class SpecialTokenIds:
    """Ids of the DeepSeek-V4 special tokens (from the tokenizer, never hard-coded)."""

    bos: int  # <｜begin▁of▁sentence｜>
    eos: int  # <｜end▁of▁sentence｜>
    user: int  # <｜User｜>
    assistant: int  # <｜Assistant｜>
    think_start: int  # <think>
    think_end: int  # </think>
    dsml: int  # ｜DSML｜
    latest_reminder: int  # <｜latest_reminder｜>


# field name -> token string, in the order errors list them
REQUIRED_SPECIAL_TOKENS: dict[str, str] = {
    "bos": BOS,
    "eos": EOS,
    "user": USER,
    "assistant": ASSISTANT,
    "think_start": THINK_START,
    "think_end": THINK_END,
    "dsml": DSML,
    "latest_reminder": LATEST_REMINDER,
}


class Tokenizer:
    """A loaded `tokenizers.Tokenizer` with the DeepSeek-V4 special tokens resolved."""

    def __init__(self, hf_tokenizer: Any, *, source: str = "<in-memory tokenizer>") -> None:
        self._tok = hf_tokenizer
        self.source = source  # where it came from, for error messages
        missing = [s for s in REQUIRED_SPECIAL_TOKENS.values() if hf_tokenizer.token_to_id(s) is None]
        if missing:
            raise ValueError(
                f"{source}: the tokenizer lacks the DeepSeek-V4 special token(s) "
                + ", ".join(repr(s) for s in missing)
                + " (check the ｜ U+FF5C and ▁ U+2581 characters; is this a DeepSeek-V4 tokenizer?)"
            )
        self.special_ids = SpecialTokenIds(
            **{name: hf_tokenizer.token_to_id(s) for name, s in REQUIRED_SPECIAL_TOKENS.items()}
        )
        # (token id, skip_special_tokens) → decode([id]): the incremental detokenizer decodes the
        # one token it emitted last as its "before" window every step (64 requests: 64 calls a step)
        self._single_token_text: dict[tuple[int, bool], str] = {}

    # ------------------------------------------------------------------ loading
    @classmethod
    def from_dir(cls, model_dir: str | Path) -> Tokenizer:
        """Load `<model_dir>/tokenizer.json`, checking `tokenizer_config.json` when present."""
        model_dir = Path(model_dir)
        path = model_dir / TOKENIZER_FILE
        if not path.is_file():
            raise FileNotFoundError(f"{model_dir}: no {TOKENIZER_FILE} (the DeepSeek-V4 tokenizer)")
        config = model_dir / TOKENIZER_CONFIG_FILE
        return cls.from_file(path, config if config.is_file() else None)

    @classmethod
    def from_file(
        cls, tokenizer_json: str | Path, tokenizer_config_json: str | Path | None = None
    ) -> Tokenizer:
        from tokenizers import Tokenizer as HFTokenizer

        tokenizer_json = Path(tokenizer_json)
        try:
            hf = HFTokenizer.from_file(str(tokenizer_json))
        except Exception as exc:  # tokenizers raises a bare Exception on a malformed file
            raise ValueError(f"{tokenizer_json}: cannot load tokenizer: {exc}") from exc
        tok = cls(hf, source=str(tokenizer_json))
        if tokenizer_config_json is not None:
            _check_config(Path(tokenizer_config_json))
        return tok

    # ------------------------------------------------------------------ use
    @property
    def vocab_size(self) -> int:
        """Entries in the tokenizer, added tokens included (may exceed the model's vocab_size)."""
        return int(self._tok.get_vocab_size(with_added_tokens=True))

    @property
    def bos_token_id(self) -> int:
        return self.special_ids.bos

    @property
    def eos_token_id(self) -> int:
        return self.special_ids.eos

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`; special-token strings in it become their ids; no BOS/EOS added."""
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = False) -> str:
        if len(ids) == 1:  # a pure function of (id, flag): memoised, the same string as the call
            key = (int(ids[0]), bool(skip_special_tokens))
            text = self._single_token_text.get(key)
            if text is None:
                text = self._single_token_text[key] = str(self._tok.decode([key[0]], skip_special_tokens=key[1]))
            return text
        return str(self._tok.decode(list(ids), skip_special_tokens=skip_special_tokens))

    def token_id(self, token: str) -> int:
        """The id of one token string; ValueError naming it when absent."""
        token_id = self._tok.token_to_id(token)
        if token_id is None:
            raise ValueError(f"{self.source}: token {token!r} is not in the vocabulary")
        return int(token_id)

    def id_to_token(self, token_id: int) -> str | None:
        return self._tok.id_to_token(int(token_id))

    def check_ids(self, ids: Iterable[int], vocab_size: int) -> None:
        """Raise ValueError if any id is negative or >= `vocab_size` (the model's embedding rows)."""
        check_ids(ids, vocab_size)


def check_ids(ids: Iterable[int], vocab_size: int) -> None:
    """Raise ValueError naming the first id outside `[0, vocab_size)` and its position."""
    for position, token_id in enumerate(ids):
        if not 0 <= int(token_id) < vocab_size:
            raise ValueError(
                f"token id {token_id} at position {position} is outside the model's vocabulary "
                f"[0, {vocab_size})"
            )


def _check_config(path: Path) -> None:
    """`tokenizer_config.json` must agree with the BOS/EOS strings the prompt encoder writes."""
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: cannot read tokenizer config: {exc}") from exc
    for key, expected in (("bos_token", BOS), ("eos_token", EOS)):
        value = config.get(key)
        if isinstance(value, dict):  # {"content": "...", "lstrip": ..., ...}
            value = value.get("content")
        if value is not None and value != expected:
            raise ValueError(
                f"{path}: {key} is {value!r}, but the DeepSeek-V4 prompt encoding uses {expected!r}"
            )
