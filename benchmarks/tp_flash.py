"""Full-size DeepSeek-V4-Flash under tensor parallelism (issue 15, deliverable 2), through the engine.

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \
    PYTHONPATH=src python benchmarks/tp_flash.py --ckpt-dir /data/flash-random --tp 2 \
        --kernels linear=triton,attention=triton,moe=reference --layers-json layers.json --out tp_flash.json

1. Writes a random-weight checkpoint of `--config` (all main layers and the MTP block, release
   formats: FP8 128x128 dense, MXFP4 experts, BF16 where the release has BF16) with
   `mxserve.testing.random_checkpoint` to `--ckpt-dir`, unless a complete one of the same config
   is already there (reused: writing Flash's ~160 GB takes minutes). Free disk is checked first.
   The SHA-256 manifest the writer leaves is removed by default: the engine would re-hash every
   byte at start-up (~2 min at Flash size) to prove what was written seconds before.
2. Starts `LLMEngine` with `tensor_parallel_size=--tp` (one process per GPU, NCCL; gloo on the
   CPU): load time, each rank's weight / resident / free bytes, GPU memory in use per device
   (nvidia-smi), and the KV-cache start-up line (capacity in tokens).
3. Through the engine's own steps (scheduler, driver -> ranks, sampler): prefill tok/s of one
   `--prefill-tokens` prompt (one step; run twice, the first compiles), then for each batch B in
   `--batches`, B requests of `--context` random prompt tokens are prefilled and then
   `--decode-steps` decode steps are timed: decode tok/s = B x steps / time.
4. Compares batch-1 decode with the single-GPU projection of `mxserve bench layers` (its JSON,
   `--layers-json`) and with the published anchor (docs/benchmarks.md), prints a table, writes JSON.

Refuses (exit 2, one line) when fewer than `--tp` GPUs are visible, the disk is too small, or the
weights plus the Triton MoE's stacked expert copy cannot fit one GPU. NVLink multicast stays off:
the three variables above are set in this process's environment before anything starts, so every
rank (spawned with that environment) inherits them.

Decode runs eager under TP: the engine's TP driver hands the runner a `RemoteModel` on the
driver's CPU, which has no capturable decode path (`TensorParallelModel.forward` is the per-chunk
path and checks token ids on the host), so `graph_decode` in the JSON says so and carries the
runner's recorded reasons.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

NO_MULTICAST_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
os.environ.update(NO_MULTICAST_ENV)  # before torch / NCCL load; spawned ranks inherit the environment

import torch  # noqa: E402

from mxserve.config import ModelConfig  # noqa: E402
from mxserve.distributed import ParallelConfig, ShardingPlan  # noqa: E402
from mxserve.distributed.shards import linear_shard_nbytes, planned_rank_nbytes  # noqa: E402
from mxserve.model.checkpoint import build_inventory  # noqa: E402
from mxserve.model.checkpoint.manifest import MANIFEST_NAME  # noqa: E402
from mxserve.testing.tiny_configs import get_config  # noqa: E402

EXIT_REFUSED = 2
_DTYPE_BYTES = {"BF16": 2, "F32": 4, "I64": 8, "F8_E4M3": 1, "F8_E8M0": 1, "I8": 1, "U8": 1}
DISK_MARGIN = 1.03  # safetensors headers, index, config: well under 1 %; the rest is slack
TRITON_MOE = ("triton", "triton-w4a8", "triton-repack")
# Output room per decode request: the requests prefilled first decode while the rest of the batch
# still prefills (64 x 4K prompts take 32 steps at an 8K budget), so they need more than the timed steps.
DECODE_ROOM = 256

# Published anchor quoted in docs/benchmarks.md (field-notes §7): a 304B DeepSeek checkpoint served
# on ONE MI300X with DSpark-7 speculative decoding. Not an H200 and not plain decode: a scale marker only.
PUBLISHED_ANCHOR = {"source": "docs/benchmarks.md / field-notes §7: 304B model, one MI300X, DSpark-7 speculative decoding",
                    "decode_tok_s": {1: 168.6}, "aggregate_tok_s": {8: 542.0, 64: 830.0}}


class Refused(Exception):
    """The run cannot happen here (too few GPUs, too little disk or GPU memory): exit 2, one line."""


@dataclass(frozen=True)
class Options:
    ckpt_dir: Path
    config: str = "flash"
    tp: int = 2
    expert_parallel: bool = False
    device: str = "cuda"
    numerics: str = "faithful"
    kernels: str | None = "linear=triton,attention=triton,moe=reference"
    context: int = 4096
    batches: tuple[int, ...] = (1, 8, 64)
    prefill_tokens: int = 8192
    decode_steps: int = 16
    warmup_steps: int = 2
    layers_json: Path | None = None
    out: Path = Path("tp_flash.json")
    seed: int = 0
    deadline_s: float = 480.0  # no scenario starts later than this after the run began (a device call's limit)
    keep_manifest: bool = False
    block_size: int = 64


# ---------------------------------------------------------------------- sizes and pre-flight
def checkpoint_nbytes(config: ModelConfig) -> int:
    """Bytes of the tensors `random_checkpoint` writes for `config` (every release tensor, MTP included)."""
    inventory = build_inventory(config)
    total = 0
    for spec in inventory.linears.values():
        for _, dtype, shape in spec.release_tensors():
            numel = 1
            for d in shape:
                numel *= d
            total += numel * _DTYPE_BYTES[dtype]
    for spec in inventory.tensors.values():
        numel = 1
        for d in spec.shape:
            numel *= d
        total += numel * _DTYPE_BYTES[spec.dtype]
    return total


def routed_expert_nbytes(config: ModelConfig, plan: ShardingPlan, rank: int) -> int:
    """Packed bytes of the routed experts `rank` multiplies (what the Triton MoE's stacked copy duplicates)."""
    inventory = build_inventory(config)
    total = 0
    for prefix, spec in inventory.linears.items():
        if ".experts." not in prefix or prefix.startswith("mtp."):
            continue
        shard = plan.shard(prefix, rank)
        if shard is not None:
            total += linear_shard_nbytes(spec, shard)
    return total


def _existing_parent(path: Path) -> Path:
    path = path.absolute()
    while not path.exists():
        path = path.parent
    return path


def is_complete_checkpoint(path: Path, config: ModelConfig) -> bool:
    """A checkpoint this script finished writing for `config` (its marker file names the config)."""
    marker = path / ".tp_flash-complete.json"
    return marker.exists() and json.loads(marker.read_text()).get("config") == config.to_dict()


def preflight(opts: Options, config: ModelConfig, overrides: dict[str, str]) -> dict[str, Any]:
    """Refused when this machine cannot run it; else the planned sizes (for the JSON)."""
    if opts.device == "cuda":
        visible = torch.cuda.device_count()
        if visible < opts.tp:
            raise Refused(f"--tp {opts.tp} needs {opts.tp} GPUs; torch sees {visible}")
    try:
        plan = ShardingPlan.build(config, ParallelConfig(opts.tp, opts.expert_parallel))
    except ValueError as exc:  # ShardingError: the config cannot split that way
        raise Refused(str(exc)) from None
    inventory = build_inventory(config)
    rank_bytes = [planned_rank_nbytes(inventory, plan, r) for r in range(opts.tp)]
    stacked = [routed_expert_nbytes(config, plan, r) if overrides.get("moe") in TRITON_MOE else 0
               for r in range(opts.tp)]
    needed = int(checkpoint_nbytes(config) * DISK_MARGIN)
    sizes = {"checkpoint_bytes": checkpoint_nbytes(config), "rank_weight_bytes": rank_bytes,
             "triton_moe_stacked_copy_bytes": stacked}
    if not is_complete_checkpoint(opts.ckpt_dir, config):
        free = shutil.disk_usage(_existing_parent(opts.ckpt_dir)).free
        if free < needed:
            raise Refused(f"the {opts.config} checkpoint needs {needed / 1e9:.1f} GB at {opts.ckpt_dir}; "
                          f"{_existing_parent(opts.ckpt_dir)} has {free / 1e9:.1f} GB free")
        sizes["disk_free_bytes"] = free
    if opts.device == "cuda":
        gpu_bytes = min(torch.cuda.get_device_properties(i).total_memory for i in range(opts.tp))
        worst = max(w + s for w, s in zip(rank_bytes, stacked, strict=True))
        sizes["gpu_total_bytes"] = gpu_bytes
        if worst > gpu_bytes:
            raise Refused(
                f"a rank needs {worst / 1e9:.1f} GB ({max(rank_bytes) / 1e9:.1f} GB of shards + "
                f"{max(stacked) / 1e9:.1f} GB for the Triton MoE's stacked expert copy, built on first use) on a "
                f"{gpu_bytes / 1e9:.1f} GB GPU; use moe=reference, more ranks, or stack the experts at load")
    return sizes


# ---------------------------------------------------------------------- steps
def write_checkpoint(opts: Options, config: ModelConfig, echo) -> dict[str, Any]:
    from mxserve.testing.random_checkpoint import random_checkpoint

    if is_complete_checkpoint(opts.ckpt_dir, config):
        echo(f"reusing the complete {opts.config} checkpoint at {opts.ckpt_dir}")
        return {"path": str(opts.ckpt_dir), "reused": True, "write_s": None,
                "bytes": sum(f.stat().st_size for f in opts.ckpt_dir.iterdir() if f.is_file())}
    if opts.ckpt_dir.exists():
        shutil.rmtree(opts.ckpt_dir)  # a half-written one from a run that was cut short
    start = time.perf_counter()
    random_checkpoint(config, opts.ckpt_dir, seed=opts.seed, progress=sys.stderr.isatty())
    write_s = time.perf_counter() - start
    manifest = opts.ckpt_dir / MANIFEST_NAME
    if not opts.keep_manifest and manifest.exists():
        manifest.unlink()  # see the module docstring: re-hashing ~160 GB at start-up proves nothing here
    (opts.ckpt_dir / ".tp_flash-complete.json").write_text(json.dumps({"config": config.to_dict(), "seed": opts.seed}))
    nbytes = sum(f.stat().st_size for f in opts.ckpt_dir.iterdir() if f.is_file())
    echo(f"wrote {nbytes / 1e9:.1f} GB to {opts.ckpt_dir} in {write_s:.0f} s ({nbytes / 1e9 / write_s:.2f} GB/s)")
    return {"path": str(opts.ckpt_dir), "reused": False, "write_s": write_s, "bytes": nbytes,
            "manifest_kept": opts.keep_manifest}


def gpu_memory_used() -> dict[str, Any]:
    """Memory in use per GPU as nvidia-smi sees it (every process: the ranks' allocations + contexts)."""
    if shutil.which("nvidia-smi") is None:
        return {"error": "nvidia-smi not found"}
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index,memory.used,memory.total", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, check=True, timeout=30).stdout
    except (subprocess.SubprocessError, OSError) as exc:
        return {"error": f"nvidia-smi failed: {exc}"}
    rows = [line.split(",") for line in out.strip().splitlines()]
    return {"used_bytes": [int(r[1]) * 2**20 for r in rows], "total_bytes": [int(r[2]) * 2**20 for r in rows]}


def start_engine(opts: Options, overrides: dict[str, str]):
    from mxserve.config.engine_config import EngineConfig
    from mxserve.engine.llm_engine import LLMEngine

    max_model_len = max(opts.prefill_tokens, opts.context + DECODE_ROOM) + 1
    config = EngineConfig(model=str(opts.ckpt_dir), device=opts.device, numerics=opts.numerics,
                          max_model_len=max_model_len, max_num_seqs=max(opts.batches),
                          max_num_batched_tokens=max(opts.prefill_tokens, opts.context),
                          long_prefill_token_threshold=max(opts.prefill_tokens, opts.context),
                          block_size=opts.block_size, kernel_overrides=overrides, seed=opts.seed,
                          tensor_parallel_size=opts.tp, enable_expert_parallel=opts.expert_parallel)
    start = time.perf_counter()
    engine = LLMEngine(config, progress=False)
    return engine, time.perf_counter() - start


def _prompts(vocab: int, count: int, length: int, seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(2, vocab, (count, length), generator=g).tolist()


def run_prefill(engine, opts: Options, tag: str) -> dict[str, Any]:
    """One prompt of `prefill_tokens`, max_tokens=1: the step(s) that prefill it, timed."""
    from mxserve.engine.sampling_params import SamplingParams

    vocab = engine.model_config.vocab_size
    [prompt] = _prompts(vocab, 1, opts.prefill_tokens, opts.seed + 7)
    engine.add_request(tag, prompt, SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True))
    steps, tokens = [], []
    while engine.has_unfinished_requests():
        start = time.perf_counter()
        outs = engine.step()
        steps.append(time.perf_counter() - start)
        tokens += [t for o in outs for t in o.outputs[0].token_ids]
    total = sum(steps)
    return {"name": f"prefill {opts.prefill_tokens}", "phase": "prefill", "batch": 1, "context": 0,
            "tokens": opts.prefill_tokens, "steps": len(steps), "step_s": steps, "time_s": total,
            "tok_s": opts.prefill_tokens / total, "token_ids": [tokens]}


def run_decode(engine, opts: Options, batch: int) -> dict[str, Any]:
    """`batch` prompts of `context` tokens prefilled, `warmup_steps` decode steps, then `decode_steps` timed."""
    from mxserve.engine.sampling_params import SamplingParams

    vocab = engine.model_config.vocab_size
    prompts = _prompts(vocab, batch, opts.context, opts.seed + 100 + batch)
    room = engine.max_model_len - opts.context - 1
    if room < opts.warmup_steps + opts.decode_steps + 1:
        raise ValueError(f"max_model_len {engine.max_model_len} leaves {room} output tokens after a {opts.context}-token "
                         f"prompt; {opts.warmup_steps + opts.decode_steps + 1} are needed")
    params = SamplingParams(max_tokens=room, temperature=0.0, ignore_eos=True)
    ids = [f"b{batch}-{i}" for i in range(batch)]
    for rid, prompt in zip(ids, prompts, strict=True):
        engine.add_request(rid, prompt, params)
    generated: dict[str, list[int]] = {rid: [] for rid in ids}

    def step() -> int:
        outs = engine.step()
        for o in outs:
            generated[o.request_id] = list(o.outputs[0].token_ids)
        return len(outs)

    start = time.perf_counter()
    prefill_steps = 0
    while any(not toks for toks in generated.values()):  # every request has its first token: all decode now
        step()
        prefill_steps += 1
    prefill_s = time.perf_counter() - start
    for _ in range(opts.warmup_steps):
        step()
    times, partial = [], 0
    for _ in range(opts.decode_steps):
        start = time.perf_counter()
        updated = step()
        times.append(time.perf_counter() - start)
        partial += updated != batch  # a step that did not advance every sequence is no batch-B decode step
    for rid in ids:  # stop them here: the next scenario starts from empty caches
        engine.abort_request(rid)
    total = sum(times)
    return {"name": f"decode b{batch} ctx{opts.context}", "phase": "decode", "batch": batch, "context": opts.context,
            "prefill_s": prefill_s, "prefill_steps": prefill_steps, "steps": len(times), "step_s": times,
            "step_median_ms": statistics.median(times) * 1e3, "time_s": total, "tok_s": batch * len(times) / total,
            "per_stream_tok_s": len(times) / total, "steps_not_full_batch": partial,
            "token_ids": [generated[rid] for rid in ids]}


def graph_decode_status(engine) -> dict[str, Any]:
    runner = engine.runner
    used = getattr(runner, "decode_graphs", None) is not None
    reason = None
    if not used and engine.executor is not None:
        reason = ("not under TP: the TP driver's runner holds a RemoteModel on the driver's CPU (no decode_forward, "
                  "not capturable); the ranks run TensorParallelModel.forward, the per-chunk path, which also checks "
                  "token ids on the host (int(batch.token_ids.max()))")
    elif not used:
        reason = "one process: see runner_eager_reasons"
    return {"used": used, "reason": reason, "runner_eager_reasons": dict(runner.eager_stats.counts)}


def compare(result: dict[str, Any], layers_json: Path | None, context: int) -> dict[str, Any]:
    measured = {row["batch"]: row for row in result["scenarios"] if row.get("phase") == "decode" and "error" not in row}
    out: dict[str, Any] = {"published_anchor": PUBLISHED_ANCHOR}
    b1 = measured.get(1)
    if layers_json is None:
        out["single_gpu_projection"] = {"error": "no --layers-json given (run `mxserve bench layers` first)"}
    elif not layers_json.exists():
        out["single_gpu_projection"] = {"error": f"{layers_json} does not exist"}
    else:
        projections = json.loads(layers_json.read_text()).get("projection", [])
        if not projections:
            out["single_gpu_projection"] = {"error": f"{layers_json} holds no projection"}
        else:
            p = min(projections, key=lambda q: abs(q["context_len"] - context))
            out["single_gpu_projection"] = {
                "source": str(layers_json), "context_len": p["context_len"], "tok_s": p["tok_s"],
                "timing": p.get("timing"), "label": p.get("label"),
                "tp_b1_over_projection": b1["tok_s"] / p["tok_s"] if b1 else None}
    out["tp_over_anchor"] = {b: measured[b]["tok_s"] / v for b, v in
                             {**PUBLISHED_ANCHOR["decode_tok_s"], **PUBLISHED_ANCHOR["aggregate_tok_s"]}.items()
                             if b in measured}
    return out


# ---------------------------------------------------------------------- the run
def run(opts: Options, echo=print) -> dict[str, Any]:
    from mxserve.bench.layers.kernels import parse_kernels_option

    run_start = time.perf_counter()
    try:
        config = get_config(opts.config)
        overrides, source = parse_kernels_option(opts.kernels)
    except ValueError as exc:  # ConfigError is a ValueError too
        raise Refused(str(exc)) from None
    result: dict[str, Any] = {"meta": {
        "date_utc": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S"), "command": " ".join(sys.argv),
        "python": platform.python_version(), "torch": torch.__version__, "options": {
            k: (str(v) if isinstance(v, Path) else v) for k, v in opts.__dict__.items()},
        "kernel_overrides": overrides, "kernel_source": source,
        "env": {k: os.environ.get(k) for k in NO_MULTICAST_ENV},
        "devices": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if opts.device == "cuda"
        else [platform.processor() or "cpu"]}}
    result["sizes"] = preflight(opts, config, overrides)
    echo(f"{opts.config}: checkpoint {result['sizes']['checkpoint_bytes'] / 1e9:.1f} GB; planned shards per rank "
         f"{[round(b / 1e9, 2) for b in result['sizes']['rank_weight_bytes']]} GB")
    result["checkpoint"] = write_checkpoint(opts, config, echo)
    _write(result, opts.out)  # a run cut short later still leaves the write time
    engine, load_s = start_engine(opts, overrides)
    try:
        executor = engine.executor
        reports = executor.reports if executor is not None else ()
        result["load"] = {"load_s": load_s, "ranks": [
            {"rank": r.rank, "device": r.device, "weight_bytes": r.weight_bytes, "resident_bytes": r.resident_bytes,
             "free_device_bytes": r.free_device_bytes, "kernel_log": list(r.kernel_log)} for r in reports],
            "gpu_memory_after_load": gpu_memory_used() if opts.device == "cuda" else None}
        plan = engine.cache_plan
        result["kv_cache"] = {"startup_line": plan.startup_line(), "capacity_tokens": plan.capacity_tokens,
                              "bytes_per_token": plan.bytes_per_token, "total_bytes": plan.total_bytes}
        echo(f"engine up in {load_s:.1f} s; {plan.startup_line()}")
        for r in result["load"]["ranks"]:
            echo(f"  rank {r['rank']} ({r['device']}): {r['weight_bytes'] / 1e9:.2f} GB of shards, "
                 f"{r['resident_bytes'] / 1e9:.2f} GB resident")
        result["scenarios"] = []
        _write(result, opts.out)
        jobs = [("prefill-cold", lambda: run_prefill(engine, opts, "prefill-cold")),
                ("prefill", lambda: run_prefill(engine, opts, "prefill"))]
        jobs += [(f"decode b{b}", lambda b=b: run_decode(engine, opts, b)) for b in opts.batches]
        for name, job in jobs:
            if time.perf_counter() - run_start > opts.deadline_s:
                result["scenarios"].append({"name": name, "error": f"skipped: past the {opts.deadline_s:.0f} s deadline"})
                echo(f"{name}: skipped (time budget)")
                continue
            try:
                row = job()
            except Exception as exc:  # one scenario (e.g. out of memory) must not lose the others
                row = {"name": name, "error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:400]}"}
                _drain_quietly(engine)
            if name == "prefill-cold" and "error" not in row:
                row = {**row, "name": f"{row['name']} (cold: compiles)", "phase": "prefill-cold"}
            if opts.device == "cuda":
                row["gpu_memory_after"] = gpu_memory_used()
            result["scenarios"].append(row)
            echo(_line(row))
            _write(result, opts.out)
        result["graph_decode"] = graph_decode_status(engine)
        result["wall_s"] = time.perf_counter() - run_start
    finally:
        engine.close()
    result["comparison"] = compare(result, opts.layers_json, opts.context)
    for line in table(result):
        echo(line)
    _write(result, opts.out)
    return result


def _drain_quietly(engine) -> None:
    for rid in list(getattr(engine, "_requests", {})):
        engine.abort_request(rid)
    try:
        engine.step()  # lets the runner release the aborted requests' tables
    except Exception as exc:  # the ranks may be gone after the failure; the next scenario will say so
        logging.getLogger("mxserve.bench").warning("cleanup step failed: %s", exc)


def _line(row: dict[str, Any]) -> str:
    if "error" in row:
        return f"{row['name']}: {row['error']}"
    if row["phase"].startswith("prefill"):
        return f"{row['name']}: {row['tok_s']:.0f} tok/s ({row['time_s']:.2f} s, {row['steps']} step(s))"
    return (f"{row['name']}: {row['tok_s']:.1f} tok/s ({row['per_stream_tok_s']:.1f} per stream, step median "
            f"{row['step_median_ms']:.1f} ms; prefill of the batch {row['prefill_s']:.1f} s)")


def table(result: dict[str, Any]) -> list[str]:
    lines = [f"{'scenario':<26} {'tok/s':>10} {'per stream':>11} {'step ms':>9}"]
    for row in result.get("scenarios", []):
        if "error" in row:
            lines.append(f"{row['name']:<26} {'-':>10} {'-':>11} {'-':>9}  {row['error'][:80]}")
        elif row["phase"].startswith("prefill"):
            lines.append(f"{row['name']:<26} {row['tok_s']:>10.0f} {'':>11} {row['time_s'] * 1e3 / row['steps']:>9.1f}")
        else:
            lines.append(f"{row['name']:<26} {row['tok_s']:>10.1f} {row['per_stream_tok_s']:>11.1f} "
                         f"{row['step_median_ms']:>9.1f}")
    comp = result.get("comparison", {})
    proj = comp.get("single_gpu_projection", {})
    if "tok_s" in proj:
        ratio = proj.get("tp_b1_over_projection")
        lines.append(f"single-GPU projection (bench layers, ctx {proj['context_len']}): {proj['tok_s']:.1f} tok/s; "
                     + (f"TP batch 1 / projection = {ratio:.2f}" if ratio is not None else "no batch-1 measurement"))
    elif proj:
        lines.append(f"single-GPU projection: {proj.get('error')}")
    for batch, ratio in comp.get("tp_over_anchor", {}).items():
        lines.append(f"batch {batch}: {ratio:.2f}x the published anchor ({PUBLISHED_ANCHOR['source']})")
    graph = result.get("graph_decode")
    if graph and not graph["used"]:
        lines.append(f"CUDA-graph decode: {graph['reason']}")
    return lines


def _write(result: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1, default=str))


