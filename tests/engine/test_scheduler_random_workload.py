"""1000 random requests through a scarce cache: random lengths, arrivals, aborts, stop-string
finishes and preemptions. Every step conserves pages; at the end every pool is fully free and
every request that ran to its own end has exactly the tokens it would have had alone."""

from __future__ import annotations

import random

import pytest

from mxserve.engine.request import FinishReason, Request
from tests.engine.factories import (
    FakeRunner,
    assert_pages_conserved,
    make_request,
    make_scheduler,
    reference_generation,
)

MAX_MODEL_LEN = 160
BUDGET = 64
CAP = 32
MAX_NUM_SEQS = 16


@pytest.mark.parametrize("seed", [0, 1])
def test_no_page_leak_after_1000_random_requests(seed):
    rng = random.Random(seed)
    scheduler = make_scheduler(num_blocks=60, block_size=4, max_model_len=MAX_MODEL_LEN, max_num_batched_tokens=BUDGET,
                               long_prefill_token_threshold=CAP, max_num_seqs=MAX_NUM_SEQS)
    runner = FakeRunner(scheduler)
    pending = [
        make_request(
            f"r{i}", prompt=[rng.randrange(1000) for _ in range(rng.randint(1, 150))], max_tokens=rng.randint(1, 24),
            eos_token_ids=[rng.randrange(1000)],
        )
        for i in range(1000)
    ]
    all_requests = list(pending)
    pending.reverse()
    live: dict[str, Request] = {}
    cut_short: set[str] = set()  # aborted or finished by the (simulated) stop-string hook

    def end_one(reason: FinishReason) -> None:
        request_id = rng.choice(sorted(live))
        assert scheduler.finish_request(request_id, reason)
        cut_short.add(request_id)

    steps = 0
    while pending or scheduler.has_unfinished_requests():
        steps += 1
        for _ in range(rng.choice([0, 0, 0, 1, 1, 2])):
            if pending:
                request = pending.pop()
                scheduler.add_request(request)
                live[request.request_id] = request
        if live and rng.random() < 0.05:
            end_one(FinishReason.ABORT)

        output = scheduler.schedule()
        assert output.total_num_tokens <= BUDGET and all(c.num_tokens <= CAP for c in output.chunks)
        assert scheduler.num_running <= MAX_NUM_SEQS
        sampled = runner.step(output)
        if live and rng.random() < 0.05:  # ends while the runner computes its step
            end_one(rng.choice([FinishReason.ABORT, FinishReason.STOP]))
        for update in scheduler.update_from_output(output, sampled):
            if update.finish_reason is not None:
                del live[update.request_id]
        live = {i: r for i, r in live.items() if not r.is_finished}
        assert_pages_conserved(scheduler, live.values())

    assert scheduler.block_manager.is_all_free()
    stats = scheduler.stats()
    assert (stats.num_running, stats.num_waiting, stats.cache_usage) == (0, 0, 0.0)
    assert stats.num_preemptions > 50, stats  # the cache really was scarce
    assert len(cut_short) > 20
    assert_pages_conserved(scheduler, all_requests)  # finished requests hold nothing
    for request in all_requests:
        assert request.is_finished
        if request.request_id not in cut_short:
            assert request.output_token_ids == reference_generation(request, MAX_MODEL_LEN), request.request_id
