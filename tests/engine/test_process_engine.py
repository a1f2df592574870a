"""`ProcessEngine`: the engine loop in its own process, with `AsyncEngine`'s contract.

One engine process over the packaged default model serves the tests that leave it running (a
spawn that imports torch and loads the model costs ~4 s on the 2-core machine); the tests that
end an engine (shutdown, kill, a failing step, a failed start) start their own. Each test runs
its own event loop (`asyncio.run`); the front binds to it on the first submit.
"""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import time

import pytest

from mxserve.config.engine_config import EngineConfig
from mxserve.engine.async_engine import AsyncEngine
from mxserve.engine.engine_client import EngineDeadError, EngineStartError, QueueFullError
from mxserve.engine.llm_engine import LLMEngine
from mxserve.engine.outputs import RequestOutput
from mxserve.engine.process_engine import ProcessEngine
from mxserve.engine.sampling_params import SamplingParams

PROMPTS = ["In the beginning", "And the LORD said unto Moses", "Blessed are the"]
LONG = SamplingParams(max_tokens=400, temperature=0, ignore_eos=True)


def _config(**overrides) -> EngineConfig:
    return EngineConfig(**{"device": "cpu", "max_model_len": 512, "max_num_seqs": 16, "kv_cache_memory": 128 << 20,
                           **overrides})


@pytest.fixture(scope="module")
def engine():
    engine = ProcessEngine(_config(), max_pending=8)
    yield engine
    asyncio.run(engine.shutdown(1.0))
    assert engine._process.exitcode == 0


async def _collect(engine, request_id: str, prompt: str, params: SamplingParams) -> list[RequestOutput]:
    return [o async for o in engine.generate(request_id, engine.check_prompt(prompt), params)]


async def _run_all(engine, params_of: dict[str, SamplingParams]) -> dict[str, list[RequestOutput]]:
    names = list(params_of)
    results = await asyncio.gather(*(_collect(engine, f"r{i}", PROMPTS[i % len(PROMPTS)], params_of[name])
                                     for i, name in enumerate(names)))
    return dict(zip(names, results, strict=True))