# ---------------------------------------------------------------------- command line
def parse_args(argv: list[str] | None) -> Options:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ckpt-dir", type=Path, required=True, help="where the random checkpoint is written (or reused)")
    p.add_argument("--config", default="flash", help="a name in mxserve.testing.TINY_CONFIGS (default flash)")
    p.add_argument("--tp", type=int, default=2)
    p.add_argument("--expert-parallel", action="store_true")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--numerics", default="faithful", choices=("faithful", "exact"))
    p.add_argument("--kernels", default=Options.kernels,
                   help="op=backend[,...] as MXSERVE_KERNEL_OVERRIDES; 'none' = the engine's defaults")
    p.add_argument("--context", type=int, default=4096)
    p.add_argument("--batches", default="1,8,64")
    p.add_argument("--prefill-tokens", type=int, default=8192)
    p.add_argument("--decode-steps", type=int, default=16)
    p.add_argument("--warmup-steps", type=int, default=2)
    p.add_argument("--layers-json", type=Path, default=None, help="`mxserve bench layers` JSON to compare with")
    p.add_argument("--out", type=Path, default=Path("tp_flash.json"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--deadline", type=float, default=480.0,
                   help="seconds from the start after which no new scenario starts (the JSON so far is kept)")
    p.add_argument("--keep-manifest", action="store_true", help="keep the SHA-256 manifest (the engine re-hashes it)")
    a = p.parse_args(argv)
    batches = tuple(int(b) for b in a.batches.split(",") if b)
    if a.tp < 1 or not batches or min(batches) < 1 or a.decode_steps < 1 or a.context < 1 or a.prefill_tokens < 1:
        p.error("--tp, --batches, --decode-steps, --context and --prefill-tokens must be positive")
    return Options(a.ckpt_dir, a.config, a.tp, a.expert_parallel, a.device, a.numerics,
                   None if a.kernels == "none" else a.kernels, a.context, batches, a.prefill_tokens, a.decode_steps,
                   a.warmup_steps, a.layers_json, a.out, a.seed, a.deadline, a.keep_manifest)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    opts = parse_args(argv)
    try:
        run(opts)
    except Refused as exc:
        print(f"refused: {' '.join(str(exc).split())}", file=sys.stderr)
        return EXIT_REFUSED
    return 0


if __name__ == "__main__":
    sys.exit(main())
