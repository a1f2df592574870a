"""Issue 13 acceptance: greedy outputs with and without DSpark speculation are identical, through
the engine (continuous batching, chunked prefill, preemption), and rejected drafts leave no trace
in any cache: target window/compressed/indexer caches, compressor state rows, DSpark windows."""

from __future__ import annotations

import pytest
import torch

from mxserve import LLM, SamplingParams
from mxserve.engine.cache_sizing import budget_for_tokens
from mxserve.model.forward_batch import ForwardBatch
from tests.speculative.helpers import ScriptedDrafter, random_prompts

GREEDY = dict(temperature=0, ignore_eos=True)


def caches_of(llm: LLM) -> list[torch.Tensor]:
    """Every byte of every target cache (window, compressed, indexer keys, compressor state rows)."""
    out = []
    for layer in llm.engine.runner.cache_state.layers:
        for cache in (layer.window, layer.compressed, layer.indexer, layer.state, layer.indexer_state):
            if cache is not None:
                out.append(cache.buffer)
    return out


def test_fifty_prompts_greedy_identical_with_the_dspark_draft(tiny_0731, monkeypatch):
    """Both step paths with the real draft: the eager step, and the graphed one (`step_graphs`,
    the static buffers on the CPU), whose drafts must be the eager drafter's: same acceptances."""
    prompts = random_prompts(50, 499, seed=1, max_len=8)
    params = SamplingParams(max_tokens=5, **GREEDY)
    plain = LLM(str(tiny_0731), max_model_len=64, progress=False)
    want = [o.outputs[0].token_ids for o in plain.generate(prompts, params)]
    stats = {}
    monkeypatch.setenv("MXSERVE_SPEC_LOOKAHEAD", "1")  # the graphed path with its draft lookahead
    for graphed in ("0", "1"):
        monkeypatch.setenv("MXSERVE_SPEC_GRAPHS", graphed)
        # 8 requests at a time: a verify step of 8 x (3 + 1) rows fits the graphs' largest bucket
        spec = LLM(str(tiny_0731), max_model_len=64, max_num_seqs=8, progress=False,
                   speculative_config='{"method": "dspark", "num_speculative_tokens": 3}')
        got = [o.outputs[0].token_ids for o in spec.generate(prompts, params)]
        assert got == want
        stats[graphed] = spec.engine.spec_decode_stats
        # every request's first decode verified a full K=3 block (max_tokens=5 leaves room for 3 + 1)
        assert stats[graphed].num_verifies >= 50 and len(stats[graphed].accepted_per_position) == 3
        assert stats[graphed].mean_acceptance_length == 1 + stats[graphed].num_accepted_tokens / stats[graphed].num_verifies
        graphs = spec.engine.runner.step_graphs
        # graphed: steps took the draft launched ahead by the step before (the draft lookahead)
        assert (graphs is None) if graphed == "0" else (graphs.num_steps > 0 and graphs.num_ahead_used > 0)
    assert stats["1"].as_dict() == stats["0"].as_dict()


def test_partial_acceptance_under_chunked_prefill_and_batching_is_lossless(tiny_0731):
    # prompts crossing the 32-token window, CSA ratio 4 and HCA ratio 16; a 24-token step budget
    # interleaves prefill chunks with verify chunks of several requests
    prompts = random_prompts(6, 499, seed=3, min_len=8, max_len=45)
    params = SamplingParams(max_tokens=14, **GREEDY)
    opts = dict(max_model_len=96, max_num_batched_tokens=24, long_prefill_token_threshold=16, progress=False)
    want = [o.outputs[0].token_ids for o in LLM(str(tiny_0731), **opts).generate(prompts, params)]
    spec = LLM(str(tiny_0731), speculative_config={"num_speculative_tokens": 4}, **opts)
    spec.engine.runner.drafter = ScriptedDrafter(dict(zip(map(tuple, prompts), want, strict=True)), 512)
    got = [o.outputs[0].token_ids for o in spec.generate(prompts, params)]
    assert got == want
    stats = spec.engine.spec_decode_stats
    assert 0 < stats.num_accepted_tokens < stats.num_draft_tokens  # both acceptances and rejections happened
    assert stats.mean_acceptance_length > 1.5


