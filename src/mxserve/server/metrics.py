"""Prometheus metrics of one server (its own registry, so several apps can live in one process).

Counted where the fact is known: HTTP statuses by the middleware, finished requests and token
counts by the engine thread when a request ends (so aborted requests count what they generated),
TTFT and inter-token latencies from the engine's per-token timestamps, and running / waiting /
cache usage read from the engine's stats snapshot when /metrics is scraped.
"""

from __future__ import annotations

import itertools

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from mxserve.engine.engine_client import EngineStats
from mxserve.engine.outputs import RequestOutput
from mxserve.engine.speculative import SpecDecodeStats

# Buckets for a range from a fast GPU (ms) to the CPU reference model (seconds per step).
_TTFT_BUCKETS_S = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0)
_ITL_BUCKETS_S = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0)


class ServerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.http_requests = Counter(
            "mxserve_http_requests", "HTTP requests answered, by path and status code", ["path", "status"], registry=r)
        self.requests_finished = Counter(
            "mxserve_requests_finished", "Engine requests (one per prompt) ended, by finish reason",
            ["finish_reason"], registry=r)
        self.prompt_tokens = Counter("mxserve_prompt_tokens", "Prompt tokens of requests that ended", registry=r)
        self.generation_tokens = Counter(
            "mxserve_generation_tokens", "Tokens generated (all samples), aborted requests included", registry=r)
        self.ttft = Histogram("mxserve_time_to_first_token_seconds", "Time from engine arrival to the first token",
                              buckets=_TTFT_BUCKETS_S, registry=r)
        self.inter_token_latency = Histogram(
            "mxserve_inter_token_latency_seconds", "Time between consecutive tokens of a request",
            buckets=_ITL_BUCKETS_S, registry=r)
        self.num_running = Gauge("mxserve_num_requests_running", "Requests holding cache pages", registry=r)
        self.num_waiting = Gauge("mxserve_num_requests_waiting", "Requests queued in the scheduler", registry=r)
        self.cache_usage = Gauge("mxserve_kv_cache_usage_ratio",
                                 "Fraction of cache pages in use (fullest pool), 0..1", registry=r)
        # Speculative decoding (vLLM's counters), cumulative since start; absent without speculation.
        self.spec_metrics = {
            "num_drafts": "Request-steps that verified draft tokens",
            "num_draft_tokens": "Draft tokens proposed and verified",
            "num_accepted_tokens": "Draft tokens accepted",
            "mean_acceptance_length": "Tokens emitted per verify (1 + accepted / verifies)",
        }
        self._spec_gauges: dict[str, Gauge] = {}
        # Status labels come from a fixed set of routes; unknown paths share one label so a
        # scanner cannot grow the series without bound.
        self.known_paths: set[str] = set()

    def observe_http(self, path: str, status: int) -> None:
        self.http_requests.labels(path if path in self.known_paths else "other", str(status)).inc()

    def observe_finished(self, output: RequestOutput) -> None:
        """Engine thread: one call per request that ended (finished or aborted)."""
        reasons = {o.finish_reason for o in output.outputs} or {"abort"}
        reason = "abort" if "abort" in reasons else sorted(r for r in reasons if r)[0]
        self.requests_finished.labels(reason).inc()
        self.prompt_tokens.inc(len(output.prompt_token_ids))
        self.generation_tokens.inc(sum(len(o.token_ids) for o in output.outputs))
        ttft = output.metrics.ttft_s
        if ttft is not None:
            self.ttft.observe(ttft)
        # n > 1 samples append one timestamp each per step; a step's tokens count as one arrival.
        times = sorted(set(output.metrics.token_times_s))
        for earlier, later in itertools.pairwise(times):
            self.inter_token_latency.observe(later - earlier)

    def render(self, stats: EngineStats) -> bytes:
        self.num_running.set(stats.num_running)
        self.num_waiting.set(stats.num_waiting)
        self.cache_usage.set(stats.cache_usage)
        if stats.spec_decode is not None:
            self._render_spec_decode(stats.spec_decode)
        return generate_latest(self.registry)

    def _render_spec_decode(self, spec: SpecDecodeStats) -> None:
        values = {"num_drafts": spec.num_verifies, "num_draft_tokens": spec.num_draft_tokens,
                  "num_accepted_tokens": spec.num_accepted_tokens,
                  "mean_acceptance_length": spec.mean_acceptance_length}
        for name, value in values.items():
            if name not in self._spec_gauges:  # registered on first use: a server without speculation shows none
                self._spec_gauges[name] = Gauge(f"mxserve_spec_decode_{name}", self.spec_metrics[name],
                                                registry=self.registry)
            self._spec_gauges[name].set(value)
