"""Tokenizer wrapper over a tiny byte-level BPE built in the test (no downloads)."""

from __future__ import annotations

import pytest
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import models

from mxserve.engine.prompt import encode_messages
from mxserve.engine.tokenizer import REQUIRED_SPECIAL_TOKENS, Tokenizer, check_ids
from tests.engine.prompt.tiny_tokenizer import build_hf_tokenizer, write_tokenizer_dir


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return Tokenizer(build_hf_tokenizer())


def test_special_ids_are_looked_up_by_string(tok):
    hf = build_hf_tokenizer()
    ids = tok.special_ids
    for name, token in REQUIRED_SPECIAL_TOKENS.items():
        assert getattr(ids, name) == hf.token_to_id(token)
    assert tok.bos_token_id == ids.bos and tok.eos_token_id == ids.eos
    assert tok.token_id("<think>") == ids.think_start


def test_prompt_encodes_with_exactly_one_bos(tok):
    prompt = encode_messages(
        [{"role": "user", "content": "Hello world"}], thinking=True, reasoning_effort=None, generation="0731"
    )
    ids = tok.encode(prompt)
    assert ids[0] == tok.special_ids.bos
    assert ids.count(tok.special_ids.bos) == 1
    assert ids[-2:] == [tok.special_ids.assistant, tok.special_ids.think_start]
    assert tok.special_ids.user in ids
    assert tok.decode(ids) == prompt


def test_round_trip_multibyte(tok):
    text = "你好世界 😀 👍🏽 ok"
    assert tok.decode(tok.encode(text)) == text


def test_missing_special_token_is_named():
    bare = HFTokenizer(models.BPE())
    bare.add_special_tokens(["<｜begin▁of▁sentence｜>"])
    with pytest.raises(ValueError, match=r"lacks the DeepSeek-V4 special token\(s\) '<｜end▁of▁sentence｜>'"):
        Tokenizer(bare)


def test_ascii_lookalike_is_not_accepted():
    bare = HFTokenizer(models.BPE())
    bare.add_special_tokens(["<|begin_of_sentence|>"])
    with pytest.raises(ValueError, match="U\\+FF5C"):
        Tokenizer(bare)


def test_unknown_token_lookup(tok):
    with pytest.raises(ValueError, match="'<nope>' is not in the vocabulary"):
        tok.token_id("<nope>")


def test_check_ids(tok):
    check_ids([0, 5, 9], 10)
    tok.check_ids([], 10)
    with pytest.raises(
        ValueError, match=r"token id 10 at position 2 is outside the model's vocabulary \[0, 10\)"
    ):
        tok.check_ids([0, 1, 10], 10)
    with pytest.raises(ValueError, match="token id -1 at position 0"):
        check_ids([-1], 10)
    # a tokenizer larger than the model: its top ids are refused
    with pytest.raises(ValueError):
        check_ids([tok.vocab_size - 1], tok.vocab_size - 3)


def test_from_dir(tmp_path):
    loaded = Tokenizer.from_dir(write_tokenizer_dir(tmp_path / "ok"))
    assert loaded.special_ids == Tokenizer(build_hf_tokenizer()).special_ids


def test_from_dir_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"no tokenizer\.json"):
        Tokenizer.from_dir(tmp_path)
    with pytest.raises(ValueError, match="eos_token is '</s>'"):
        Tokenizer.from_dir(write_tokenizer_dir(tmp_path / "bad_eos", eos="</s>"))
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "tokenizer.json").write_text("{not json")
    with pytest.raises(ValueError, match="cannot load tokenizer"):
        Tokenizer.from_dir(broken)
    cfg = write_tokenizer_dir(tmp_path / "bad_cfg")
    (cfg / "tokenizer_config.json").write_text("{")
    with pytest.raises(ValueError, match="cannot read tokenizer config"):
        Tokenizer.from_dir(cfg)