def test_preemption_with_speculation_gives_identical_tokens(tiny_0731):
    gen = torch.Generator().manual_seed(8)
    prompts = [torch.randint(2, 499, (60,), generator=gen).tolist() for _ in range(3)]
    params = SamplingParams(max_tokens=10, **GREEDY)
    roomy = LLM(str(tiny_0731), max_model_len=80, progress=False)
    want = [o.outputs[0].token_ids for o in roomy.generate(prompts, params)]
    # barely above one max_model_len sequence (the DSpark windows charged to the window pool)
    budget = budget_for_tokens(roomy.engine.model_config, roomy.engine.model.policy, tokens=90, block_size=16,
                               max_num_seqs=2, extra_window_layers=3)
    tight = LLM(str(tiny_0731), max_model_len=80, max_num_seqs=2, block_size=16, kv_cache_memory=budget,
                progress=False, speculative_config={"num_speculative_tokens": 3})
    tight.engine.runner.drafter = ScriptedDrafter(dict(zip(map(tuple, prompts), want, strict=True)), 512)
    got = [o.outputs[0].token_ids for o in tight.generate(prompts, params)]
    assert got == want
    assert tight.engine.scheduler.stats().num_preemptions > 0
    assert tight.engine.spec_decode_stats.num_accepted_tokens > 0


def test_draft_lookahead_across_page_boundaries_stages_what_a_fresh_draft_would(tiny_0731, monkeypatch):
    """Long greedy outputs over 16-token pages. A step that takes the draft launched ahead must have
    run it on exactly the inputs a freshly staged draft would get: anchors, positions and the
    window slots it reads, including pages the request gained since the draft was last staged. (H200, session 10: stale tables cut the mean acceptance length from 1.94 to 1.55 while
    staying lossless; the tiny random draft accepts too rarely for acceptance counts to show it.)"""
    from mxserve.engine.speculative.step_graphs import SpecStepGraphs
    from mxserve.kernels.paged_slots import paged_slots
    from mxserve.model.decode_batch import DecodeBatch, build_decode_batch
    from mxserve.model.kv_state import Pool

    checked = []
    take = SpecStepGraphs.draft_tokens

    def checking(self, anchors, seq_ids, anchor_positions):
        used = self.num_ahead_used
        block = take(self, anchors, seq_ids, anchor_positions)
        if self.num_ahead_used > used:  # this step took the draft launched ahead
            n, static = len(anchors), self._last_draft[0].staged.static
            fresh = DecodeBatch.empty(static.num_rows, self.geometry)
            build_decode_batch(list(anchors), list(seq_ids), list(anchor_positions), self.state, self.geometry,
                               num_rows=static.num_rows, out=fresh)
            assert torch.equal(static.token_ids[:n], fresh.token_ids[:n])
            assert torch.equal(static.positions[:n], fresh.positions[:n])
            # the window slots the draft reads (positions q − W … q − 1); later pages may still be
            # missing (the next schedule adds them), and the draft never reads them
            back = static.positions[:n, None] + torch.arange(-self.draft.config.sliding_window, 0)
            window = Pool.WINDOW
            assert torch.equal(paged_slots(static.block_tables[window][:n], back, self.geometry.block_size),
                               paged_slots(fresh.block_tables[window][:n], back, self.geometry.block_size))
            checked.append(int(static.positions[:n].max()))
        return block

    monkeypatch.setattr(SpecStepGraphs, "draft_tokens", checking)
    monkeypatch.setenv("MXSERVE_SPEC_LOOKAHEAD", "1")
    monkeypatch.setenv("MXSERVE_SPEC_GRAPHS", "1")
    # lossless decoding is the other tests' claim; this one is about the draft's inputs
    prompts = random_prompts(2, 499, seed=5, min_len=5, max_len=12)
    spec = LLM(str(tiny_0731), max_model_len=64, block_size=16, max_num_seqs=2, progress=False,
               speculative_config='{"method": "dspark", "num_speculative_tokens": 3}')
    spec.generate(prompts, SamplingParams(max_tokens=34, **GREEDY))
    assert spec.engine.runner.step_graphs.num_ahead_used == len(checked) > 10
    assert max(checked) > 32  # the ahead drafts reached a third page


@pytest.mark.parametrize("graphed,device_mask", [("0", "0"), ("1", "0"), ("1", "1")],
                         ids=["eager-step", "graphed-step", "graphed-step-device-rejected-rows"])
