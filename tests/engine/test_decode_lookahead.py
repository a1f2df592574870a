"""The decode lookahead (`mxserve.engine.decode_lookahead`) changes no token.

On the CPU the runner takes the engine's CUDA decode path through `MXSERVE_DECODE_GRAPHS=1`:
`DecodeGraphs` runs uncaptured (`capture=False`), the static-buffer path a GPU replays. The same
requests then run with the lookahead on and off (`MXSERVE_DECODE_LOOKAHEAD=0`); every token must be
equal, and the lookahead must actually have been used (and dropped where the decodes changed), or
the comparison proves nothing.
"""

from __future__ import annotations

import pytest

from mxserve import LLM, SamplingParams
from mxserve.engine.decode_lookahead import OFF_SWITCH
from mxserve.engine.model_runner import SPLIT_STEP

MAX_LEN = 64


def _graph_path_llm(checkpoint, monkeypatch) -> LLM:
    monkeypatch.setenv("MXSERVE_DECODE_GRAPHS", "1")
    return LLM(str(checkpoint), device="cpu", max_model_len=MAX_LEN, max_num_seqs=4, block_size=8, progress=False)


def _run(llm: LLM, events: dict[str, int] | None = None) -> tuple[dict[str, list[int]], dict[str, int]]:
    """Three requests that end at different steps (the batch shrinks under a pending lookahead), one
    sampled with a seed. Mid-stream a fourth arrives (its prefill runs eager beside the decodes,
    which take the pending lookahead), and later "b" is aborted (the pending lookahead is dropped).
    Without `events` (the lookahead-on run) each lands after the first step, from step 6 on, that
    left a lookahead pending; the steps are returned, and the other run replays them (the lookahead
    changes no scheduling, so both runs step alike)."""
    engine = llm.engine
    plans = {"a": ([5, 6, 7, 8, 9], SamplingParams(max_tokens=21, temperature=0, ignore_eos=True)),
             "b": ([11, 12, 13], SamplingParams(max_tokens=12, temperature=0, ignore_eos=True)),
             "c": ([3, 4], SamplingParams(max_tokens=14, temperature=0.8, seed=7, ignore_eos=True))}
    for rid, (prompt, params) in plans.items():
        engine.add_request(rid, prompt, params)
    tokens: dict[str, list[int]] = {}
    found: dict[str, int] = {}
    steps = 0

    def due(event: str, after: int) -> bool:
        if event in found:
            return False
        if events is not None:
            return events[event] == steps
        return steps >= after and engine.runner._ahead is not None

    while engine.has_unfinished_requests():
        for out in engine.step():
            tokens[out.request_id] = list(out.outputs[0].token_ids)
        steps += 1
        if due("arrive", 6):
            engine.add_request("d", [21, 22, 23, 24], SamplingParams(max_tokens=6, temperature=0, ignore_eos=True))
            found["arrive"] = steps
        elif "arrive" in found and due("abort", found["arrive"] + 1):
            engine.abort_request("b")
            found["abort"] = steps
    return tokens, found


def test_lookahead_changes_no_token_and_is_used(tiny_all, monkeypatch):
    monkeypatch.setenv(OFF_SWITCH, "1")
    llm = _graph_path_llm(tiny_all, monkeypatch)
    got, events = _run(llm)
    stats = llm.engine.runner.lookahead_stats
    assert set(events) == {"arrive", "abort"}, events
    monkeypatch.setenv(OFF_SWITCH, "0")
    off = _graph_path_llm(tiny_all, monkeypatch)
    want, _ = _run(off, events)
    assert got == want
    assert off.engine.runner.lookahead_stats.launched == 0
    assert {rid: len(t) for rid, t in got.items() if rid != "b"} == {"a": 21, "c": 14, "d": 6} and len(got["b"]) < 12
    # used on most decode steps, the arrival's split step included; dropped after the abort
    assert stats.used >= 8 and stats.dropped >= 1
    assert llm.engine.runner.eager_stats.counts[SPLIT_STEP] >= 1
    assert stats.launched == stats.used + stats.dropped  # none left pending: the last step predicts nothing


@pytest.mark.parametrize("max_tokens", [1, 2])
def test_no_lookahead_for_a_request_that_ends_now(tiny_all, monkeypatch, max_tokens):
    """A request that reaches max_tokens at this step launches nothing (it cannot run again)."""
    llm = _graph_path_llm(tiny_all, monkeypatch)
    out = llm.generate([[5, 6, 7]], SamplingParams(max_tokens=max_tokens, temperature=0, ignore_eos=True))
    assert len(out[0].outputs[0].token_ids) == max_tokens
    assert llm.engine.runner.lookahead_stats.launched == 0
