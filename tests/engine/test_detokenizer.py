"""Incremental detokenizer: multi-byte characters split across tokens, special tokens, stop strings
across token boundaries."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mxserve.engine.detokenizer import IncrementalDetokenizer
from mxserve.engine.tokenizer import Tokenizer
from tests.engine.prompt.tiny_tokenizer import build_hf_tokenizer

TOK = Tokenizer(build_hf_tokenizer())
FFFD = "\ufffd"


def stream(text_or_ids, **kw):
    ids = TOK.encode(text_or_ids) if isinstance(text_or_ids, str) else list(text_or_ids)
    detok = IncrementalDetokenizer(TOK, **kw)
    deltas = []
    for i in ids:
        deltas.append(detok.add_token(i))
        if deltas[-1].stop is not None:
            break
    return detok, deltas, detok.finish()


@pytest.mark.parametrize("text", ["你好世界，今天天气很好。", "Emoji 😀🎉👍🏽!", "小柴胡冲剂 and 布洛芬 😀"])
def test_multibyte_characters_are_never_split(text):
    ids = TOK.encode(text)
    # the test is only meaningful if some token really ends inside a character
    assert any(FFFD in TOK.decode([i]) for i in ids)
    detok, deltas, last = stream(text)
    assert all(FFFD not in d.text for d in deltas)
    assert "".join(d.text for d in deltas) + last.text == text == detok.output_text


def test_held_back_until_the_character_completes():
    ids = TOK.encode("😀")
    assert len(ids) >= 2
    detok = IncrementalDetokenizer(TOK)
    assert [detok.add_token(i).text for i in ids[:-1]] == [""] * (len(ids) - 1)
    assert detok.add_token(ids[-1]).text == "😀"


def test_unfinished_character_at_the_end_is_released_by_finish():
    ids = TOK.encode("ok😀")[:-1]
    detok = IncrementalDetokenizer(TOK)
    assert "".join(detok.add_token(i).text for i in ids) == "ok"
    assert detok.finish().text.startswith(FFFD)


@settings(max_examples=60, deadline=None)
@given(
    st.text(alphabet=st.sampled_from(list("ab 你好世界天气😀🎉👍🏽,.!\n")), max_size=40), st.integers(1, 4)
)
def test_stream_equals_full_decode(text, chunk):
    ids = TOK.encode(text)
    detok = IncrementalDetokenizer(TOK)
    out = [detok.add_tokens(ids[i : i + chunk]).text for i in range(0, len(ids), chunk)]
    out.append(detok.finish().text)
    assert all(FFFD not in piece for piece in out[:-1])
    assert "".join(out) == TOK.decode(ids) == text


def test_special_tokens_skip_or_keep():
    s = TOK.special_ids
    ids = [*TOK.encode("Hi"), s.eos]
    _, deltas, last = stream(ids, skip_special_tokens=True)
    assert "".join(d.text for d in deltas) + last.text == "Hi"
    _, deltas, last = stream(ids, skip_special_tokens=False)
    assert "".join(d.text for d in deltas) + last.text == "Hi<｜end▁of▁sentence｜>"
    # <think>/</think> are plain added tokens: kept either way
    ids = [s.think_end, *TOK.encode("Hi")]
    _, deltas, _ = stream(ids, skip_special_tokens=True)
    assert "".join(d.text for d in deltas) == "</think>Hi"


def test_stop_string_across_token_boundaries():
    text = "The capital of France is Paris. Hello world"
    ids = TOK.encode(text)
    detok = IncrementalDetokenizer(TOK, stop=["Paris."])
    seen = []
    for i in ids:
        d = detok.add_token(i)
        seen.append(d.text)
        if d.stop is not None:
            break
    assert d.stop == "Paris."
    assert "".join(seen) == "The capital of France is " == detok.output_text
    assert detok.finished and detok.stopped == "Paris."
    # the stop string spans several tokens in this tokenizer
    assert len(TOK.encode("Paris.")) > 1
    with pytest.raises(RuntimeError):
        detok.add_token(ids[0])


def test_possible_stop_prefix_is_held_then_released():
    detok = IncrementalDetokenizer(TOK, stop=["Hello there"])
    out = [detok.add_token(i).text for i in TOK.encode("say Hello world")]
    # "Hello " was held while it could still become "Hello there", then released with "world"
    assert "".join(out) == "say Hello world"
    assert detok.finish().text == ""
    detok = IncrementalDetokenizer(TOK, stop=["Hello there"])
    out = [detok.add_token(i).text for i in TOK.encode("say Hello")]
    assert "".join(out) == "say "  # "Hello" still undecided
    assert detok.finish().text == "Hello"


def test_include_stop_string_and_earliest_match():
    ids = TOK.encode("abc world Hello")
    detok = IncrementalDetokenizer(TOK, stop=["Hello", "world"], include_stop_str_in_output=True)
    texts = []
    for i in ids:
        d = detok.add_token(i)
        texts.append(d.text)
        if d.stop:
            break
    assert d.stop == "world" and "".join(texts) == "abc world"


def test_stop_string_inside_multibyte_text():
    detok, deltas, _ = stream("你好世界，今天天气很好。", stop=["天气"])
    stops = [d.stop for d in deltas if d.stop]
    assert stops == ["天气"]
    assert detok.output_text == "你好世界，今天"


def test_stop_in_one_batch_call():
    detok = IncrementalDetokenizer(TOK, stop=["world"])
    d = detok.add_tokens(TOK.encode("Hello world, how are you"))
    assert (d.text, d.stop) == ("Hello ", "world")


def test_context_ids_are_not_emitted():
    ctx = TOK.encode("Hello")
    detok = IncrementalDetokenizer(TOK, context_ids=ctx)
    out = "".join(detok.add_token(i).text for i in TOK.encode(" world")) + detok.finish().text
    assert out == " world" and detok.num_generated_tokens == len(TOK.encode(" world"))


def test_bad_stop_strings():
    with pytest.raises(ValueError, match="non-empty strings"):
        IncrementalDetokenizer(TOK, stop=[""])
    assert IncrementalDetokenizer(TOK, stop="x")._stop == ("x",)
