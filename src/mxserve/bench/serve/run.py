"""The whole serving benchmark: servers, prompt sets, the sweep, the prefill-cap scenario, JSON.

With `url=None` it starts `mxserve serve` itself (budget B = `max_num_batched_tokens`, cap C =
`prefill_cap`) and runs the sweep there; the scenario's capped half runs on the same server
(its long prompt is B tokens long), the uncapped half on a second server with threshold = B.
Against a given `url` it runs the sweep only (the scenario needs two server configurations).
Vocabulary size and BOS come from the checkpoint's config.json (`model`, default model by
default); real text is tokenized by the server under test (`/tokenize`).
"""

from __future__ import annotations

import asyncio
import datetime
import importlib.metadata
import json
import os
import platform
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mxserve.bench.serve.client import completion_body, import_httpx, stream_completion
from mxserve.bench.serve.dataset import DATASETS, random_prompts, text_prompts
from mxserve.bench.serve.prefill_cap import PrefillCapResult, run_prefill_cap
from mxserve.bench.serve.server_process import ServerArgs, ServerProcess
from mxserve.bench.serve.stats import LevelSummary
from mxserve.bench.serve.sweep import run_level
from mxserve.config import ModelConfig

SHORT_PROMPT_LEN = 32  # the scenario's short request (at most the cap, so it fits beside one long chunk)


@dataclass(frozen=True)
class ServeBenchOptions:
    url: str | None  # a running server; None = start one
    model: str | None  # checkpoint dir (the served one, or the one to serve); None = default model
    device: str
    concurrency: tuple[int, ...]
    datasets: tuple[str, ...]
    prompt_len: int
    output_len: int
    requests_per_client: int
    seed: int
    max_model_len: int
    max_num_batched_tokens: int  # B, also the scenario's long prompt length
    prefill_cap: int  # C, the sweep server's long_prefill_token_threshold
    scenario_reps: int  # 0 = skip the scenario
    text_file: Path | None  # None = the default model's held-out sample
    api_key: str | None
    request_timeout_s: float
    server_start_timeout_s: float
    server_args: tuple[str, ...] = ()  # extra `mxserve serve` arguments for the servers bench starts

    def __post_init__(self) -> None:
        def bad(why: str) -> ValueError:
            return ValueError(f"bench serve: {why}")

        if not self.concurrency or any(n <= 0 for n in self.concurrency):
            raise bad(f"concurrency levels must be positive, got {list(self.concurrency)}")
        unknown = [d for d in self.datasets if d not in DATASETS]
        if not self.datasets or unknown:
            raise bad(f"datasets must be among {list(DATASETS)}, got {list(self.datasets)}")
        for name in ("prompt_len", "output_len", "requests_per_client", "max_model_len", "max_num_batched_tokens",
                     "prefill_cap"):
            if getattr(self, name) <= 0:
                raise bad(f"{name}={getattr(self, name)} must be positive")
        if self.prompt_len + self.output_len > self.max_model_len:
            raise bad(f"prompt_len + output_len = {self.prompt_len + self.output_len} exceeds "
                      f"max_model_len={self.max_model_len}")
        if self.server_args and self.url is not None:
            raise bad(f"--server-arg {list(self.server_args)} applies to the servers bench starts; with --url the "
                      "server is already running with its own arguments")
        if self.scenario_reps and self.url is None:
            if self.prefill_cap >= self.max_num_batched_tokens:
                raise bad(f"prefill_cap={self.prefill_cap} must be below max_num_batched_tokens="
                          f"{self.max_num_batched_tokens} for the scenario to compare anything")
            if self.max_num_batched_tokens + 4 > self.max_model_len:
                raise bad(f"the scenario's long prompt is max_num_batched_tokens={self.max_num_batched_tokens} tokens "
                          f"and needs max_model_len >= {self.max_num_batched_tokens + 4}, got {self.max_model_len}")