def _wait_idle(engine, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        stats = engine.stats
        if stats.num_pending == 0 and stats.num_running == 0 and stats.all_pages_free:
            return
        time.sleep(0.02)
    raise AssertionError(f"engine not idle after {timeout_s} s: {engine.stats}")


WORKLOAD = {
    "greedy": SamplingParams(max_tokens=12, temperature=0, logprobs=2),
    "seeded_n2": SamplingParams(max_tokens=10, temperature=1.0, seed=7, n=2, logprobs=0),
    "prompt_logprobs": SamplingParams(max_tokens=3, temperature=0, prompt_logprobs=1),
    "stop_string": SamplingParams(max_tokens=30, temperature=0, stop=[" the"]),
}


def test_same_outputs_as_the_threaded_engine(engine):
    threaded = AsyncEngine(LLMEngine(_config(), progress=False))
    try:
        want = asyncio.run(_run_all(threaded, WORKLOAD))
    finally:
        asyncio.run(threaded.shutdown(1.0))
    got = asyncio.run(_run_all(engine, WORKLOAD))
    for name in WORKLOAD:
        final_want, final_got = want[name][-1], got[name][-1]
        assert final_got.finished and [o.finished for o in got[name]].count(True) == 1, name
        assert final_got.outputs == final_want.outputs, name  # tokens, text, logprobs, finish/stop reasons
        assert final_got.prompt_logprobs == final_want.prompt_logprobs, name
        assert final_got.prompt_token_ids == final_want.prompt_token_ids
        assert len(final_got.metrics.token_times_s) == len(final_want.metrics.token_times_s)
        # snapshots are cumulative and independent: every earlier one is a prefix of the last
        for earlier in got[name][:-1]:
            for a, b in zip(earlier.outputs, final_got.outputs, strict=True):
                assert b.token_ids[: len(a.token_ids)] == a.token_ids and b.text.startswith(a.text), name
    assert got["stop_string"][-1].outputs[0].stop_reason == " the"


def test_abort_mid_stream_frees_pages(engine):
    async def run() -> RequestOutput:
        sink: asyncio.Queue[RequestOutput] = asyncio.Queue()
        engine.submit("abort-me", engine.check_prompt(PROMPTS[0]), LONG, sink)
        first = await sink.get()
        assert not first.finished and first.outputs[0].token_ids
        engine.abort("abort-me")
        engine.abort("abort-me")  # idempotent
        outputs = [first]
        while not outputs[-1].finished:
            outputs.append(await asyncio.wait_for(sink.get(), 30))
        await asyncio.sleep(0.2)
        assert sink.empty(), "exactly one finished output"
        return outputs[-1]

    final = asyncio.run(run())
    assert final.outputs[0].finish_reason == "abort"
    assert 0 < len(final.outputs[0].token_ids) < LONG.max_tokens
    _wait_idle(engine)


def test_closing_the_stream_aborts(engine):
    async def run() -> None:
        stream = engine.generate("leave-early", engine.check_prompt(PROMPTS[1]), LONG)
        await stream.__anext__()
        await stream.aclose()  # what a client disconnect does to the server's consumer

    asyncio.run(run())
    _wait_idle(engine)


def test_queue_full_and_bad_prompts(engine):
    async def run() -> None:
        sink: asyncio.Queue[RequestOutput] = asyncio.Queue()
        ids = engine.check_prompt(PROMPTS[0])
        for i in range(engine.max_pending):
            engine.submit(f"fill-{i}", ids, LONG, sink)
        with pytest.raises(QueueFullError):
            engine.submit("one-too-many", ids, LONG, sink)
        for i in range(engine.max_pending):
            engine.abort(f"fill-{i}")
        finished = 0
        while finished < engine.max_pending:
            finished += (await asyncio.wait_for(sink.get(), 30)).finished

    asyncio.run(run())
    _wait_idle(engine)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        engine.check_prompt([engine.info.model_config.vocab_size])
    assert engine.info.max_model_len == 512 and engine.info.tokenizer is not None


def test_shutdown_with_requests_in_flight():
    engine = ProcessEngine(_config())

    async def run() -> list[RequestOutput]:
        sinks = [asyncio.Queue() for _ in PROMPTS]
        for i, (prompt, sink) in enumerate(zip(PROMPTS, sinks, strict=True)):
            engine.submit(f"s{i}", engine.check_prompt(prompt), LONG, sink)
        await sinks[0].get()
        await engine.shutdown(grace_s=0.3)  # far too short for 400 tokens
        with pytest.raises(EngineDeadError):
            engine.submit("late", engine.check_prompt(PROMPTS[0]), LONG, asyncio.Queue())
        finals = []
        for sink in sinks:
            outputs = [sink.get_nowait() for _ in range(sink.qsize())]
            assert [o.finished for o in outputs].count(True) == 1
            finals.append(outputs[-1])
        return finals

    finals = asyncio.run(run())
    assert all(f.outputs[0].finish_reason == "abort" for f in finals)
    assert not engine.is_alive
    assert engine._process.exitcode == 0  # it exited by itself, not killed


def test_killed_engine_process_ends_streams_with_abort():
    engine = ProcessEngine(_config())

    async def run() -> RequestOutput:
        sink: asyncio.Queue[RequestOutput] = asyncio.Queue()
        engine.submit("victim", engine.check_prompt(PROMPTS[0]), LONG, sink)
        await sink.get()
        os.kill(engine.pid, signal.SIGKILL)
        output = await asyncio.wait_for(sink.get(), 30)
        while not output.finished:
            output = await asyncio.wait_for(sink.get(), 30)
        with pytest.raises(EngineDeadError, match="SIGKILL"):
            engine.submit("after", engine.check_prompt(PROMPTS[0]), LONG, sink)
        await engine.shutdown(1.0)  # still clean after a death
        return output

    final = asyncio.run(run())
    assert final.outputs[0].finish_reason == "abort"
    assert not engine.is_alive and engine.stats.num_pending == 0


def _fail_on_step(engine: LLMEngine, *, step: int) -> None:
    """engine_setup hook: the forward raises on its `step`-th call."""
    execute, calls = engine.runner.execute, [0]

    def failing(*args, **kwargs):
        calls[0] += 1
        if calls[0] == step:
            raise RuntimeError("injected step failure")
        return execute(*args, **kwargs)

    engine.runner.execute = failing


def test_a_step_that_raises_ends_streams_and_names_the_cause():
    engine = ProcessEngine(_config(), engine_setup=functools.partial(_fail_on_step, step=4))

    async def run() -> RequestOutput:
        outputs = await _collect(engine, "doomed", PROMPTS[0], LONG)
        assert [o.finished for o in outputs].count(True) == 1
        with pytest.raises(EngineDeadError, match="injected step failure"):
            engine.submit("after", engine.check_prompt(PROMPTS[0]), LONG, asyncio.Queue())
        await engine.shutdown(1.0)
        return outputs[-1]

    final = asyncio.run(run())
    # steps 1-3 (the prefill's token, then two decodes) delivered their tokens before step 4 raised
    assert final.outputs[0].finish_reason == "abort" and len(final.outputs[0].token_ids) == 3
    assert not engine.is_alive


def _die_while_loading(engine: LLMEngine) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def test_start_up_failures_name_their_cause(tmp_path):
    with pytest.raises(EngineStartError, match="does not exist") as bad_checkpoint:
        ProcessEngine(_config(model=str(tmp_path / "missing")))
    assert bad_checkpoint.value.bad_input
    with pytest.raises(EngineStartError, match="killed by SIGKILL") as killed:
        ProcessEngine(_config(), engine_setup=_die_while_loading)
    assert not killed.value.bad_input


class _CountingEngine:
    """Stands in for `LLMEngine` in the engine loop: records how many requests each step saw."""

    def __init__(self) -> None:
        self.waiting: list[str] = []
        self.steps: list[int] = []

    def has_unfinished_requests(self) -> bool:
        return bool(self.waiting)

    def add_request(self, request_id, prompt_token_ids, params) -> None:
        self.waiting.append(request_id)

    def step(self) -> list:
        self.steps.append(len(self.waiting))
        self.waiting.clear()  # every request finishes in one step
        return []

    def unfinished_request_ids(self) -> list[str]:
        return list(self.waiting)

    def abort_request(self, request_id) -> bool:
        return False

    def stats(self) -> None:
        return None


class _Outbox:
    def send(self, message) -> None:
        pass


def _steps_for_a_burst(**window) -> list[int]:
    """Four requests sent 20 ms apart to an idle loop, then a shutdown: the requests each step saw."""
    import queue
    import threading

    from mxserve.engine.core_messages import AddRequest, ShutdownCore
    from mxserve.engine.engine_core import _EngineLoop

    engine = _CountingEngine()
    inbox: queue.SimpleQueue = queue.SimpleQueue()

    def send() -> None:
        for i in range(4):
            inbox.put(AddRequest(f"r{i}", [0, 7], SamplingParams(max_tokens=1)))
            time.sleep(0.02)
        time.sleep(0.2)
        inbox.put(ShutdownCore())

    sender = threading.Thread(target=send)
    sender.start()
    _EngineLoop(engine, _Outbox(), **window).run(inbox)
    sender.join()
    return engine.steps


def test_an_idle_engine_prefills_a_burst_together():
    """Requests that reach an idle engine process within the gather window share its first step (H200:
    without it 8 simultaneous clients waited for two prefill steps, TTFT 135 instead of ~70 ms)."""
    assert _steps_for_a_burst(burst_gap_s=0.1, burst_cap_s=1.0) == [4]
    assert _steps_for_a_burst(burst_gap_s=0.0, burst_cap_s=0.0)[0] == 1  # no window: the first goes alone
