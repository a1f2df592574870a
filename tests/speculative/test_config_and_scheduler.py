"""`--speculative-config` parsing, the engine's refusal without a draft, and the scheduler's draft slots."""

from __future__ import annotations

import pytest

from mxserve import LLM
from mxserve.config.scheduler_config import SchedulerConfig
from mxserve.config.speculative_config import SpeculativeConfig
from mxserve.engine.block_manager import BlockManager
from mxserve.engine.pool_spec import deepseek_v4_pool_specs
from mxserve.engine.request import Request, StopCriteria
from mxserve.engine.scheduler import Scheduler
from mxserve.engine.scheduler_output import RunnerOutput


def test_parse_json_dict_and_off():
    cfg = SpeculativeConfig.parse('{"method": "dspark", "num_speculative_tokens": 7, "rejection_sample_method": "block"}')
    assert (cfg.num_speculative_tokens, cfg.rejection_sample_method, cfg.draft_sample_method) == (7, "block", "greedy")
    assert SpeculativeConfig.parse({}).resolve_k(5) == 5  # default K: the checkpoint's dspark_block_size
    assert SpeculativeConfig.parse(None) is None and SpeculativeConfig.parse("null") is None


@pytest.mark.parametrize(("value", "message"), [
    ('{"method": "eagle"}', "method"), ('{"num_speculative_tokens": 0}', "num_speculative_tokens"),
    ('{"draft_sample_method": "typical"}', "draft_sample_method"), ("{nope", "not valid JSON"),
    ('{"k": 3}', "unknown key"), ("[1]", "JSON object"),
])
def test_bad_speculative_configs_name_the_problem(value, message):
    with pytest.raises(ValueError, match=message):
        SpeculativeConfig.parse(value)


def test_a_checkpoint_without_a_draft_is_refused(tiny_all):
    with pytest.raises(ValueError, match="DSpark draft"):
        LLM(str(tiny_all), speculative_config={"num_speculative_tokens": 3}, progress=False)


def make_scheduler(k: int, *, budget: int = 64, max_model_len: int = 64) -> Scheduler:
    specs = deepseek_v4_pool_specs(num_blocks=64, block_size=4, compress_rate_csa=4, compress_rate_hca=16)
    return Scheduler(SchedulerConfig(max_model_len=max_model_len, max_num_batched_tokens=budget,
                                     num_speculative_tokens=k), BlockManager(specs))


def test_decode_chunks_reserve_k_draft_slots_and_accepted_tokens_advance_the_request():
    sched = make_scheduler(3)
    req = Request("a", (5, 6, 7), StopCriteria(max_tokens=10))
    sched.add_request(req)
    step = sched.schedule()
    assert step.chunks[0].num_draft_tokens == 0  # the prompt: no drafts
    sched.update_from_output(step, RunnerOutput({"a": (8,)}))
    step = sched.schedule()
    chunk = step.chunks[0]
    assert (chunk.start_pos, chunk.num_tokens, chunk.num_draft_tokens, step.total_num_tokens) == (3, 1, 3, 4)
    assert sched.block_manager.num_positions(req) == 7  # pages cover the anchor and 3 drafts
    with pytest.raises(ValueError, match=r"1\.\.4"):
        sched.update_from_output(step, RunnerOutput({"a": (1, 2, 3, 4, 5)}))
    updates = sched.update_from_output(step, RunnerOutput({"a": (9, 10, 11)}))  # 2 accepted + 1
    assert updates[0].new_token_ids == (9, 10, 11)
    assert (req.num_tokens, req.num_computed_tokens) == (7, 6)  # positions 3, 4, 5 committed


def test_draft_slots_shrink_at_max_tokens_and_budget_and_a_stop_truncates():
    sched = make_scheduler(4, budget=3)
    req = Request("a", (5, 6), StopCriteria(max_tokens=4, eos_token_ids={1}))
    sched.add_request(req)
    sched.update_from_output(step := sched.schedule(), RunnerOutput({"a": (8,)}))
    step = sched.schedule()
    assert step.chunks[0].num_draft_tokens == 2  # budget 3 = anchor + 2 drafts
    updates = sched.update_from_output(step, RunnerOutput({"a": (1, 9, 9)}))  # EOS first: the rest dropped
    assert updates[0].new_token_ids == (1,) and updates[0].finish_reason.value == "stop"
    assert req.output_token_ids == [8, 1]