def test_rejected_drafts_leave_every_cache_byte_identical(tiny_0731, graphed, device_mask, monkeypatch):
    """One request (so both engines hand out the same pages): after generation, every byte of
    every target cache equals the plain run's, and the DSpark windows equal those written by
    one prefill over the final committed sequence. Both step paths: the eager forward with
    `CacheSnapshot`, and the graphed step's static buffers (`step_graphs`: verify as decode rows,
    `RowSnapshot` rollback; on the CPU without capture), by the host's or the device's rejected rows."""
    monkeypatch.setenv("MXSERVE_SPEC_GRAPHS", graphed)
    # with the lookahead switch, greedy steps roll back by the rows the verify graph rejected itself
    monkeypatch.setenv("MXSERVE_SPEC_LOOKAHEAD", device_mask)
    prompt = random_prompts(1, 499, seed=11, min_len=40, max_len=41)[0]
    params = SamplingParams(max_tokens=22, **GREEDY)
    opts = dict(max_model_len=80, block_size=16, max_num_seqs=1, progress=False)
    plain = LLM(str(tiny_0731), **opts)
    want = plain.generate([prompt], params)[0].outputs[0].token_ids
    spec = LLM(str(tiny_0731), speculative_config={"num_speculative_tokens": 5}, **opts)
    runner = spec.engine.runner
    runner.drafter = ScriptedDrafter({tuple(prompt): want}, 512, period=4, phase=2)
    assert spec.generate([prompt], params)[0].outputs[0].token_ids == want
    assert 0 < runner.stats.num_accepted_tokens < runner.stats.num_draft_tokens
    assert runner.num_rolled_back_positions > 0  # rejected positions did write, and were put back
    if graphed == "1":
        assert runner.step_graphs.num_steps > 0  # decode steps took the graphed path
    else:
        assert runner.step_graphs is None and runner.num_restored_entries > 0
    for a, b in zip(caches_of(plain), caches_of(spec), strict=True):
        # the pools differ in page count (the spec plan charges the DSpark windows to the window
        # pool); both engines use the lowest pages, so compare the common prefix, the rest is zero
        n = min(a.numel(), b.numel())
        assert torch.equal(a[:n], b[:n])
        assert not a[n:].any() and not b[n:].any()

    # DSpark windows: committed positions only, byte-equal to one prefill of the whole sequence
    committed = prompt + want[:-1]  # the last token's position was never computed
    state = runner.model.new_cache_state(max_sequences=1, max_positions=len(committed), block_size=16)
    batch = ForwardBatch.from_chunks([committed], [0], [0], logits_for="last")
    _, aux = runner.model.forward_with_aux(batch, state, runner.aux_layer_ids)
    positions = torch.arange(len(committed))
    fresh = type(runner.windows)(runner.model.config, runner.model.policy,
                                 num_blocks=runner.windows[0].num_blocks, block_size=16)
    # the engine's only request got pages 0, 1, 2, ... of the window pool, in order
    slots = positions
    runner.draft.write_context(fresh, aux, positions, slots)
    for stage in range(3):
        assert torch.equal(fresh[stage].read_bytes(slots)[0], runner.windows[stage].read_bytes(slots)[0])
        assert torch.equal(fresh[stage].buffer, runner.windows[stage].buffer)  # nothing past the committed end


def test_sampled_requests_take_the_same_tokens_on_both_step_paths(tiny_0731, monkeypatch):
    """Sampled requests (temperature, top-p; greedy drafts) verified with the keyed draws: the graphed
    step (verify rows' logits from the decode path) gives the eager step's tokens, both rules."""
    prompts = random_prompts(4, 499, seed=5, min_len=6, max_len=20)
    params = [SamplingParams(max_tokens=10, temperature=0.8, top_p=0.9, seed=100 + i, ignore_eos=True)
              for i in range(len(prompts))]
    for rule in ("standard", "block"):
        got = {}
        for graphed in ("0", "1"):
            monkeypatch.setenv("MXSERVE_SPEC_GRAPHS", graphed)
            spec = LLM(str(tiny_0731), max_model_len=64, progress=False,
                       speculative_config={"num_speculative_tokens": 3, "rejection_sample_method": rule})
            got[graphed] = [o.outputs[0].token_ids for o in spec.generate(prompts, params)]
            graphs = spec.engine.runner.step_graphs
            assert (graphs is None) if graphed == "0" else (graphs.num_steps > 0)
        assert got["1"] == got["0"], rule
