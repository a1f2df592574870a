"""DSpark speculative decoding on the GPU: lossless check and single-stream speed (issue 13).

Writes a random tiny-0731 checkpoint (3-stage DSpark draft), then for K in {0 (off), 3, 5, 7}:
greedy-decodes the same prompts, checks every speculative output equals the plain one, and
reports single-stream decode tok/s and mean acceptance length. A random draft accepts almost
nothing, so this measures verification + draft overhead (the worst case), not the speed-up a
trained draft gives. Each section is guarded: an error is printed and the run continues.

    PYTHONPATH=src python tools/dspark/gpu_check.py [--device cuda] [--new-tokens 48]

Raw results: $OUT/dspark_gpu_check.json (or ./dspark_gpu_check.json without $OUT).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import traceback
from pathlib import Path

import torch

from mxserve import LLM, SamplingParams
from mxserve.testing import random_checkpoint


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--num-prompts", type=int, default=8)
    args = parser.parse_args()
    out_dir = Path(os.environ.get("OUT", "."))
    results: dict = {"device": args.device, "runs": {}}
    ckpt = Path(tempfile.mkdtemp()) / "tiny-0731"
    random_checkpoint("tiny-0731", ckpt, seed=0, progress=False)
    gen = torch.Generator().manual_seed(0)
    prompts = [[0, *torch.randint(2, 499, (int(n),), generator=gen).tolist()]
               for n in torch.randint(8, 60, (args.num_prompts,), generator=gen)]
    params = SamplingParams(max_tokens=args.new_tokens, temperature=0, ignore_eos=True)
    baseline = None
    for k in (0, 3, 5, 7):
        name = "off" if k == 0 else f"K={k}"
        try:
            spec = None if k == 0 else {"method": "dspark", "num_speculative_tokens": k}
            llm = LLM(str(ckpt), device=args.device, max_model_len=256, progress=False, speculative_config=spec)
            llm.generate([prompts[0]], SamplingParams(max_tokens=4, temperature=0))  # warm-up
            outs, decode_s = [], 0.0
            for p in prompts:  # single stream: one request at a time; decode = after the first token
                o = llm.generate([p], params)[0]
                decode_s += o.metrics.finished_time_s - o.metrics.first_token_time_s
                outs.append(o.outputs[0].token_ids)
            stats = llm.engine.spec_decode_stats
            run = {"tok_s": len(prompts) * (args.new_tokens - 1) / decode_s,
                   "stats": stats.as_dict() if stats else None}
            if baseline is None:
                baseline = outs
            else:
                run["identical_to_plain"] = outs == baseline
            results["runs"][name] = run
        except Exception as exc:  # keep going: the lead gets one shot at this script
            traceback.print_exc()
            results["runs"][name] = {"error": repr(exc)}
    (out_dir / "dspark_gpu_check.json").write_text(json.dumps(results, indent=2))
    print(f"{'run':8} {'tok/s':>8} {'accept len':>10} {'identical':>9}")
    for name, run in results["runs"].items():
        if "error" in run:
            print(f"{name:8} ERROR {run['error'][:80]}")
            continue
        mal = run["stats"]["mean_acceptance_length"] if run["stats"] else 1.0
        print(f"{name:8} {run['tok_s']:8.1f} {mal:10.3f} {run.get('identical_to_plain', '-')!s:>9}")


if __name__ == "__main__":
    main()
