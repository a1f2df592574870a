"""Issue 11 on the GPU: the whole default model with every Triton kernel selected (linear, MoE,
attention) against the reference kernels, greedy, faithful numerics, through the engine.

For `--prompts` windows of the packaged `heldout_sample.txt` (BOS + 24 tokens each), both engines
generate `--num-new` greedy tokens (ignore_eos) in one batch. Per prompt: tokens equal or the
first divergence, and there the reference's log-probability gap between its own choice and the
Triton engine's choice (a flip under 0.1 nat is a near tie, not a bug). Also the wall time of
each engine's generate (eager decode: this is not the serving speed; see docs/benchmarks.md).

    PYTHONPATH=src python benchmarks/model_parity.py --out $OUT/model_parity.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from mxserve import LLM, SamplingParams
from mxserve.default_model import default_model_path
from mxserve.engine.tokenizer import Tokenizer

ALL_TRITON = {"linear": "triton", "moe": "triton", "attention": "triton"}
NEAR_TIE_NATS = 0.1


def text_prompts(model_dir: Path, count: int, length: int) -> list[list[int]]:
    tok = Tokenizer.from_dir(model_dir)
    ids = tok.encode((model_dir / "heldout_sample.txt").read_text(encoding="utf-8"))
    step = max(1, (len(ids) - length) // count)
    return [[tok.bos_token_id, *ids[i * step:i * step + length]] for i in range(count)]


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def run(model_dir: Path, prompts: list[list[int]], num_new: int, overrides: dict, device: str) -> tuple[list, float]:
    llm = LLM(str(model_dir), device=device, numerics="faithful", kernel_overrides=overrides, progress=False,
              max_model_len=512)
    params = SamplingParams(temperature=0, max_tokens=num_new, ignore_eos=True, logprobs=2)
    llm.generate(prompts[:1], SamplingParams(temperature=0, max_tokens=4, ignore_eos=True))  # compile, warm up
    _sync(device)
    t0 = time.perf_counter()
    outs = llm.generate(prompts, params)
    _sync(device)
    return [o.outputs[0] for o in outs], time.perf_counter() - t0


def compare(ref, tri) -> dict:
    first = next((i for i, (a, b) in enumerate(zip(ref.token_ids, tri.token_ids, strict=True)) if a != b), None)
    row = {"tokens_equal": first is None, "first_divergence": first}
    if first is not None:
        lp = ref.logprobs[first]
        choice = tri.token_ids[first]
        top = sorted(lp.top.values(), reverse=True)
        if choice in lp.top:
            row["ref_gap_nats"] = lp.logprob - lp.top[choice]
        else:  # not even the reference's second choice: the gap is at least top1 - top2
            row["ref_gap_nats_at_least"] = top[0] - top[1] if len(top) > 1 else None
        row["near_tie"] = row.get("ref_gap_nats", float("inf")) < NEAR_TIE_NATS
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--num-new", type=int, default=256)
    ap.add_argument("--out", type=Path, default=Path("model_parity.json"))
    ap.add_argument("--device", default="cuda", help="cpu: a smoke run under TRITON_INTERPRET=1 (slow)")
    args = ap.parse_args()
    model_dir = default_model_path()
    prompts = text_prompts(model_dir, args.prompts, 24)
    ref, ref_s = run(model_dir, prompts, args.num_new, {"linear": "reference", "moe": "reference",
                                                         "attention": "reference"}, args.device)
    tri, tri_s = run(model_dir, prompts, args.num_new, ALL_TRITON, args.device)
    rows = [compare(a, b) for a, b in zip(ref, tri, strict=True)]
    summary = {
        "model": str(model_dir), "numerics": "faithful", "num_new": args.num_new, "prompts": len(prompts),
        "all_equal": all(r["tokens_equal"] for r in rows),
        "every_divergence_a_near_tie": all(r["tokens_equal"] or r["near_tie"] for r in rows),
        "reference_generate_s": ref_s, "triton_generate_s": tri_s,
        "tokens_per_s_reference": len(prompts) * args.num_new / ref_s,
        "tokens_per_s_triton": len(prompts) * args.num_new / tri_s,
        "device": torch.cuda.get_device_name() if args.device == "cuda" else args.device, "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=1))
    print(json.dumps({k: v for k, v in summary.items() if k != "rows"}))
    for i, r in enumerate(rows):
        print(i, r)


if __name__ == "__main__":
    main()
