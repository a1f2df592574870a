"""min_tokens (vLLM's): EOS and stop_token_ids cannot be picked before that many output tokens."""

from __future__ import annotations

import pytest
import torch

from mxserve import LLM, SamplingParams
from mxserve.engine.sampler import Sampler


def test_sampler_masks_banned_ids_for_the_choice_but_reports_raw_logprobs():
    logits = torch.tensor([[5.0, 1.0, 0.0], [5.0, 1.0, 0.0]])
    params = [SamplingParams(temperature=0, logprobs=0)] * 2
    out = Sampler().sample(logits, params, [0, 0], [3, 3], banned=[(0,), ()])
    assert out.token_ids.tolist() == [1, 0]
    raw = torch.log_softmax(logits, dim=-1)
    assert out.logprobs[0].item() == pytest.approx(raw[0, 1].item())  # the raw distribution, not the masked one


def test_min_tokens_is_validated():
    with pytest.raises(ValueError, match="min_tokens"):
        SamplingParams(max_tokens=4, min_tokens=5)
    with pytest.raises(ValueError, match="min_tokens"):
        SamplingParams(min_tokens=-1)


def test_min_tokens_holds_back_a_stop_token_until_enough_tokens(tiny_all):
    llm = LLM(str(tiny_all), max_model_len=256, progress=False)
    prompt = [0, 17, 42, 99, 7]
    free = llm.generate([prompt], SamplingParams(temperature=0, max_tokens=8, ignore_eos=True))[0].outputs[0]
    stop_id = free.token_ids[2]
    stopped = llm.generate([prompt], SamplingParams(temperature=0, max_tokens=8, ignore_eos=True,
                                                    stop_token_ids=[stop_id]))[0].outputs[0]
    assert list(stopped.token_ids)[-1] == stop_id and len(stopped.token_ids) <= 3
    held = llm.generate([prompt], SamplingParams(temperature=0, max_tokens=8, ignore_eos=True, min_tokens=5,
                                                 stop_token_ids=[stop_id]))[0].outputs[0]
    assert len(held.token_ids) >= 5
    assert stop_id not in held.token_ids[:5]
    assert list(held.token_ids[:2]) == list(free.token_ids[:2])
