"""Stops (max_tokens, EOS, ignore_eos, stop token ids, max_model_len, the engine's hook) and bad input."""

from __future__ import annotations

import pytest

from mxserve.config.scheduler_config import SchedulerConfig
from mxserve.engine.block_manager import BlockManager
from mxserve.engine.request import FinishReason, RequestStatus
from mxserve.engine.scheduler import Scheduler
from mxserve.engine.scheduler_output import RequestUpdate, RunnerOutput
from tests.engine.factories import (
    FakeRunner,
    make_request,
    make_scheduler,
    reference_generation,
    run_to_completion,
    small_pools,
)


def _tokens_of(request_id: str, num_prompt_tokens: int, max_tokens: int) -> list[int]:
    return reference_generation(make_request(request_id, num_prompt_tokens, max_tokens=max_tokens), 1000)


def test_max_tokens_finishes_with_length():
    scheduler = make_scheduler()
    request = make_request("a", 5, max_tokens=7)
    scheduler.add_request(request)
    run_to_completion(scheduler)
    assert request.num_output_tokens == 7 and request.finish_reason is FinishReason.LENGTH


def test_eos_stops_unless_ignored_and_stop_token_ids_always_stop():
    expected = _tokens_of("a", 5, 10)
    eos = expected[3]
    assert eos not in expected[:3]
    stopped = make_request("a", 5, max_tokens=10, eos_token_ids=[eos])
    ignored = make_request("a", 5, max_tokens=10, eos_token_ids=[eos], ignore_eos=True)
    stop_id = make_request("a", 5, max_tokens=10, stop_token_ids=[eos], ignore_eos=True)
    for request in (stopped, ignored, stop_id):
        scheduler = make_scheduler()
        scheduler.add_request(request)
        run_to_completion(scheduler)
    assert stopped.output_token_ids == expected[:4] and stopped.status is RequestStatus.FINISHED_STOPPED
    assert ignored.output_token_ids == expected and ignored.finish_reason is FinishReason.LENGTH
    assert stop_id.output_token_ids == expected[:4] and stop_id.finish_reason is FinishReason.STOP


def test_max_model_len_finishes_with_length():
    scheduler = make_scheduler(max_model_len=12)
    request = make_request("a", 10, max_tokens=100)
    full_prompt = make_request("b", 12, max_tokens=100)
    scheduler.add_request(request)
    scheduler.add_request(full_prompt)
    run_to_completion(scheduler)
    assert request.num_tokens == 12 and request.finish_reason is FinishReason.LENGTH
    assert full_prompt.num_output_tokens == 1 and full_prompt.finish_reason is FinishReason.LENGTH


def test_updates_report_new_tokens_and_finish():
    scheduler = make_scheduler(long_prefill_token_threshold=4)
    runner = FakeRunner(scheduler)
    scheduler.add_request(make_request("a", 6, max_tokens=2))
    output = scheduler.schedule()
    assert scheduler.update_from_output(output, runner.step(output)) == []  # prefill not done yet
    expected = _tokens_of("a", 6, 2)
    output = scheduler.schedule()
    assert scheduler.update_from_output(output, runner.step(output)) == [RequestUpdate("a", (expected[0],), None)]
    output = scheduler.schedule()
    assert scheduler.update_from_output(output, runner.step(output)) == [
        RequestUpdate("a", (expected[1],), FinishReason.LENGTH)
    ]
    assert scheduler.schedule().finished_request_ids == {"a"}


def test_finish_request_is_the_stop_string_hook():
    scheduler = make_scheduler()
    runner = FakeRunner(scheduler)
    request = make_request("a", 5, max_tokens=50)
    scheduler.add_request(request)
    for _ in range(3):
        output = scheduler.schedule()
        scheduler.update_from_output(output, runner.step(output))
    assert scheduler.finish_request("a", FinishReason.STOP)
    assert request.status is RequestStatus.FINISHED_STOPPED and request.num_output_tokens == 3
    assert scheduler.block_manager.is_all_free()


def test_runner_output_that_does_not_match_the_step_is_refused_before_any_change():
    scheduler = make_scheduler(long_prefill_token_threshold=4)
    a, b = make_request("a", 3), make_request("b", 8)
    scheduler.add_request(a)
    scheduler.add_request(b)
    output = scheduler.schedule()  # a: whole prompt (samples), b: first 4 of 8 (does not)
    for bad, message in [
        ({}, "'a'.*sampled 0 tokens, expected 1"),
        ({"a": (1, 2)}, "'a'.*sampled 2 tokens, expected 1"),
        ({"a": (1,), "b": (2,)}, "'b'.*sampled 1 tokens, expected 0"),
        ({"a": (1,), "zzz": (2,)}, r"not scheduled this step: \['zzz'\]"),
    ]:
        with pytest.raises(ValueError, match=message):
            scheduler.update_from_output(output, RunnerOutput(bad))
        assert a.output_token_ids == [] and b.output_token_ids == []
    assert scheduler.update_from_output(output, RunnerOutput({"a": (7,)})) == [RequestUpdate("a", (7,), None)]
    with pytest.raises(ValueError, match="'a': stale scheduler output"):
        scheduler.update_from_output(output, RunnerOutput({"a": (7,)}))
    assert a.output_token_ids == [7]


def test_add_request_refuses_bad_requests():
    scheduler = make_scheduler(max_model_len=16)
    with pytest.raises(ValueError, match="empty prompt"):
        scheduler.add_request(make_request("a", prompt=[]))
    with pytest.raises(ValueError, match=r"17 tokens.*max_model_len=16"):
        scheduler.add_request(make_request("a", 17))
    scheduler.add_request(make_request("a", 4))
    with pytest.raises(ValueError, match="'a' is already live"):
        scheduler.add_request(make_request("a", 4))
    used = make_request("b", 4)
    used.output_token_ids.append(1)
    with pytest.raises(ValueError, match="not fresh"):
        scheduler.add_request(used)


def test_pools_too_small_for_max_model_len_are_refused():
    with pytest.raises(ValueError, match=r"max_model_len=200.*'window': 'needs 50 pages, has 40'"):
        Scheduler(SchedulerConfig(max_model_len=200), BlockManager(small_pools(num_blocks=40, block_size=4)))


def test_stats():
    scheduler = make_scheduler(num_blocks=64, max_num_seqs=1)
    scheduler.add_request(make_request("a", 16))
    scheduler.add_request(make_request("b", 4))
    scheduler.schedule()
    stats = scheduler.stats()
    assert (stats.num_running, stats.num_waiting, stats.num_preemptions) == (1, 1, 0)
    assert stats.cache_usage_by_pool["window"] == 4 / 64 and stats.cache_usage_by_pool["hca"] == 1 / 64
    assert stats.cache_usage == 4 / 64
