"""Where a decode step's GPU time goes, kernel by kernel (issues 11 and 12).

`mxserve bench layers` reports per-op times from an eager, host-timed profile, scaled to the
CUDA-graph step. That split is dominated by host overhead ("other" was ~60% of the step on the
H200) and says nothing about the replayed step. This script asks the device instead:

Launch counts and device time are summed over device rows (kernels, memcpy, memset); sessions 4-5
summed every row with device time, which counts most launches twice (the aten op on the host and
its kernel): both sums are printed and kept.

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
import os
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

# The off switches of the decode step's switchable glue fusions (session 6): the step's slot maps
# map by map with one Triton slot map each (session 5's path; MXSERVE_TORCH_PAGED_SLOTS=1 would make
# every slot map ~13 torch ops too, which is not what ran before), the shared expert's SwiGLU as
# torch ops. (The hc_post addend, the inverse RoPE's rounding and the embedding gather have none:
# the same ops inside a launch.)
GLUE_OFF_SWITCHES = ("MXSERVE_PER_MAP_SLOTS", "MXSERVE_TORCH_SHARED_SWIGLU")


def kernel_rows(prof: Any, steps: int) -> list[dict[str, Any]]:
    """Device-time rows (us per step, launches per step) by name, largest first. `on_device`: the row
    is a device activity (a kernel, a memcpy/memset). The other rows with device time are host-side
    events (an aten op, cuLaunchKernelEx) that the profiler credits with their kernels' time: they
    count each launch a second time, so launches and device time are summed over `on_device` rows."""
    from torch.autograd import DeviceType

    rows = []
    for evt in prof.key_averages():
        dev_us = getattr(evt, "self_device_time_total", 0.0) or 0.0
        if dev_us <= 0:
            continue
        rows.append({"kernel": evt.key[:90], "us_per_step": dev_us / steps, "launches_per_step": evt.count / steps,
                     "on_device": evt.device_type != DeviceType.CPU})
    return sorted(rows, key=lambda r: -r["us_per_step"])


def device_totals(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Per step: device launches and their time (device rows only), and the sums over every row as
    sessions 4-5 reported them (host rows included, so each launch counted about twice)."""
    dev = [r for r in rows if r.get("on_device", True)]
    return {"device_launches": sum(r["launches_per_step"] for r in dev),
            "device_ms": sum(r["us_per_step"] for r in dev) / 1e3,
            "all_rows_launches": sum(r["launches_per_step"] for r in rows),
            "all_rows_ms": sum(r["us_per_step"] for r in rows) / 1e3}


def print_rows(rows: list[dict[str, Any]], top: int) -> None:
    total = sum(r["us_per_step"] for r in rows)
    print(f"{'us/step':>9} {'%':>5} {'n/step':>7}  kernel")
    for r in rows[:top]:
        print(f"{r['us_per_step']:9.1f} {100 * r['us_per_step'] / total:5.1f} {r['launches_per_step']:7.1f}  {r['kernel']}")
    print(f"{total:9.1f} 100.0 {sum(r['launches_per_step'] for r in rows):7.1f}  (all kernels)")
    t = device_totals(rows)
    print(f"{1e3 * t['device_ms']:9.1f}       {t['device_launches']:7.1f}  (device rows only: kernels, memcpy, memset)")