def run_serve_bench(opts: ServeBenchOptions, out_json: Path, *, echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Run everything, write `out_json` (and the server logs beside it); returns the JSON object."""
    model_dir = _model_dir(opts.model)
    model_config = ModelConfig.from_file(model_dir / "config.json")
    text = opts.text_file or _model_dir(None) / "heldout_sample.txt"  # real text: the default model's held-out sample
    sweep_args = ServerArgs(opts.model, opts.device, opts.max_model_len, max(opts.concurrency),
                            opts.max_num_batched_tokens, opts.prefill_cap, opts.server_args)
    result: dict[str, Any] = {"meta": _meta(opts, model_dir, model_config), "levels": [], "prefill_cap": None}
    headers = {"Authorization": f"Bearer {opts.api_key}"} if opts.api_key else {}
    logs = out_json.parent

    def sweep_on(base_url: str) -> None:
        prompt_sets = _prompt_sets(opts, base_url, headers, model_config, text)
        asyncio.run(_warm_up(base_url, prompt_sets, opts, headers))
        for dataset, prompts in prompt_sets.items():
            for n in opts.concurrency:
                summary, _ = asyncio.run(run_level(
                    base_url, dataset=dataset, concurrency=n, prompts=prompts,
                    num_requests=n * opts.requests_per_client, output_len=opts.output_len, model=None,
                    headers=headers, timeout_s=opts.request_timeout_s))
                result["levels"].append(summary.to_dict())
                echo(_level_line(summary))

    if opts.url is not None:
        result["meta"]["server"] = {"url": opts.url}
        sweep_on(opts.url.rstrip("/"))
        if opts.scenario_reps:
            echo("prefill-cap scenario skipped: it needs two server configurations, which bench starts itself "
                 "(run without --url)")
    else:
        result["meta"]["server"] = {"started_by_bench": asdict(sweep_args)}
        with ServerProcess(sweep_args, logs / f"{out_json.stem}.server.log",
                           start_timeout_s=opts.server_start_timeout_s) as server:
            sweep_on(server.base_url)
            capped = _scenario(server.base_url, opts, headers, model_config, opts.prefill_cap) if opts.scenario_reps else None
        uncapped = None
        if opts.scenario_reps:
            nocap_args = ServerArgs(opts.model, opts.device, opts.max_model_len, max(opts.concurrency),
                                    opts.max_num_batched_tokens, opts.max_num_batched_tokens, opts.server_args)
            with ServerProcess(nocap_args, logs / f"{out_json.stem}.server-nocap.log",
                               start_timeout_s=opts.server_start_timeout_s) as server:
                uncapped = _scenario(server.base_url, opts, headers, model_config, opts.max_num_batched_tokens)
            result["prefill_cap"] = {"no_cap": uncapped.to_dict(), "cap": capped.to_dict()}
            echo(_scenario_line(uncapped, capped))
    out_json.parent.mkdir(parents=True, exist_ok=True)
    out_json.write_text(json.dumps(result, indent=1))
    return result


def _model_dir(model: str | None) -> Path:
    if model is None:
        from mxserve import default_model_path

        return Path(default_model_path())
    return Path(model)


def _prompt_sets(opts: ServeBenchOptions, base_url: str, headers: dict[str, str], config: ModelConfig,
                 text: Path) -> dict[str, list[list[int]]]:
    num = max(opts.concurrency) * opts.requests_per_client
    sets = {}
    for dataset in opts.datasets:
        if dataset == "random":
            sets[dataset] = random_prompts(num, opts.prompt_len, vocab_size=config.vocab_size,
                                           bos_id=config.bos_token_id, seed=opts.seed)
        else:
            sets[dataset] = text_prompts(num, opts.prompt_len, text_ids=_tokenize(base_url, headers, text),
                                         bos_id=config.bos_token_id, seed=opts.seed)
    return sets


def _tokenize(base_url: str, headers: dict[str, str], text: Path) -> list[int]:
    httpx = import_httpx()
    response = httpx.post(base_url + "/tokenize", json={"prompt": text.read_text(), "add_special_tokens": False},
                          headers=headers, timeout=120)
    if response.status_code != 200:
        raise RuntimeError(f"/tokenize answered {response.status_code}: {response.text[:200]} "
                           "(the text dataset needs a server with a tokenizer; use --dataset random)")
    return response.json()["tokens"]


WARM_UP_TOKENS = 16  # per warm-up request: room for K <= 15 drafts after the first token


async def _warm_up(base_url: str, prompt_sets: dict[str, list[list[int]]], opts: ServeBenchOptions,
                   headers: dict[str, str]) -> None:
    """A batch at every concurrency level (and one request alone), WARM_UP_TOKENS each: kernels
    compile/autotune and the batch sizes' CUDA graphs are captured before anything is measured
    (field notes §7: the first prefill can take 3x longer). Several tokens, not 2: a speculative
    server drafts only where max_tokens leaves room, and its draft/verify graphs are captured on a
    bucket's first drafting step (session 11: 16 captures inside the measured levels)."""
    httpx = import_httpx()
    prompts = next(iter(prompt_sets.values()))
    async with httpx.AsyncClient(timeout=opts.request_timeout_s) as client:
        for width in sorted({1, *opts.concurrency}):
            bodies = [completion_body(prompts[i % len(prompts)], WARM_UP_TOKENS, None) for i in range(width)]
            records = await asyncio.gather(*(stream_completion(client, base_url, b, headers=headers,
                                                               timeout_s=opts.request_timeout_s) for b in bodies))
            failed = [r.error for r in records if not r.ok]
            if failed:
                raise RuntimeError(f"warm-up requests failed ({len(failed)} of {width}): {failed[0]}")


def _scenario(base_url: str, opts: ServeBenchOptions, headers: dict[str, str], config: ModelConfig,
              threshold: int) -> PrefillCapResult:
    reps = opts.scenario_reps
    long_prompts = random_prompts(reps, opts.max_num_batched_tokens, vocab_size=config.vocab_size,
                                  bos_id=config.bos_token_id, seed=opts.seed + 1)
    short_prompts = random_prompts(reps, min(SHORT_PROMPT_LEN, opts.prefill_cap), vocab_size=config.vocab_size,
                                   bos_id=config.bos_token_id, seed=opts.seed + 2)
    label = "no cap" if threshold >= opts.max_num_batched_tokens else f"cap {threshold}"
    return asyncio.run(run_prefill_cap(base_url, label=label, threshold=threshold, budget=opts.max_num_batched_tokens,
                                       long_prompts=long_prompts, short_prompts=short_prompts, model=None,
                                       headers=headers, timeout_s=opts.request_timeout_s))


def _meta(opts: ServeBenchOptions, model_dir: Path, config: ModelConfig) -> dict[str, Any]:
    versions = {}
    for package in ("mxserve", "torch", "triton", "httpx", "fastapi", "uvicorn"):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    options = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(opts).items() if k != "api_key"}
    return {
        "date_utc": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S"),
        "command": " ".join(sys.argv), "python": platform.python_version(), "versions": versions,
        "model_dir": str(model_dir), "model_layers": config.num_hidden_layers, "model_hidden": config.hidden_size,
        "options": options,
        # the servers bench starts inherit it: which kernels ran is half of what a figure means
        "env_kernel_overrides": os.environ.get("MXSERVE_KERNEL_OVERRIDES"),
        "definitions": "TTFT: sent -> first output chunk; ITL: gaps between output chunks; per-stream decode tok/s: "
                       "(tokens-1)/(last chunk - first chunk); aggregate: all output tokens / level wall time",
    }


