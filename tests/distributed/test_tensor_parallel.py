"""TP=2, TP=4 and TP=2 with expert parallelism against one process (issue 14's acceptance), on
gloo CPU ranks: logits within 1e-5 relative in exact numerics and identical greedy tokens, on the
packaged default model and on the tiny random checkpoint with every layer type; each rank's
weight bytes are the planned shards (printed as a share of the whole model)."""

from __future__ import annotations

import pytest
import torch

from mxserve import default_model_path
from mxserve.distributed import ParallelConfig, RemoteModel, ShardingPlan
from mxserve.distributed.shards import planned_rank_nbytes
from mxserve.model.checkpoint import build_inventory
from mxserve.model.forward_batch import ForwardBatch
from mxserve.model.greedy import greedy_generate
from mxserve.model.numerics import NumericPolicy
from tests.distributed.conftest import reference_model, worker_spec

REL_TOL = 1e-5

CASES = [  # (checkpoint, ranks, expert parallel)
    ("default", 2, False), ("default", 2, True), ("tiny", 2, True),
    ("default", 4, False), ("tiny", 4, True),
]


def _max_rel(ours: torch.Tensor, ref: torch.Tensor) -> float:
    return float(((ours - ref).abs().amax(dim=-1) / ref.abs().amax(dim=-1)).max())


def _prompt(vocab: int, length: int, seed: int) -> list[int]:
    return torch.randint(2, vocab, (length,), generator=torch.Generator().manual_seed(seed)).tolist()


def _batched_steps(model, vocab: int, length: int) -> list[torch.Tensor]:
    """Two sequences: a chunked prefill (two chunks) beside a short one, then a decode of both."""
    a, b = _prompt(vocab, length, 1), _prompt(vocab, 13, 2)
    state = model.new_cache_state(max_sequences=2, max_positions=length + 2, block_size=16)
    cut = length * 2 // 3
    steps = [([a[:cut], b[:12]], [0, 0]), ([a[cut:], b[12:]], [cut, 12]), ([[7], [9]], [length, 13])]
    return [model.forward(ForwardBatch.from_chunks(chunks, ["a", "b"], starts), state) for chunks, starts in steps]


@pytest.mark.parametrize("name, n, ep", CASES, ids=[f"{m}-tp{n}{'-ep' if ep else ''}" for m, n, ep in CASES])
def test_parallel_logits_and_greedy_tokens_equal_one_process(name, n, ep, request, tiny_all):
    model_dir = default_model_path() if name == "default" else tiny_all
    ranks = request.getfixturevalue(f"ranks{n}")
    executor = ranks.use(worker_spec(model_dir, n, ep))
    reference = reference_model(model_dir)
    config = reference.config
    remote = RemoteModel(config, NumericPolicy.for_mode("exact"), executor)

    # Past the tiny model's window (32) and HCA ratio (16): every cache and the indexer top-k are read;
    # the default model's 40 tokens reach its CSA entries and indexer (its HCA ratio is 128).
    length = 40 if name == "default" else 50
    for step, (ours, ref) in enumerate(zip(_batched_steps(remote, config.vocab_size, length),
                                           _batched_steps(reference, config.vocab_size, length), strict=True)):
        assert _max_rel(ours, ref) <= REL_TOL, f"step {step}: max rel {_max_rel(ours, ref):.2e}"
        assert torch.equal(ours.argmax(-1), ref.argmax(-1)), f"step {step}"

    prompt = _prompt(config.vocab_size, 9, 3)
    tokens, logits = greedy_generate(remote, prompt, 8)
    ref_tokens, ref_logits = greedy_generate(reference, prompt, 8)
    assert tokens == ref_tokens
    assert _max_rel(logits, ref_logits) <= REL_TOL

    # Each rank holds exactly its planned shards; print the share of the whole model for the record.
    plan = ShardingPlan.build(config, ParallelConfig(n, ep))
    inventory = build_inventory(config)
    total = planned_rank_nbytes(inventory, ShardingPlan.build(config, ParallelConfig(1)), 0)
    for report in executor.reports:
        assert report.weight_bytes == planned_rank_nbytes(inventory, plan, report.rank)
    shares = [f"{r.weight_bytes / total:.3f}" for r in executor.reports]
    print(f"{name} TP={n}{' EP' if ep else ''}: rank weight bytes / model = {shares} ({total} B in one process)")