def profile_flash(args: argparse.Namespace, overrides: dict[str, str], source: str) -> dict[str, Any]:
    device = torch.device(args.device)
    full = get_config(args.config)
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

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    def measure() -> dict[str, Any]:
        eager = DecodeGraphs(model, state, geometry, device, capture=False)
        for _ in range(3):  # compiles, allocator
            eager.run(tokens, seqs, positions, bucket)
        sync()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(args.steps):
                eager.run(tokens, seqs, positions, bucket)
            sync()
        rows = kernel_rows(prof, args.steps)
        graphs = DecodeGraphs(model, state, geometry, device, capture=device.type == "cuda")
        graph_ms = None
        if device.type == "cuda" and graphs.run(tokens, seqs, positions, bucket) is not None:
            times = []
            for _ in range(20):
                sync()
                t0 = time.perf_counter()
                graphs.run(tokens, seqs, positions, bucket)
                sync()
                times.append(time.perf_counter() - t0)
            graph_ms = sorted(times)[len(times) // 2] * 1e3
        return dict(kernels=rows, kernel_sum_ms=sum(r["us_per_step"] for r in rows) / 1e3, **device_totals(rows),
                    graph_step_ms=graph_ms, graph_status=graphs.unavailable or ("replayed" if graph_ms else "not captured"))

    variants = [("as built", False)]
    if args.ab_glue:  # the same model and caches with the switchable glue fusions off (the ops they replace)
        variants.append((f"glue fusions off ({', '.join(f'{k}=1' for k in GLUE_OFF_SWITCHES)})", True))
    for label, glue_off in variants:
        saved = {k: os.environ.pop(k, None) for k in GLUE_OFF_SWITCHES}
        if glue_off:
            os.environ.update({k: "1" for k in GLUE_OFF_SWITCHES})
        try:
            m = measure()
        finally:
            for k, v in saved.items():
                os.environ.pop(k, None)
                if v is not None:
                    os.environ[k] = v
        if not glue_off:
            out.update(m)
        else:
            out["ab_glue_off"] = m
        print(f"\n[flash, {label}] {len(kinds)} layers ({', '.join(out['layers'])}) + head, batch {args.batch}, "
              f"ctx {args.context}: device {m['device_launches']:.0f} launches {m['device_ms']:.3f} ms/step "
              f"(all rows {m['all_rows_launches']:.0f} / {m['all_rows_ms']:.3f}), graph replay "
              f"{m['graph_step_ms'] and round(m['graph_step_ms'], 3)} ms ({m['graph_status']})")
        print_rows(m["kernels"], args.top)
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
           "kernel_ms_per_token": sum(r["us_per_step"] for r in rows) / 1e3, **device_totals(rows), "kernels": rows,
           "host_profile": text.getvalue()}
    print(f"\n[default] batch {rows_n}, {args.new_tokens} tokens: {out['tok_s']:.1f} tok/s = {out['ms_per_token']:.2f} "
          f"ms/step; device {out['device_launches']:.0f} launches {out['device_ms']:.3f} ms/step (all rows "
          f"{out['all_rows_launches']:.0f} / {out['kernel_ms_per_token']:.2f} ms)")
    print_rows(rows, min(args.top, 12))
    print("\n".join(text.getvalue().splitlines()[:45]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--what", nargs="+", default=["flash", "default"], choices=["flash", "default"])
    ap.add_argument("--kernels", default="linear=triton,moe=triton,attention=triton,hc=triton",
                    help="op=backend overrides, as `mxserve bench layers --kernels`")
    ap.add_argument("--layers", type=int, default=2, help="Flash layers to build (CSA, HCA, ...)")
    ap.add_argument("--config", default="flash", help="flash: the model config (tiny-all: the CPU smoke)")
    ap.add_argument("--device", default="cuda", help="flash: cpu only for the smoke (TRITON_INTERPRET=1)")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--context", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=5, help="profiled decode steps")
    ap.add_argument("--new-tokens", type=int, default=64, help="default model: tokens per generate")
    ap.add_argument("--default-batch", type=int, default=1, help="default model: concurrent requests")
    ap.add_argument("--top", type=int, default=30, help="kernel rows to print")
    ap.add_argument("--ab-glue", action="store_true",
                    help="flash: profile again with the glue fusions' off switches set (step maps map by map, the "
                         "shared expert's SwiGLU as torch ops)")
    ap.add_argument("--out", type=Path, default=Path("profile_decode.json"))
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("profile_decode: needs a CUDA device")
    overrides, source = parse_kernels_option(args.kernels)
    result: dict[str, Any] = {"device": torch.cuda.get_device_name() if args.device == "cuda" else args.device,
                              "kernels": overrides}
    if "flash" in args.what:
        result["flash"] = profile_flash(args, overrides, source)
        torch.cuda.empty_cache()
    if "default" in args.what:
        result["default"] = profile_default(args, overrides)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
