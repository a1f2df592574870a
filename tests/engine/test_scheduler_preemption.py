"""Preemption by recompute (identical final tokens) and abort at any time (frees every page)."""

from __future__ import annotations

import random

from mxserve.engine.request import RequestStatus
from tests.engine.factories import (
    FakeRunner,
    assert_pages_conserved,
    make_request,
    make_scheduler,
    reference_generation,
    run_to_completion,
    schedule_step,
)


def _workload(seed: int = 0):
    rng = random.Random(seed)
    return [
        make_request(f"r{i}", prompt=[rng.randrange(1000) for _ in range(rng.randint(5, 60))], max_tokens=30)
        for i in range(12)
    ]


def _generate(num_blocks: int) -> tuple[dict[str, list[int]], int]:
    scheduler = make_scheduler(num_blocks=num_blocks, max_model_len=128, max_num_batched_tokens=64,
                               long_prefill_token_threshold=32)
    requests = _workload()
    for request in requests:
        scheduler.add_request(request)
    run_to_completion(scheduler)
    assert scheduler.block_manager.is_all_free()
    return {r.request_id: r.output_token_ids for r in requests}, scheduler.stats().num_preemptions


def test_preemption_and_resume_give_identical_final_tokens():
    plenty, plenty_preemptions = _generate(num_blocks=512)
    scarce, scarce_preemptions = _generate(num_blocks=34)  # one 128-token sequence needs 32 pages
    assert plenty_preemptions == 0 and scarce_preemptions > 0
    assert scarce == plenty
    assert plenty == {r.request_id: reference_generation(r, 128) for r in _workload()}


def test_the_most_recently_admitted_request_is_evicted_and_resumes_first():
    # 6 pages of 4 positions; a, b, c (4-token prompts) fill them by position 8, where each needs a
    # third page; a and b finish right after. d arrived after c and waits (max_num_seqs).
    scheduler = make_scheduler(num_blocks=6, max_model_len=24, max_num_seqs=3)
    runner = FakeRunner(scheduler)
    requests = {name: make_request(name, 4, max_tokens=6 if name in "ab" else 10) for name in "abcd"}
    for request in requests.values():
        scheduler.add_request(request)
    c = requests["c"]
    while not (output := schedule_step(scheduler, runner)).preempted_request_ids:
        pass
    assert output.preempted_request_ids == {"c"} and set(output.num_scheduled_tokens) == {"a", "b"}
    assert c.status is RequestStatus.PREEMPTED and c.num_computed_tokens == 0 and c.num_preemptions == 1
    assert scheduler.block_manager.num_positions(c) == 0
    tokens_at_preemption = tuple(c.all_token_ids)

    admissions = []
    while scheduler.has_unfinished_requests():
        admissions += [chunk for chunk in schedule_step(scheduler, runner).chunks if chunk.is_new]
    resumed = admissions[0]
    assert (resumed.request_id, resumed.is_resumed, resumed.start_pos) == ("c", True, 0)
    # The resumed chunk recomputes prompt + outputs from position 0, then samples the next token.
    assert resumed.token_ids == tokens_at_preemption and resumed.samples_next_token
    assert admissions[1].request_id == "d" and not admissions[1].is_resumed
    assert all(r.output_token_ids == reference_generation(r, 24) for r in requests.values())
    assert scheduler.block_manager.is_all_free()


def test_abort_a_waiting_request():
    scheduler = make_scheduler(max_num_seqs=1)
    runner = FakeRunner(scheduler)
    a, b = make_request("a", 4, max_tokens=3), make_request("b", 4)
    scheduler.add_request(a)
    scheduler.add_request(b)
    schedule_step(scheduler, runner)
    assert scheduler.abort_request("b")
    assert b.status is RequestStatus.FINISHED_ABORTED and b.finish_reason == "abort"
    output = schedule_step(scheduler, runner)
    assert output.finished_request_ids == {"b"} and "b" not in output.num_scheduled_tokens
    run_to_completion(scheduler, runner)
    assert b.output_token_ids == [] and scheduler.block_manager.is_all_free()


def test_abort_mid_prefill_frees_every_pool():
    scheduler = make_scheduler(long_prefill_token_threshold=8)
    runner = FakeRunner(scheduler)
    request = make_request("a", 40)
    scheduler.add_request(request)
    schedule_step(scheduler, runner)
    assert request.num_computed_tokens == 8 and not scheduler.block_manager.is_all_free()
    assert scheduler.abort_request("a")
    assert scheduler.block_manager.is_all_free() and not scheduler.has_unfinished_requests()
    assert scheduler.schedule().finished_request_ids == {"a"}


def test_abort_while_decoding_and_between_schedule_and_update():
    scheduler = make_scheduler()
    runner = FakeRunner(scheduler)
    a, b = make_request("a", 6, max_tokens=20), make_request("b", 6, max_tokens=20)
    scheduler.add_request(a)
    scheduler.add_request(b)
    for _ in range(5):
        schedule_step(scheduler, runner)
    assert scheduler.abort_request("a")
    assert_pages_conserved(scheduler, [a, b])

    output = scheduler.schedule()
    assert set(output.num_scheduled_tokens) == {"b"}
    scheduler.abort_request("b")  # the runner is computing b's step right now
    assert scheduler.update_from_output(output, runner.step(output)) == []
    assert len(b.output_token_ids) == 5 and scheduler.block_manager.is_all_free()


def test_abort_a_preempted_request_and_unknown_ids():
    scheduler = make_scheduler(num_blocks=6, max_model_len=24, max_num_seqs=3)
    runner = FakeRunner(scheduler)
    requests = [make_request(name, 4, max_tokens=10) for name in "abc"]
    for request in requests:
        scheduler.add_request(request)
    while not schedule_step(scheduler, runner).preempted_request_ids:
        pass
    assert requests[2].status is RequestStatus.PREEMPTED
    assert scheduler.abort_request("c")
    assert not scheduler.abort_request("c") and not scheduler.abort_request("never-added")
    run_to_completion(scheduler, runner)
    assert scheduler.block_manager.is_all_free()
    assert_pages_conserved(scheduler, requests)
