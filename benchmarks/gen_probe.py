"""Why was the draft trainer's data pass slow? Batch generation throughput of the default model by
sampling mode and engine size: 64 requests from BOS, 128 tokens each, greedy / seeded sampling /
unseeded sampling, at max_model_len 512 and 4096 (the trainer's engine had 4096, the serving
benchmarks 512), every Triton kernel, 1 GiB of caches. Session 10's data pass ran at ~1.1k tok/s;
the serving sweep's greedy 64-stream decode at ~35k.

    PYTHONPATH=src python benchmarks/gen_probe.py [--device cuda] [--out gen.json]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from mxserve import LLM, SamplingParams
from mxserve.kernels.chooser import ALL_TRITON

MODES = {
    "greedy": lambda i: SamplingParams(max_tokens=128, temperature=0, ignore_eos=True),
    "sampled, seeded": lambda i: SamplingParams(max_tokens=128, temperature=1.0, seed=i, ignore_eos=True),
    "sampled": lambda i: SamplingParams(max_tokens=128, temperature=1.0, ignore_eos=True),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    rows = []
    for max_model_len in (512, 4096):
        llm = LLM(device=args.device, max_model_len=max_model_len, kv_cache_memory=1 << 30, progress=False,
                  kernel_overrides=ALL_TRITON if args.device.startswith("cuda") else {})
        bos = llm.engine.model_config.bos_token_id
        llm.generate([[bos]] * args.requests, [MODES["sampled, seeded"](i) for i in range(args.requests)])  # warm-up
        for mode, make in MODES.items():
            before = dict(llm.engine.runner.eager_stats.counts)
            start = time.perf_counter()
            outs = llm.generate([[bos]] * args.requests, [make(i) for i in range(args.requests)])
            wall = time.perf_counter() - start
            tokens = sum(len(o.outputs[0].token_ids) for o in outs)
            eager = {k: v - before.get(k, 0) for k, v in llm.engine.runner.eager_stats.counts.items()
                     if v != before.get(k, 0)}
            rows.append({"max_model_len": max_model_len, "mode": mode, "tok_s": tokens / wall, "wall_s": wall,
                         "eager_steps": eager})
            print(f"max_model_len {max_model_len:5d}  {mode:<16} {tokens / wall:9.1f} tok/s  eager steps {eager}",
                  flush=True)
        del llm
    if args.out is not None:
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
