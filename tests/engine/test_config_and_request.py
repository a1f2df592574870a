"""SchedulerConfig validation and Request / StopCriteria bookkeeping."""

from __future__ import annotations

import dataclasses

import pytest

from mxserve.config.scheduler_config import SchedulerConfig
from mxserve.engine.request import FinishReason, Request, RequestStatus, StopCriteria


def test_scheduler_config_defaults():
    config = SchedulerConfig(max_model_len=4096)
    assert (config.max_num_batched_tokens, config.long_prefill_token_threshold) == (2048, 1024)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.max_num_seqs = 1  # type: ignore[misc]


@pytest.mark.parametrize("field_name", ["max_model_len", "max_num_batched_tokens", "long_prefill_token_threshold", "max_num_seqs"])
@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "8"])
def test_scheduler_config_names_the_bad_value(field_name, bad):
    values = {"max_model_len": 64, field_name: bad}
    with pytest.raises(ValueError, match=f"SchedulerConfig.{field_name}.*{bad!r}"):
        SchedulerConfig(**values)


@pytest.mark.parametrize("bad", [0, -2, 1.0, False])
def test_stop_criteria_rejects_bad_max_tokens(bad):
    with pytest.raises(ValueError, match=f"max_tokens.*{bad!r}"):
        StopCriteria(max_tokens=bad)


def test_request_token_accounting():
    request = Request("r", [10, 11, 12], StopCriteria(5, eos_token_ids=[2]))
    assert request.prompt_token_ids == (10, 11, 12) and request.stop.eos_token_ids == frozenset({2})
    request.output_token_ids += [20, 21]
    request.num_computed_tokens = 4
    assert (request.num_tokens, request.num_output_tokens, request.num_uncomputed_tokens) == (5, 2, 1)
    assert request.all_token_ids == [10, 11, 12, 20, 21]
    for start in range(6):
        for end in range(start, 6):
            assert request.token_ids_between(start, end) == tuple(request.all_token_ids[start:end])
    with pytest.raises(ValueError, match=r"\[4, 6\)"):
        request.token_ids_between(4, 6)


def test_status_and_finish_reason():
    request = Request("r", [1], StopCriteria(1))
    assert request.status is RequestStatus.WAITING and not request.is_finished and request.finish_reason is None
    request.status = RequestStatus.FINISHED_LENGTH
    assert request.is_finished and request.finish_reason is FinishReason.LENGTH and request.finish_reason == "length"
