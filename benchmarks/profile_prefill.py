"""Where a prefill step's wall time goes (issue 11's b64 ratio, issue 12's TTFT).

`batch_split.py` measured the default model's prefill step at 64-71 ms for ONE 25-token prompt
(session 6) and 77 ms for 64 of them (session 7 call 1): a fixed cost that does not grow with the
work, so it is host time (Python, launches, syncs) or a device kernel whose cost does not depend
on the tokens. This script separates the two: the median wall of `generate(max_tokens=1)` calls
(after warm-up), then one call under the CUDA profiler (device time per kernel) and cProfile
(host time per function).

    PYTHONPATH=src python benchmarks/profile_prefill.py --batches 1,64 --out $OUT/profile_prefill.json
    PYTHONPATH=src python benchmarks/profile_prefill.py --device cpu --batches 1 --repeats 1   # smoke
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
import time
from pathlib import Path

import torch
from e2e_vs_transformers import prompts_for
from profile_decode import device_totals, kernel_rows, print_rows
from torch.profiler import ProfilerActivity, profile

from mxserve import LLM, SamplingParams
from mxserve.default_model import default_model_path


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def prefill_walls(llm: LLM, prompts: list[list[int]], device: str, repeats: int) -> list[float]:
    params = SamplingParams(temperature=0, max_tokens=1, ignore_eos=True)
    walls = []
    for _ in range(repeats):
        _sync(device)
        t0 = time.perf_counter()
        llm.generate(prompts, params)
        _sync(device)
        walls.append(time.perf_counter() - t0)
    return walls


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batches", default="1,64")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--top", type=int, default=16)
    ap.add_argument("--kernels", default="linear=triton,moe=triton,attention=triton,hc=triton")
    ap.add_argument("--max-model-len", type=int, default=None, help="the LLM's max_model_len (default: the engine's)")
    ap.add_argument("--out", type=Path, default=Path("profile_prefill.json"))
    args = ap.parse_args()
    overrides = dict(item.split("=", 1) for item in args.kernels.split(",") if item) if args.device != "cpu" else {}
    results = []
    for batch in [int(b) for b in args.batches.split(",")]:
        extra = {"max_model_len": args.max_model_len} if args.max_model_len else {}
        llm = LLM(kernel_overrides=overrides, max_num_seqs=max(batch, 1), device=args.device, **extra)
        prompts = prompts_for(default_model_path(), batch)
        prefill_walls(llm, prompts, args.device, 2)  # compiles, autotuning
        walls = prefill_walls(llm, prompts, args.device, args.repeats)
        host = cProfile.Profile()
        activities = [ProfilerActivity.CUDA] if args.device.startswith("cuda") else [ProfilerActivity.CPU]
        with profile(activities=activities) as prof:
            host.enable()
            prefill_walls(llm, prompts, args.device, 1)
            host.disable()
        rows = kernel_rows(prof, 1)
        text = io.StringIO()
        pstats.Stats(host, stream=text).sort_stats("tottime").print_stats(20)
        pstats.Stats(host, stream=text).sort_stats("cumulative").print_stats(30)
        median_ms = 1e3 * statistics.median(walls)
        print(f"\n[prefill] {batch} prompts of {len(prompts[0])} tokens: wall median {median_ms:.1f} ms "
              f"(min {1e3 * min(walls):.1f}); device {device_totals(rows)['device_ms']:.2f} ms in "
              f"{device_totals(rows)['device_launches']:.0f} launches")
        print_rows(rows, args.top)
        print("\n".join(line[:160] for line in text.getvalue().splitlines() if line.strip())[:6000])
        results.append({"batch": batch, "prompt_tokens": len(prompts[0]), "wall_ms": [1e3 * w for w in walls],
                        "wall_median_ms": median_ms, **device_totals(rows), "kernels": rows,
                        "host_profile": text.getvalue()})
        del llm
    args.out.write_text(json.dumps({"device": args.device, "results": results}, indent=1))


if __name__ == "__main__":
    main()
