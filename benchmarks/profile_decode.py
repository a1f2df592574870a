"""Where a decode step's GPU time goes, kernel by kernel (issues 11 and 12).

`mxserve bench layers` reports per-op times from an eager, host-timed profile, scaled to the
CUDA-graph step. That split is dominated by host overhead ("other" was ~60% of the step on the
H200) and says nothing about the replayed step. This script asks the device instead:

1. `flash`: the bench-layers model (DeepSeek-V4-Flash shapes, random release-format weights, the
   engine's kernel selection from --kernels), one decode step of batch B at context C through
   the engine's static decode path, under torch.profiler with CUDA activities: every kernel's
   device time per step, grouped by kernel name, next to the CUDA-graph replay time of the same
   step. The sum of kernel times against the replay time says how much of the step is gaps.
2. `default`: the packaged default model through `LLM.generate` at batch 1 (`--default-batch`), greedy: tok/s, the
   device time per decode step, and the host functions that take the wall time (cProfile).

    PYTHONPATH=src python benchmarks/profile_decode.py --what flash default \\
        --kernels linear=triton,moe=triton,attention=triton --out $OUT/profile.json

Prints a short table per part; the JSON has every kernel row.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import time
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from mxserve.bench.layers.build import bench_config, layer_plan, random_weights
from mxserve.bench.layers.cache import build_cache_state
from mxserve.bench.layers.kernels import build_bench_model, parse_kernels_option
from mxserve.engine.cuda_graphs import DecodeGraphs
from mxserve.model.decode_batch import DecodeGeometry
from mxserve.testing.tiny_configs import get_config


def kernel_rows(prof: Any, steps: int) -> list[dict[str, Any]]:
    """Device-time rows (us per step, launches per step) by kernel name, largest first."""
    rows = []
    for evt in prof.key_averages():
        dev_us = getattr(evt, "self_device_time_total", 0.0) or 0.0
        if dev_us <= 0:
            continue
        rows.append({"kernel": evt.key[:90], "us_per_step": dev_us / steps, "launches_per_step": evt.count / steps})
    return sorted(rows, key=lambda r: -r["us_per_step"])


def print_rows(rows: list[dict[str, Any]], top: int) -> None:
    total = sum(r["us_per_step"] for r in rows)
    print(f"{'us/step':>9} {'%':>5} {'n/step':>7}  kernel")
    for r in rows[:top]:
        print(f"{r['us_per_step']:9.1f} {100 * r['us_per_step'] / total:5.1f} {r['launches_per_step']:7.1f}  {r['kernel']}")
    print(f"{total:9.1f} 100.0 {sum(r['launches_per_step'] for r in rows):7.1f}  (all kernels)")


def profile_flash(args: argparse.Namespace, overrides: dict[str, str], source: str) -> dict[str, Any]:
    device = torch.device("cuda")
    full = get_config("flash")
    kinds = layer_plan(full, args.layers)
    config = bench_config(full, kinds)
    weights = random_weights(config, device, seed=0)
    max_len = args.context + 1
    model, engine = build_bench_model(config, weights, device=device, numerics="faithful", overrides=overrides,
                                      source=source, max_model_len=max_len)
    out: dict[str, Any] = {"layers": [k.value for k in kinds], "batch": args.batch, "context": args.context,
                           "kernel_reasons": list(engine.reasons)}
    state = build_cache_state(config, model.policy, num_seqs=args.batch, context_len=args.context, new_tokens=1,
                              block_size=64, device=device)
    geometry = DecodeGeometry.for_positions(config, state.block_size, max_len)
    tokens, seqs, positions = list(range(args.batch)), list(range(args.batch)), [args.context] * args.batch
    bucket = next(b for b in (1, 2, 4, 8, 16, 32, 64) if b >= args.batch)
    eager = DecodeGraphs(model, state, geometry, device, capture=False)
    for _ in range(3):  # compiles, allocator
        eager.run(tokens, seqs, positions, bucket)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(args.steps):
            eager.run(tokens, seqs, positions, bucket)
        torch.cuda.synchronize()
    rows = kernel_rows(prof, args.steps)
    graphs = DecodeGraphs(model, state, geometry, device)
    graph_ms = None
    if graphs.run(tokens, seqs, positions, bucket) is not None:
        times = []
        for _ in range(10):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            graphs.run(tokens, seqs, positions, bucket)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        graph_ms = sorted(times)[len(times) // 2] * 1e3
    out.update(kernels=rows, kernel_sum_ms=sum(r["us_per_step"] for r in rows) / 1e3, graph_step_ms=graph_ms,
               graph_status=graphs.unavailable or "replayed")
    print(f"\n[flash] {len(kinds)} layers ({', '.join(out['layers'])}) + head, batch {args.batch}, ctx {args.context}: "
          f"kernel time {out['kernel_sum_ms']:.2f} ms/step, graph replay {graph_ms and round(graph_ms, 2)} ms "
          f"({out['graph_status']})")
    print_rows(rows, args.top)
    return out


def profile_default(args: argparse.Namespace, overrides: dict[str, str]) -> dict[str, Any]:
    """The packaged default model through `LLM.generate`: `--default-batch` copies of one prompt, greedy;
    tok/s counts every row's tokens, the kernel rows are per decode step."""
    from mxserve import LLM, SamplingParams

    rows_n = args.default_batch
    llm = LLM(kernel_overrides=overrides, max_num_seqs=max(rows_n, 1))
    params = SamplingParams(max_tokens=args.new_tokens, temperature=0, ignore_eos=True)
    prompts = ["And God said"] * rows_n
    llm.generate(prompts, params)  # compiles, graph capture
    t0 = time.perf_counter()
    llm.generate(prompts, params)
    wall = time.perf_counter() - t0
    prof_host = cProfile.Profile()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        prof_host.enable()
        llm.generate(prompts, params)
        prof_host.disable()
    rows = kernel_rows(prof, args.new_tokens)
    text = io.StringIO()
    pstats.Stats(prof_host, stream=text).sort_stats("tottime").print_stats(25)
    out = {"batch": rows_n, "tok_s": rows_n * args.new_tokens / wall, "ms_per_token": 1e3 * wall / args.new_tokens,
           "kernel_ms_per_token": sum(r["us_per_step"] for r in rows) / 1e3, "kernels": rows,
           "host_profile": text.getvalue()}
    print(f"\n[default] batch {rows_n}, {args.new_tokens} tokens: {out['tok_s']:.1f} tok/s = {out['ms_per_token']:.2f} "
          f"ms/step; device kernels {out['kernel_ms_per_token']:.2f} ms/step")
    print_rows(rows, min(args.top, 12))
    print("\n".join(text.getvalue().splitlines()[:45]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--what", nargs="+", default=["flash", "default"], choices=["flash", "default"])
    ap.add_argument("--kernels", default="linear=triton,moe=triton,attention=triton,hc=triton",
                    help="op=backend overrides, as `mxserve bench layers --kernels`")
    ap.add_argument("--layers", type=int, default=2, help="Flash layers to build (CSA, HCA, ...)")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--context", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=5, help="profiled decode steps")
    ap.add_argument("--new-tokens", type=int, default=64, help="default model: tokens per generate")
    ap.add_argument("--default-batch", type=int, default=1, help="default model: concurrent requests")
    ap.add_argument("--top", type=int, default=30, help="kernel rows to print")
    ap.add_argument("--out", type=Path, default=Path("profile_decode.json"))
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("profile_decode: needs a CUDA device")
    overrides, source = parse_kernels_option(args.kernels)
    result: dict[str, Any] = {"device": torch.cuda.get_device_name(), "kernels": overrides}
    if "flash" in args.what:
        result["flash"] = profile_flash(args, overrides, source)
        torch.cuda.empty_cache()
    if "default" in args.what:
        result["default"] = profile_default(args, overrides)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
