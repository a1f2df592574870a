"""The decode step's host fast paths equal the per-row paths they replaced (benchmarks/host_step.py).

* `build_decode_batch` (numpy, whole columns) == a per-row reference fill, with padding rows,
  short/absent tables, every error it names, self-managed and engine-owned tables.
* `BlockManager.allocate`'s covered-by-the-pages shortcut == the per-pool sums (same tables, same
  views, same answers) over a random workload; `PoolSpec.max_positions` is pages_needed's inverse.
* The runner installs a request's tables only when the block manager's view changed, and the
  engine's tokens are those of a fresh install every step.
"""

from __future__ import annotations

import itertools
import random

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from mxserve.default_model import default_model_path
from mxserve.engine.block_manager import BlockManager
from mxserve.engine.pool_spec import PoolSpec
from mxserve.model.checkpoint import CheckpointReader
from mxserve.model.decode_batch import DecodeBatch, DecodeGeometry, build_decode_batch
from mxserve.model.kv_state import CacheCapacityError, ModelCacheState, Pool, units_for
from mxserve.model.numerics import NumericPolicy
from tests.engine.factories import make_request, small_pools

CONFIG = CheckpointReader(default_model_path()).config  # config.json only (CSA ratio 4, HCA 128)
EXACT = NumericPolicy.for_mode("exact")
BLOCK = 4
GEOMETRY = DecodeGeometry.for_positions(CONFIG, BLOCK, 300)


def reference_fill(token_ids, seq_ids, positions, state, geometry, num_rows) -> DecodeBatch:
    """The per-row fill the fast path replaced: every row, every pool, one element at a time."""
    batch = DecodeBatch.empty(num_rows, geometry)
    for row, (tok, seq, pos) in enumerate(zip(token_ids, seq_ids, positions, strict=True)):
        batch.token_ids[row] = tok
        batch.positions[row] = pos
        for pool in Pool:
            for col, page in enumerate(state.block_tables[pool].get(seq, [])):
                batch.block_tables[pool][row, col] = page
    return batch


