"""Small factories for scheduler tests: pools, requests, and a fake model runner.

The fake runner stands in for the model and its caches. It keeps, per request, what a real KV
cache would hold (one entry per computed position), checks every chunk against the scheduler's
contract (contiguous positions, block tables that cover the chunk, no page shared by two
requests), and "samples" a token that is a deterministic function of the whole token prefix, so
a request recomputed after preemption must produce exactly the tokens it would have produced.
"""

from __future__ import annotations

from collections.abc import Iterable

from mxserve.config.scheduler_config import SchedulerConfig
from mxserve.engine.block_manager import BlockManager
from mxserve.engine.pool_spec import PoolSpec, deepseek_v4_pool_specs
from mxserve.engine.request import Request, StopCriteria
from mxserve.engine.scheduler import Scheduler
from mxserve.engine.scheduler_output import RunnerOutput, SchedulerOutput

VOCAB_SIZE = 1000
_HASH_MULTIPLIER = 1_000_003
_HASH_MODULUS = (1 << 61) - 1


def small_pools(num_blocks: int = 64, block_size: int = 4) -> tuple[PoolSpec, ...]:
    """DeepSeek-V4's seven pools with small compression rates so short tests cross windows."""
    return deepseek_v4_pool_specs(num_blocks=num_blocks, block_size=block_size, compress_rate_csa=4, compress_rate_hca=16)


def make_scheduler(
    *, num_blocks: int = 64, block_size: int = 4, max_model_len: int = 128, pools: Iterable[PoolSpec] | None = None,
    **config: int,
) -> Scheduler:
    specs = tuple(pools) if pools is not None else small_pools(num_blocks, block_size)
    return Scheduler(SchedulerConfig(max_model_len=max_model_len, **config), BlockManager(specs))


def make_request(
    request_id: str, num_prompt_tokens: int = 8, *, max_tokens: int = 4, prompt: Iterable[int] | None = None,
    eos_token_ids: Iterable[int] = (), stop_token_ids: Iterable[int] = (), ignore_eos: bool = False,
) -> Request:
    """A request whose prompt is `prompt`, or tokens derived from its id (distinct per request)."""
    if prompt is None:
        seed = sum(map(ord, request_id))
        prompt = [(seed * 31 + 7 * i) % VOCAB_SIZE for i in range(num_prompt_tokens)]
    stop = StopCriteria(max_tokens, frozenset(eos_token_ids), frozenset(stop_token_ids), ignore_eos)
    return Request(request_id, tuple(prompt), stop)


def _extend_hash(state: int, token_id: int) -> int:
    return (state * _HASH_MULTIPLIER + token_id + 1) % _HASH_MODULUS


def next_token_of(prefix_hash: int) -> int:
    """The fake model: the next token is a function of the whole prefix (through its hash)."""
    return (prefix_hash >> 17) % VOCAB_SIZE


def reference_generation(request: Request, max_model_len: int) -> list[int]:
    """What the fake model generates for the request run alone, start to finish, no chunking."""
    state = 0
    for token_id in request.prompt_token_ids:
        state = _extend_hash(state, token_id)
    outputs: list[int] = []
    stop = request.stop
    while True:
        token_id = next_token_of(state)
        outputs.append(token_id)
        if token_id in stop.stop_token_ids or (not stop.ignore_eos and token_id in stop.eos_token_ids):
            return outputs
        if len(outputs) >= stop.max_tokens or request.num_prompt_tokens + len(outputs) >= max_model_len:
            return outputs
        state = _extend_hash(state, token_id)


class FakeRunner:
    """A model runner without a model; see the module docstring."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.pool_specs = scheduler.block_manager.pool_specs
        self.prefix_hashes: dict[str, list[int]] = {}  # request id → hash of prefix [0, i] per position

    def step(self, output: SchedulerOutput) -> RunnerOutput:
        for request_id in output.finished_request_ids | output.preempted_request_ids:
            self.prefix_hashes.pop(request_id, None)
        assert output.total_num_tokens == sum(chunk.num_tokens for chunk in output.chunks)
        pages_seen: dict[str, set[int]] = {name: set() for name in self.pool_specs}
        sampled: dict[str, tuple[int, ...]] = {}
        for chunk in output.chunks:
            assert chunk.num_tokens == len(chunk.token_ids) >= 1
            if chunk.is_new:
                assert chunk.start_pos == 0, chunk
                self.prefix_hashes[chunk.request_id] = []
            hashes = self.prefix_hashes[chunk.request_id]
            assert chunk.start_pos == len(hashes), f"chunk {chunk} is not contiguous with {len(hashes)} cached"
            for name, spec in self.pool_specs.items():
                table = chunk.block_tables[name]
                assert len(table) >= spec.pages_needed(chunk.end_pos), (name, chunk)
                assert pages_seen[name].isdisjoint(table), f"pool {name}: page shared in one step"
                pages_seen[name].update(table)
            state = hashes[-1] if hashes else 0
            for token_id in chunk.token_ids:
                state = _extend_hash(state, token_id)
                hashes.append(state)
            if chunk.samples_next_token:
                sampled[chunk.request_id] = (next_token_of(state),)
        return RunnerOutput(sampled)


def assert_pages_conserved(scheduler: Scheduler, requests: Iterable[Request]) -> None:
    """Every page is either free or in exactly one of these requests' tables, and finished
    requests hold nothing. Pass every request that may hold pages."""
    manager = scheduler.block_manager
    held: dict[str, list[int]] = {name: [] for name in manager.pool_specs}
    for request in requests:
        tables = manager.block_tables(request)
        if request.is_finished:
            assert not any(tables.values()), f"finished {request.request_id} still holds pages {dict(tables)}"
            continue
        for name, table in tables.items():
            held[name].extend(table)
    for name, spec in manager.pool_specs.items():
        assert len(held[name]) == len(set(held[name])), f"pool {name}: a page is held twice"
        assert len(held[name]) + manager.num_free(name) == spec.num_blocks, f"pool {name}: pages leaked"


def schedule_step(scheduler: Scheduler, runner: FakeRunner):
    """One scheduled step through the fake runner; returns the SchedulerOutput."""
    output = scheduler.schedule()
    scheduler.update_from_output(output, runner.step(output))
    return output


def run_to_completion(scheduler: Scheduler, runner: FakeRunner | None = None, max_steps: int = 100_000) -> int:
    """Step until no request is left; returns the number of steps."""
    runner = runner or FakeRunner(scheduler)
    for step in range(max_steps):
        if not scheduler.has_unfinished_requests():
            return step
        output = scheduler.schedule()
        scheduler.update_from_output(output, runner.step(output))
    raise AssertionError(f"requests still unfinished after {max_steps} steps")
