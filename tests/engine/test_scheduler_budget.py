"""Token-budget scheduling: decodes and prefill chunks share a step; long-prefill cap; max_num_seqs; FIFO."""

from __future__ import annotations

from mxserve.engine.pool_spec import deepseek_v4_pool_specs
from tests.engine.factories import (
    FakeRunner,
    make_request,
    make_scheduler,
    reference_generation,
    run_to_completion,
    schedule_step,
)


def test_budget_is_shared_by_decodes_and_a_capped_prefill_chunk():
    scheduler = make_scheduler(max_num_batched_tokens=16, long_prefill_token_threshold=8)
    runner = FakeRunner(scheduler)
    for name in "abc":
        scheduler.add_request(make_request(name, 2, max_tokens=50))
    first = schedule_step(scheduler, runner)
    assert first.num_scheduled_tokens == {"a": 2, "b": 2, "c": 2}
    assert all(chunk.is_new and chunk.samples_next_token for chunk in first.chunks)

    scheduler.add_request(make_request("long", 40))
    for step in range(3):
        output = schedule_step(scheduler, runner)
        assert output.num_scheduled_tokens == {"a": 1, "b": 1, "c": 1, "long": 8}
        assert output.total_num_tokens == 11
        long_chunk = output.chunk_of("long")
        assert long_chunk.start_pos == 8 * step and long_chunk.is_new == (step == 0)
        assert not long_chunk.samples_next_token
        assert all(output.chunk_of(name).samples_next_token for name in "abc")


def test_without_a_cap_the_prefill_takes_the_rest_of_the_budget():
    scheduler = make_scheduler(max_num_batched_tokens=16, long_prefill_token_threshold=16)
    runner = FakeRunner(scheduler)
    for name in "abc":
        scheduler.add_request(make_request(name, 2, max_tokens=50))
    schedule_step(scheduler, runner)
    scheduler.add_request(make_request("long", 40))
    assert schedule_step(scheduler, runner).num_scheduled_tokens == {"a": 1, "b": 1, "c": 1, "long": 13}


def test_waiting_prompts_are_chunked_into_the_remaining_budget():
    scheduler = make_scheduler(max_num_batched_tokens=16, long_prefill_token_threshold=16)
    runner = FakeRunner(scheduler)
    for name in "abc":
        scheduler.add_request(make_request(name, 10, max_tokens=5))
    first = schedule_step(scheduler, runner)
    assert first.num_scheduled_tokens == {"a": 10, "b": 6}
    assert first.chunk_of("a").samples_next_token and not first.chunk_of("b").samples_next_token
    assert schedule_step(scheduler, runner).num_scheduled_tokens == {"a": 1, "b": 4, "c": 10}


def _long_and_short(cap: int) -> tuple[int, int, int]:
    """A 52K prompt, then a 20-token one: (step the short one is first scheduled, step it finishes,
    positions of the long prompt computed by then)."""
    pools = deepseek_v4_pool_specs(num_blocks=1000, block_size=64, compress_rate_csa=4, compress_rate_hca=128)
    scheduler = make_scheduler(pools=pools, max_model_len=60_000, long_prefill_token_threshold=cap)
    runner = FakeRunner(scheduler)
    long_request, short_request = make_request("long", 52_000, max_tokens=2), make_request("short", 20, max_tokens=3)
    scheduler.add_request(long_request)
    scheduler.add_request(short_request)
    first_scheduled = None
    for step in range(1, 200):
        output = schedule_step(scheduler, runner)
        assert output.total_num_tokens <= 2048
        assert all(chunk.num_tokens <= cap for chunk in output.chunks)
        if first_scheduled is None and "short" in output.num_scheduled_tokens:
            first_scheduled = step
        if short_request.is_finished:
            assert short_request.output_token_ids == reference_generation(short_request, 60_000)
            return first_scheduled, step, long_request.num_computed_tokens
    raise AssertionError("the short request never finished")


def test_long_prefill_cap_keeps_a_52k_prompt_from_starving_a_short_one():
    first_scheduled, finished, long_done = _long_and_short(cap=1024)
    assert (first_scheduled, finished) == (1, 3)
    assert long_done == 3 * 1024  # the long prompt kept going at the cap meanwhile


def test_without_the_cap_the_short_request_waits_for_the_whole_long_prefill():
    first_scheduled, _, _ = _long_and_short(cap=2048)
    assert first_scheduled == 26  # 25 full 2048-token steps of the long prompt first


def test_max_num_seqs_bounds_the_running_set():
    scheduler = make_scheduler(max_num_seqs=2)
    runner = FakeRunner(scheduler)
    requests = [make_request(f"r{i}", 4, max_tokens=3) for i in range(5)]
    for request in requests:
        scheduler.add_request(request)
    assert schedule_step(scheduler, runner).num_scheduled_tokens == {"r0": 4, "r1": 4}
    while scheduler.has_unfinished_requests():
        output = schedule_step(scheduler, runner)
        assert len(output.chunks) <= 2 and scheduler.num_running <= 2
    assert all(r.output_token_ids == reference_generation(r, 128) for r in requests)


def test_admission_is_fifo_and_never_skips_a_request_that_does_not_fit():
    # 8 pages of 4 positions: "a" (20-token prompt) holds 5-6 pages, so "b" (16 tokens, 4 pages)
    # waits; "c" (2 tokens) would fit but must not overtake "b".
    scheduler = make_scheduler(num_blocks=8, max_model_len=32)
    runner = FakeRunner(scheduler)
    for name, length in [("a", 20), ("b", 16), ("c", 2)]:
        scheduler.add_request(make_request(name, length, max_tokens=5))
    first_step: dict[str, int] = {}
    step = 0
    while scheduler.has_unfinished_requests():
        step += 1
        for chunk in schedule_step(scheduler, runner).chunks:
            first_step.setdefault(chunk.request_id, step)
    assert first_step["a"] == 1 and first_step["a"] < first_step["b"] <= first_step["c"]


def test_arrival_order_is_admission_order():
    scheduler = make_scheduler(max_num_batched_tokens=8, long_prefill_token_threshold=4)
    requests = [make_request(f"r{i}", 3 + (7 * i) % 11, max_tokens=4) for i in range(12)]
    for request in requests:
        scheduler.add_request(request)
    admitted: list[str] = []
    runner = FakeRunner(scheduler)
    while scheduler.has_unfinished_requests():
        admitted += [chunk.request_id for chunk in schedule_step(scheduler, runner).chunks if chunk.is_new]
    assert admitted == [r.request_id for r in requests]
    assert [r.arrival_index for r in requests] == list(range(12))
    assert run_to_completion(scheduler) == 0
