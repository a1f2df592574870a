"""The engine equals the reference model, request by request, under continuous batching."""

from __future__ import annotations

import functools
import logging

import pytest
import torch

from mxserve import LLM, SamplingParams
from mxserve.engine.cache_sizing import budget_for_tokens
from mxserve.engine.model_runner import _select_rows
from mxserve.model.checkpoint import CheckpointReader
from mxserve.model.deepseek_v4 import DeepseekV4Model
from mxserve.model.greedy import greedy_generate
from mxserve.testing import random_checkpoint

# tiny-all: window 32, CSA ratio 4 (top-8), HCA ratio 16 — lengths below cross all of them
PROMPT_LENGTHS = [3, 9, 31, 33, 47, 64, 90, 130]
NUM_NEW = 12


@functools.cache
def checkpoint_dir(tmp_root: str) -> str:
    random_checkpoint("tiny-all", tmp_root, seed=0, progress=False)
    return tmp_root


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> str:
    return checkpoint_dir(str(tmp_path_factory.mktemp("tiny-all")))


def prompts(vocab: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(5)
    return [[0, *torch.randint(2, vocab, (n - 1,), generator=gen).tolist()] for n in PROMPT_LENGTHS]


@pytest.mark.parametrize("numerics", ["exact", "faithful"])
def test_eight_concurrent_requests_equal_each_alone_through_the_reference(tiny_dir, numerics):
    reader = CheckpointReader(tiny_dir)
    reference = DeepseekV4Model(reader.config, reader.load(progress=False), numerics=numerics)
    batch = prompts(reader.config.vocab_size)
    expected = [greedy_generate(reference, p, NUM_NEW)[0][len(p):] for p in batch]

    # a small token budget forces chunked prefill interleaved with decodes
    llm = LLM(tiny_dir, numerics=numerics, max_model_len=256, max_num_batched_tokens=40,
              long_prefill_token_threshold=24, progress=False)
    outs = llm.generate(batch, SamplingParams(max_tokens=NUM_NEW, temperature=0, ignore_eos=True))
    for i, (out, want) in enumerate(zip(outs, expected, strict=True)):
        assert out.outputs[0].token_ids == want, f"request {i} (prompt {PROMPT_LENGTHS[i]} tokens) differs"
        assert out.outputs[0].finish_reason == "length"


def test_preemption_under_a_tight_cache_gives_identical_tokens(tiny_dir):
    # four 96-token prompts: two fit the tight cache at admission, but not their growth past
    # a page boundary (96 = 6 pages of 16), so the newer one is preempted and recomputed
    gen = torch.Generator().manual_seed(8)
    batch = [torch.randint(2, 512, (96,), generator=gen).tolist() for _ in range(4)]
    roomy = LLM(tiny_dir, max_model_len=160, progress=False)
    want = [o.outputs[0].token_ids for o in roomy.generate(batch, SamplingParams(max_tokens=8, temperature=0, ignore_eos=True))]
    # a budget barely above one max_model_len sequence: requests must preempt each other
    budget = budget_for_tokens(roomy.engine.model_config, roomy.engine.model.policy, tokens=170, block_size=16,
                               max_num_seqs=2)
    tight = LLM(tiny_dir, max_model_len=160, max_num_seqs=2, block_size=16, kv_cache_memory=budget, progress=False)
    got = [o.outputs[0].token_ids for o in tight.generate(batch, SamplingParams(max_tokens=8, temperature=0, ignore_eos=True))]
    assert got == want
    assert tight.engine.scheduler.stats().num_preemptions > 0


def test_seeded_sampling_does_not_depend_on_the_batch(tiny_dir):
    llm = LLM(tiny_dir, max_model_len=256, progress=False)
    params = SamplingParams(max_tokens=10, temperature=0.8, top_p=0.9, seed=1234, ignore_eos=True)
    alone = llm.generate([list(range(2, 40))], params)[0].outputs[0].token_ids
    crowd = llm.generate(
        [list(range(5, 25)), list(range(2, 40)), list(range(7, 70))],
        [SamplingParams(max_tokens=6, temperature=1.0, seed=9), params, SamplingParams(max_tokens=3)],
    )
    assert crowd[1].outputs[0].token_ids == alone


def test_logprobs_and_prompt_logprobs_are_reported(tiny_dir):
    llm = LLM(tiny_dir, max_model_len=256, max_num_batched_tokens=16, long_prefill_token_threshold=16, progress=False)
    prompt = list(range(2, 42))  # 40 tokens: prefilled in 3 chunks
    out = llm.generate([prompt], SamplingParams(max_tokens=4, temperature=0, logprobs=3, prompt_logprobs=2))[0]
    assert out.prompt_logprobs is not None and len(out.prompt_logprobs) == len(prompt)
    assert out.prompt_logprobs[0] is None
    assert [p.token_id for p in out.prompt_logprobs[1:]] == prompt[1:]
    sample = out.outputs[0]
    assert len(sample.logprobs) == 4 and all(len(lp.top) == 3 for lp in sample.logprobs)
    for lp, token in zip(sample.logprobs, sample.token_ids, strict=True):
        assert lp.token_id == token and lp.rank == 1  # greedy picks the top token


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"kernel_overrides": {"linear": "warp-speed"}}, "unknown backend"),
        ({"kernel_overrides": {"flux": "reference"}}, "unknown op"),
        ({"max_model_len": 0}, "max_model_len"),
        ({"numerics": "approximate"}, "numerics"),
        ({"bogus_option": 1}, "unknown option"),
    ],
)
def test_bad_engine_options_raise_value_error(tiny_dir, kwargs, message):
    with pytest.raises(ValueError, match=message):
        LLM(tiny_dir, progress=False, **kwargs)


