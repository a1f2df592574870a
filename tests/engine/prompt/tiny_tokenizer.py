"""A tiny DeepSeek-V4-shaped tokenizer built in-process for tests (no downloads).

Byte-level BPE trained on a few sentences (English, CJK, emoji) with the DeepSeek-V4 special
tokens as added tokens. The vocabulary is small, so CJK characters and emoji are usually split
across several tokens -- what the detokenizer tests need.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

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

# special=True: skipped by decode(skip_special_tokens=True). The think tags and DSML marker are
# plain added tokens, as reasoning/tool parsing needs them in the text.
SPECIAL = [BOS, EOS, USER, ASSISTANT, LATEST_REMINDER]
NON_SPECIAL_ADDED = [THINK_START, THINK_END, DSML]

CORPUS = [
    "Hello world, how are you today?",
    "The weather in Beijing is sunny with a temperature of 22 degrees.",
    "What is the capital of France? The capital of France is Paris.",
    "你好世界，今天天气很好。",
    "小柴胡冲剂和布洛芬能一起吃吗？",
    "Emoji test: 😀 🎉 👍🏽 done.",
    'def f(x): return {"location": "Beijing", "unit": "celsius"}',
] * 3


@lru_cache(maxsize=1)
def _json() -> str:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS, trainer=trainer)
    tok.add_special_tokens([AddedToken(t, special=True) for t in SPECIAL])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in NON_SPECIAL_ADDED])
    return tok.to_str()


def build_hf_tokenizer() -> Tokenizer:
    return Tokenizer.from_str(_json())


def write_tokenizer_dir(path: Path, *, bos: str = BOS, eos: str = EOS) -> Path:
    """Write tokenizer.json and tokenizer_config.json into `path`; return `path`."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "tokenizer.json").write_text(_json(), encoding="utf-8")
    config = {"bos_token": {"content": bos, "lstrip": False}, "eos_token": eos, "add_bos_token": True}
    (path / "tokenizer_config.json").write_text(json.dumps(config, ensure_ascii=False), encoding="utf-8")
    return path
