"""/metrics exposes the speculative decoding counters (issue 13), and only when speculation is on."""

from __future__ import annotations

import asyncio
import re

from mxserve.config.engine_config import EngineConfig
from mxserve.engine.async_engine import AsyncEngine, EngineStats
from mxserve.engine.llm_engine import LLMEngine
from mxserve.engine.speculative import SpecDecodeStats
from mxserve.server.metrics import ServerMetrics


def _stats(spec: SpecDecodeStats | None) -> EngineStats:
    return EngineStats(num_running=0, num_waiting=0, num_pending=0, cache_usage=0.0, all_pages_free=True,
                       spec_decode=spec)


def _value(text: str, name: str) -> float:
    match = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    assert match, f"{name} missing from /metrics"
    return float(match.group(1))


def test_counters_render_from_the_engine_snapshot():
    spec = SpecDecodeStats()
    spec.record(3, 2)
    spec.record(3, 0)
    text = ServerMetrics().render(_stats(spec)).decode()
    assert _value(text, "mxserve_spec_decode_num_drafts") == 2
    assert _value(text, "mxserve_spec_decode_num_draft_tokens") == 6
    assert _value(text, "mxserve_spec_decode_num_accepted_tokens") == 2
    assert _value(text, "mxserve_spec_decode_mean_acceptance_length") == 2.0  # 1 + 2 accepted / 2 verifies


def test_no_speculation_no_spec_series():
    assert "mxserve_spec_decode" not in ServerMetrics().render(_stats(None)).decode()


def test_the_async_engine_snapshot_carries_the_speculative_counters(tiny_0731, tiny_all):
    for model, speculative in ((tiny_0731, {"method": "dspark", "num_speculative_tokens": 3}), (tiny_all, None)):
        engine = AsyncEngine(LLMEngine(EngineConfig(model=str(model), device="cpu", max_model_len=256,
                                                    kv_cache_memory=256 << 20, max_num_seqs=4,
                                                    speculative_config=speculative)))
        try:
            snapshot = engine._read_stats()
            assert (snapshot.spec_decode is not None) == (speculative is not None)
        finally:
            asyncio.run(engine.shutdown(1.0))
