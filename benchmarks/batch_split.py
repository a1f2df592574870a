"""Where a batch's wall time goes: the prefill step against the decode steps.

`e2e_vs_transformers.py` times whole `generate` calls, prefill included. At 64 requests the step
rate it implies (~20 ms a token) is far above the decode graph's device time (~2.9 ms), so this
script separates the two on the packaged default model: one call with `max_tokens=1` (the prefill
step, which samples the first token) and one with `max_tokens=1 + N` (the same prefill plus N
decode steps); the difference over N is the decode step. Each is the median of `--repeats` calls
after a warm-up call (compiles, graph capture).

    PYTHONPATH=src python benchmarks/batch_split.py --out $OUT/batch_split.json            # GPU
    PYTHONPATH=src python benchmarks/batch_split.py --device cpu --batches 2 --decode-steps 2 --repeats 1   # smoke
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
from e2e_vs_transformers import prompts_for

from mxserve import LLM, SamplingParams
from mxserve.default_model import default_model_path
from mxserve.engine.cuda_graphs import bucket_for


def timed_generate(llm: LLM, prompts: list[list[int]], max_tokens: int, device: str, repeats: int) -> float:
    """Median wall seconds of `repeats` greedy generate calls of `max_tokens` tokens per prompt."""
    params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    times = []
    for _ in range(repeats):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        outs = llm.generate(prompts, params)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        if any(len(o.outputs[0].token_ids) != max_tokens for o in outs):
            raise RuntimeError(f"asked {max_tokens} tokens per prompt, got a different count")
    return statistics.median(times)


def graph_device_ms(llm: LLM, batch: int) -> float | None:
    """Median device ms of one replay of the decode graph the batch used (5 rounds of 20 back-to-back
    replays, CUDA events): the step without the host, far steadier between processes than the walls
    (and, unlike a profiler's kernel sum, not inflated by kernels that launch early and wait). None
    on the CPU or when no graph was captured."""
    graphs = llm.engine.runner.decode_graphs
    if graphs is None:
        return None
    seconds = graphs.replay_device_seconds(bucket_for(batch), replays=20, rounds=5)
    return None if seconds is None else 1e3 * statistics.median(seconds)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batches", default="1,64", help="comma-separated concurrent request counts")
    ap.add_argument("--decode-steps", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--kernels", default="linear=triton,moe=triton,attention=triton,hc=triton")
    ap.add_argument("--out", type=Path, default=Path("batch_split.json"))
    args = ap.parse_args()
    overrides = dict(item.split("=", 1) for item in args.kernels.split(",") if item) if args.device != "cpu" else {}
    rows = []
    for batch in [int(b) for b in args.batches.split(",")]:
        llm = LLM(kernel_overrides=overrides, max_num_seqs=max(batch, 1), device=args.device)
        prompts = prompts_for(default_model_path(), batch)
        timed_generate(llm, prompts, 4, args.device, 1)  # warm-up
        prefill_s = timed_generate(llm, prompts, 1, args.device, args.repeats)
        total_s = timed_generate(llm, prompts, 1 + args.decode_steps, args.device, args.repeats)
        step_ms = 1e3 * (total_s - prefill_s) / args.decode_steps
        rows.append({"batch": batch, "prompt_tokens": len(prompts[0]), "prefill_ms": 1e3 * prefill_s,
                     "decode_step_ms": step_ms, "decode_tok_s": batch * 1e3 / step_ms,
                     "generate_128_tok_s_implied": batch * 128 / (prefill_s + 127 * step_ms / 1e3),
                     "graph_device_ms": graph_device_ms(llm, batch)})
        del llm
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"device": args.device, "kernels": args.kernels, "rows": rows}, indent=1))
    print(f"{'batch':>5} {'prefill ms':>10} {'decode ms/step':>14} {'decode tok/s':>12} {'128-token generate tok/s':>24} "
          f"{'graph device ms':>15}")
    for r in rows:
        dev = "-" if r["graph_device_ms"] is None else f"{r['graph_device_ms']:.3f}"
        print(f"{r['batch']:5d} {r['prefill_ms']:10.1f} {r['decode_step_ms']:14.2f} {r['decode_tok_s']:12.0f} "
              f"{r['generate_128_tok_s_implied']:24.0f} {dev:>15}")


if __name__ == "__main__":
    main()