def _fmt(value: float | None, scale: float = 1.0, digits: int = 1) -> str:
    return "-" if value is None else f"{value * scale:.{digits}f}"


def _level_line(s: LevelSummary) -> str:
    return (f"{s.dataset:6s} N={s.concurrency:3d}  {s.aggregate_output_tok_s:8.1f} tok/s aggregate  "
            f"{_fmt(s.per_stream_decode_tok_s_median):>7s} tok/s/stream  TTFT p50/p99 {_fmt(s.ttft_p50_s, 1e3)}/"
            f"{_fmt(s.ttft_p99_s, 1e3)} ms  ITL p50/p99 {_fmt(s.itl_p50_s, 1e3)}/{_fmt(s.itl_p99_s, 1e3)} ms  "
            f"errors {s.num_errors}/{s.num_requests}")


def _scenario_line(uncapped: PrefillCapResult, capped: PrefillCapResult) -> str:
    return (f"short request ({capped.short_prompt_len} tokens) behind a {capped.long_prompt_len}-token prefill: "
            f"TTFT {_fmt(uncapped.short_ttft_median_s, 1e3)} ms without the cap, "
            f"{_fmt(capped.short_ttft_median_s, 1e3)} ms with cap {capped.long_prefill_token_threshold} "
            f"(long request TTFT {_fmt(uncapped.long_ttft_median_s, 1e3)} -> {_fmt(capped.long_ttft_median_s, 1e3)} ms; "
            f"errors {len(uncapped.errors) + len(capped.errors)})")


def summary_table(result: dict[str, Any]) -> list[str]:
    """Markdown rows of the sweep (for docs/benchmarks.md)."""
    rows = ["| dataset | N | aggregate tok/s | per-stream tok/s (median) | TTFT p50 / p99 ms | ITL p50 / p99 ms | errors |",
            "|---|---|---|---|---|---|---|"]
    for s in result["levels"]:
        rows.append(f"| {s['dataset']} | {s['concurrency']} | {s['aggregate_output_tok_s']:.1f} | "
                    f"{_fmt(s['per_stream_decode_tok_s_median'])} | {_fmt(s['ttft_p50_s'], 1e3)} / "
                    f"{_fmt(s['ttft_p99_s'], 1e3)} | {_fmt(s['itl_p50_s'], 1e3)} / {_fmt(s['itl_p99_s'], 1e3)} | "
                    f"{s['num_errors']}/{s['num_requests']} |")
    return rows


def parse_int_list(text: str, name: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise ValueError(f"{name}: {text!r} is not a comma-separated list of integers") from None
    if not values:
        raise ValueError(f"{name}: empty list")
    return values


def parse_str_list(text: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in text.split(",") if v.strip())
