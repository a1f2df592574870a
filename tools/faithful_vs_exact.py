"""Measure how far the faithful numeric mode is from the exact one (docs/numerics.md).

For each named tiny config (or `default`, the packaged trained model with its held-out text as the
prompt): write a random release-format checkpoint, load it, greedy-decode a seeded random prompt
in exact mode, score the same stream teacher-forced in faithful mode, and
print one Markdown table row. Usage: python tools/faithful_vs_exact.py [--prompt-len 300] [--new 32]
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile

import torch

from mxserve import default_model_path
from mxserve.engine.tokenizer import Tokenizer
from mxserve.model.checkpoint import CheckpointReader
from mxserve.model.numerics import KVCacheDtype, NumericPolicy
from mxserve.testing import random_checkpoint
from mxserve.verify.mode_distance import measure_mode_distance


def ablations() -> dict[str, NumericPolicy]:
    """Exact mode plus one faithful QAT point at a time, then all of them (= faithful)."""
    exact = NumericPolicy.for_mode("exact")
    return {
        "bf16 streams": dataclasses.replace(exact, stream_dtype=torch.bfloat16),
        "FP8 GEMM inputs": dataclasses.replace(exact, quantize_gemm_inputs=True),
        "fp8_ds_mla cache": dataclasses.replace(exact, kv_cache_dtype=KVCacheDtype.FP8_DS_MLA),
        "FP8 indexer keys": dataclasses.replace(exact, indexer_cache_fp8=True),
        "BF16 pooled entries": dataclasses.replace(exact, round_compressed_to_bf16=True),
        "faithful (all)": NumericPolicy.for_mode("faithful"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--configs", nargs="+", default=["tiny-all", "tiny-0731"])
    parser.add_argument("--prompt-len", type=int, default=300)
    parser.add_argument("--new", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ablation", action="store_true", help="one row per QAT point (first config only)")
    args = parser.parse_args()
    print("| config / policy | positions | mean abs Δlogp (nats) | max abs Δlogp (nats) | argmax flips | first flip (margin nats) | first greedy divergence |")
    print("|---|---|---|---|---|---|---|")
    for name in args.configs:
        with tempfile.TemporaryDirectory() as tmp:
            if name == "default":  # the packaged trained model, prompted with its held-out text
                reader = CheckpointReader(default_model_path())
                text = (default_model_path() / "heldout_sample.txt").read_text()
                prompt = [0, *Tokenizer.from_dir(default_model_path()).encode(text)][: args.prompt_len]
            else:  # a random release-format checkpoint, prompted with random tokens
                random_checkpoint(name, tmp, seed=args.seed, progress=False)
                reader = CheckpointReader(tmp)
                gen = torch.Generator().manual_seed(args.seed + 1)
                prompt = torch.randint(2, reader.config.vocab_size, (args.prompt_len,), generator=gen).tolist()
            weights = reader.load(progress=False)
            policies = ablations() if args.ablation else {"faithful": NumericPolicy.for_mode("faithful")}
            for label, policy in policies.items():
                result = measure_mode_distance(reader.config, weights, prompt, args.new, candidate=policy)
                print_row(f"{name} / {label}", result)
        if args.ablation:
            break


def print_row(label: str, result) -> None:
    c = result.comparison
    flip = "none" if c.first_flip_position is None else f"{c.first_flip_position} ({c.first_flip_reference_margin_nats:.3f})"
    div = "none" if result.first_greedy_divergence is None else str(result.first_greedy_divergence)
    print(f"| {label} | {c.num_positions} | {c.mean_abs_logprob_delta_nats:.4f} | {c.max_abs_logprob_delta_nats:.4f} "
          f"| {c.num_argmax_flips} | {flip} | {div} |", flush=True)


if __name__ == "__main__":
    main()