def test_bad_requests_raise_and_leave_the_engine_serving(tiny_dir):
    llm = LLM(tiny_dir, max_model_len=64, progress=False)
    with pytest.raises(ValueError, match="empty"):
        llm.generate([[]], SamplingParams(max_tokens=2))
    with pytest.raises(ValueError, match="max_model_len"):
        llm.generate([list(range(2, 80))], SamplingParams(max_tokens=2))
    with pytest.raises(ValueError, match="vocabulary"):
        llm.generate([[1, 2, 99999]], SamplingParams(max_tokens=2))
    with pytest.raises(ValueError, match="tokenizer"):
        llm.generate("text needs a tokenizer", SamplingParams(max_tokens=2))
    ok = llm.generate([[0, 5, 6]], SamplingParams(max_tokens=3, temperature=0, ignore_eos=True))
    assert len(ok[0].outputs[0].token_ids) == 3
    assert not llm.engine.has_unfinished_requests() and llm.engine.scheduler.block_manager.is_all_free()


def test_missing_model_dir_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        LLM(str(tmp_path / "nope"), progress=False)


def test_non_finite_logits_are_flagged_when_the_step_samples(tiny_dir, caplog):
    """The finiteness flag is read back together with the sampled tokens (one host read per step):
    a NaN logit in a sampling step must still be reported."""
    llm = LLM(tiny_dir, numerics="exact", max_model_len=64, progress=False)
    model = llm.engine.runner.model
    forward = model.forward

    def poisoned(*args, **kwargs):
        logits = forward(*args, **kwargs)
        logits[:, 3] = float("nan")
        return logits

    model.forward = poisoned
    with caplog.at_level(logging.ERROR, logger="mxserve.engine"):
        llm.generate([[0, 5, 6]], SamplingParams(max_tokens=1, temperature=0, ignore_eos=True))
    assert "non-finite logits" in caplog.text
    caplog.clear()
    model.forward = forward
    with caplog.at_level(logging.ERROR, logger="mxserve.engine"):
        llm.generate([[0, 5, 6]], SamplingParams(max_tokens=1, temperature=0, ignore_eos=True))
    assert "non-finite logits" not in caplog.text


def test_select_rows_slices_consecutive_rows_and_gathers_others():
    logits = torch.arange(20.0).view(5, 4)
    assert torch.equal(_select_rows(logits, [1, 2, 3]), logits[1:4])
    assert torch.equal(_select_rows(logits, [4, 0]), logits[[4, 0]])
    assert _select_rows(logits, []).shape == (0, 4)