def engine_state(num_seqs: int, rng: random.Random, *, slack: int = 0) -> tuple[ModelCacheState, list, list]:
    """Engine-owned tables covering each sequence's position (plus `slack` spare pages per pool)."""
    state = ModelCacheState(CONFIG, EXACT, num_blocks=512, block_size=BLOCK, manage_tables=False)
    seqs = [f"r{i}" for i in range(num_seqs)]
    positions = [rng.randrange(0, 300) for _ in seqs]
    for seq, pos in zip(seqs, positions, strict=True):
        tables = {}
        for pool in Pool:
            count = min(-(-units_for(CONFIG, pool, pos + 1) // BLOCK) + slack, GEOMETRY.max_blocks[pool])
            tables[pool.value] = rng.sample(range(512), count)
        state.set_block_tables(seq, tables)
    return state, seqs, positions


def assert_same_batch(got: DecodeBatch, want: DecodeBatch) -> None:
    assert torch.equal(got.token_ids, want.token_ids), (got.token_ids, want.token_ids)
    assert torch.equal(got.positions, want.positions)
    for pool in Pool:
        bad = (got.block_tables[pool] != want.block_tables[pool]).nonzero()
        assert bad.numel() == 0, f"{pool.value}: first mismatch at {bad[0].tolist()}"


@pytest.mark.parametrize("num_seqs,num_rows", [(0, 1), (1, 1), (3, 4), (13, 16), (64, 64)])
@pytest.mark.parametrize("slack", [0, 1])
def test_build_decode_batch_equals_the_per_row_fill(num_seqs, num_rows, slack):
    rng = random.Random(num_seqs * 10 + slack)
    state, seqs, positions = engine_state(num_seqs, rng, slack=slack)
    tokens = [rng.randrange(CONFIG.vocab_size) for _ in seqs]
    want = reference_fill(tokens, seqs, positions, state, GEOMETRY, num_rows)
    assert_same_batch(build_decode_batch(tokens, seqs, positions, state, GEOMETRY, num_rows=num_rows), want)
    # reused buffers holding a previous, larger step: rows past n go back to padding
    out = DecodeBatch.empty(num_rows, GEOMETRY)
    for table in out.block_tables.values():
        table.fill_(7)
    out.token_ids.fill_(5)
    out.positions.fill_(9)
    assert_same_batch(build_decode_batch(tokens, seqs, positions, state, GEOMETRY, num_rows=num_rows, out=out), want)


def test_reused_buffers_rewrite_exactly_the_rows_whose_tables_changed():
    """Steps through one reused host buffer (as `DecodeGraphs` does): tables re-installed with a new
    page, rows reordered, fewer and more rows. Each step equals a fresh per-row fill; a row whose
    sequence and table object are unchanged is not rewritten (the memo's point)."""
    rng = random.Random(5)
    state, seqs, positions = engine_state(12, rng)
    out = DecodeBatch.empty(16, GEOMETRY)
    for step in range(6):
        if step == 2:  # two sequences' tables grow (the engine installs new lists)
            for seq in seqs[:2]:
                state.set_block_tables(seq, {pool.value: [*state.block_tables[pool][seq], 511][: GEOMETRY.max_blocks[pool]]
                                             for pool in Pool})
        if step == 3:
            rng.shuffle(seqs)
        live = seqs[: (12, 12, 12, 12, 7, 12)[step]]
        pos = [positions[int(seq[1:])] for seq in live]
        tokens = [rng.randrange(CONFIG.vocab_size) for _ in live]
        got = build_decode_batch(tokens, live, pos, state, GEOMETRY, num_rows=16, out=out)
        assert_same_batch(got, reference_fill(tokens, live, pos, state, GEOMETRY, 16))
    out.block_tables[Pool.WINDOW][0, 0] = -5  # row 0: same sequence, same list next step
    build_decode_batch(tokens, live, pos, state, GEOMETRY, num_rows=16, out=out)
    assert int(out.block_tables[Pool.WINDOW][0, 0]) == -5


def test_build_decode_batch_self_managed_tables_grow_as_before():
    state = ModelCacheState(CONFIG, EXACT, num_blocks=64, block_size=BLOCK, manage_tables=True)
    batch = build_decode_batch([3, 4], ["a", "b"], [130, 5], state, GEOMETRY, num_rows=4)
    assert_same_batch(batch, reference_fill([3, 4], ["a", "b"], [130, 5], state, GEOMETRY, 4))
    assert len(state.block_tables[Pool.WINDOW]["a"]) == -(-131 // BLOCK)
    assert len(state.block_tables[Pool.HCA]["a"]) == 1 and state.block_tables[Pool.HCA]["b"] == []


def test_build_decode_batch_errors_name_the_first_bad_row():
    rng = random.Random(3)
    state, seqs, positions = engine_state(4, rng)
    tokens = [1, 2, 3, 4]
    # a page id outside its pool (row 2, CSA state pool)
    good = list(state.block_tables[Pool.CSA_STATE][seqs[2]])
    state.block_tables[Pool.CSA_STATE][seqs[2]] = [*good[:-1], 512]
    with pytest.raises(ValueError, match=r"sequence 'r2' csa_state page ids .* are not in \[0, 512\)"):
        build_decode_batch(tokens, seqs, positions, state, GEOMETRY, num_rows=4)
    state.block_tables[Pool.CSA_STATE][seqs[2]] = [*good[:-1], -1]
    with pytest.raises(ValueError, match=r"sequence 'r2' csa_state page ids"):
        build_decode_batch(tokens, seqs, positions, state, GEOMETRY, num_rows=4)
    state.block_tables[Pool.CSA_STATE][seqs[2]] = good
    # a table that does not cover its row's position (engine-owned: checked, not grown)
    short = state.block_tables[Pool.WINDOW][seqs[1]]
    state.block_tables[Pool.WINDOW][seqs[1]] = short[:-1]
    with pytest.raises(CacheCapacityError, match="sequence 'r1': pool window"):
        build_decode_batch(tokens, seqs, positions, state, GEOMETRY, num_rows=4)
    state.block_tables[Pool.WINDOW][seqs[1]] = short
    # wider than the decode capacity
    state.block_tables[Pool.HCA][seqs[0]] = list(range(GEOMETRY.max_blocks[Pool.HCA] + 1))
    with pytest.raises(ValueError, match=r"sequence 'r0' has \d+ hca pages, the decode capacity is"):
        build_decode_batch(tokens, seqs, positions, state, GEOMETRY, num_rows=4)
    with pytest.raises(ValueError, match=f"token id {CONFIG.vocab_size} is not in"):
        build_decode_batch([1, CONFIG.vocab_size, 1, 1], seqs, positions, state, GEOMETRY, num_rows=4)
    with pytest.raises(ValueError, match=r"position -1 is not in"):
        build_decode_batch(tokens, seqs, [0, -1, 0, 0], state, GEOMETRY, num_rows=4)


@given(st.integers(0, 40), st.integers(1, 64), st.integers(1, 130))
def test_max_positions_is_pages_needed_inverse(num_pages, block_size, positions_per_unit):
    spec = PoolSpec("p", 1, block_size, positions_per_unit)
    most = spec.max_positions(num_pages)
    assert spec.pages_needed(most) <= num_pages < spec.pages_needed(most + 1)


class _AlwaysSlow(BlockManager):
    """The per-pool path on every call (the shortcut's capacity never matches)."""

    def allocate(self, request, num_new_tokens):
        self._capacity.clear()
        return super().allocate(request, num_new_tokens)


def test_allocate_shortcut_equals_the_per_pool_path():
    rng = random.Random(0)
    fast, slow = BlockManager(small_pools(48, 4)), _AlwaysSlow(small_pools(48, 4))
    live: dict[str, tuple] = {}
    for step in range(3000):
        if live and rng.random() < 0.05:
            rid = rng.choice(sorted(live))
            for manager, request in zip((fast, slow), live.pop(rid), strict=True):
                manager.free(request)
            continue
        if not live or rng.random() < 0.1:
            rid = f"q{step}"
            live[rid] = (make_request(rid), make_request(rid))
        rid = rng.choice(sorted(live))
        num_new = rng.choice([0, 1, 1, 1, 1, 2, 5, 17])
        answers = []
        for manager, request in zip((fast, slow), live[rid], strict=True):
            answers.append(manager.allocate(request, num_new))
            if answers[-1]:
                request.num_computed_tokens += num_new
        assert answers[0] == answers[1], step
        a, b = live[rid]
        assert dict(fast.block_tables(a)) == dict(slow.block_tables(b)), step
        assert fast.num_positions(a) == slow.num_positions(b)
        assert all(fast.num_free(p) == slow.num_free(p) for p in fast.pool_specs)


def test_allocate_shortcut_keeps_the_view_object_until_a_table_grows():
    manager = BlockManager(small_pools(16, 4))
    request = make_request("a")
    assert manager.allocate(request, 5)
    request.num_computed_tokens = 5
    view = manager.block_tables(request)
    assert manager.allocate(request, 1)  # position 5 lies in the window page already held
    assert manager.block_tables(request) is view
    request.num_computed_tokens = 8
    assert manager.allocate(request, 1)  # position 8 needs a third window page
    assert manager.block_tables(request) is not view
    assert len(manager.block_tables(request)["window"]) == 3


def test_single_token_decode_memo_is_the_tokenizer_call():
    from mxserve.engine.tokenizer import Tokenizer

    tok = Tokenizer.from_dir(default_model_path())
    for skip in (False, True):
        for token_id in range(tok.vocab_size):
            want = str(tok._tok.decode([token_id], skip_special_tokens=skip))
            assert tok.decode([token_id], skip_special_tokens=skip) == want  # first call fills the memo
            assert tok.decode((token_id,), skip_special_tokens=skip) == want, token_id  # the memo
    assert tok.decode([5, 6]) == str(tok._tok.decode([5, 6], skip_special_tokens=False))


def test_decode_batch_views_of_one_storage_copy_in_one_transfer():
    batch = DecodeBatch.empty(5, GEOMETRY)
    views = [batch.token_ids, batch.positions, *batch.block_tables.values()]
    assert all(v.is_contiguous() and v.untyped_storage().data_ptr() == batch.storage.untyped_storage().data_ptr()
               and v.storage_offset() % 16 == 0 for v in views)
    spans = sorted((v.storage_offset(), v.storage_offset() + v.numel()) for v in views)
    assert all(end <= start for (_, end), (start, _) in itertools.pairwise(spans))  # no overlap
    assert (batch.token_ids == 0).all() and all((t == -1).all() for t in batch.block_tables.values())
    rng = random.Random(1)
    state, seqs, positions = engine_state(4, rng)
    tokens = [3, 1, 4, 1]
    host = build_decode_batch(tokens, seqs, positions, state, GEOMETRY, num_rows=5, out=DecodeBatch.empty(5, GEOMETRY))
    batch.copy_(host)  # one storage copy
    assert_same_batch(batch, host)
    loose = DecodeBatch(host.token_ids.clone(), host.positions.clone(),
                        {p: t.clone() for p, t in host.block_tables.items()})  # no storage: per-tensor copies
    fresh = DecodeBatch.empty(5, GEOMETRY)
    fresh.copy_(loose)
    assert_same_batch(fresh, host)


class _RecordingCacheState:
    """The runner's view of a cache state: the tables it was given, and how often."""

    def __init__(self) -> None:
        self.tables: dict[str, dict[str, list[int]]] = {}
        self.num_installs = 0

    def set_block_tables(self, key, tables) -> None:
        self.tables[key] = {name: list(pages) for name, pages in tables.items()}
        self.num_installs += 1

    def free_sequence(self, key) -> None:
        self.tables.pop(key, None)


class _OneHotModel:
    """Logits that pick (input token * 7 + 3) mod V: requests advance, no real model."""

    supports_cuda_graphs = False
    observer = None
    config = None

    def forward(self, batch, state):
        rows = batch.token_ids if batch.logits_rows is None else batch.token_ids[batch.logits_rows]
        return torch.nn.functional.one_hot((rows * 7 + 3) % 50, 50).float()


def test_runner_installs_tables_only_when_they_changed_and_never_keeps_stale_ones():
    from mxserve.engine.model_runner import ModelRunner, RequestSampling
    from mxserve.engine.sampling_params import SamplingParams
    from tests.engine.factories import make_scheduler

    # few pages: requests are preempted and resumed (is_new), tables grow every 4 positions
    scheduler = make_scheduler(num_blocks=24, block_size=4, max_model_len=64, max_num_batched_tokens=40)
    state = _RecordingCacheState()
    runner = ModelRunner(_OneHotModel(), state, torch.device("cpu"))
    sampling = {}
    for i in range(6):
        request = make_request(f"q{i}", 5 + 3 * i, max_tokens=20)
        scheduler.add_request(request)
        sampling[request.request_id] = RequestSampling(SamplingParams(temperature=0, max_tokens=20), i,
                                                       request.prompt_token_ids, False)
    num_chunks = 0
    while scheduler.has_unfinished_requests():
        step = scheduler.schedule()
        result = runner.execute(step, sampling)
        for chunk in step.chunks:  # what the model read this step is the block manager's table
            assert state.tables[chunk.request_id] == {k: list(v) for k, v in chunk.block_tables.items()}, chunk
            num_chunks += 1
        scheduler.update_from_output(step, result.runner_output)
    assert scheduler.stats().num_preemptions > 0
    assert state.num_installs < num_chunks / 2, (state.num_installs, num_chunks)
