"""Issue 11's second parity gate: a random DeepSeek-V4-Flash-shaped model of a few layers, every
Triton kernel selected, greedy, against the reference kernels on the same weights.

The model is built in memory (`mxserve.bench.layers`: the release formats at Flash shapes, random
values, the engine's own kernel choices), so no multi-GB checkpoint is written. The Triton model
prefills `--prompts` random prompts in one batch, then decodes `--num-new` greedy tokens per prompt
through the engine's decode path (`DecodeGraphs`: CUDA-graph replay on a GPU, the same static
buffers eager elsewhere). The reference model (reference kernels, the same numerics and weights)
scores each prompt + continuation in one teacher-forced forward; its argmax at every generated
position must be the Triton model's token, or the first position where it is not is reported with
the reference's log-probability gap (under 0.1 nat: a near tie), scored by `model_parity.score_continuations`.

    PYTHONPATH=src python benchmarks/flash_parity.py --out $OUT/flash_parity.json           # H200
    TRITON_INTERPRET=1 PYTHONPATH=src python benchmarks/flash_parity.py --config tiny-all --layers 3 \\
        --device cpu --prompts 2 --prompt-len 8 --num-new 3 --out /tmp/flash_parity.json     # smoke

A random model's next-token distributions are flat, so near ties are common: the gate this checks
is "no divergence beyond a near tie", which a wrong kernel (a garbled cache read, a wrong expert)
still fails by nats.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from model_parity import score_continuations

from mxserve.bench.layers.build import bench_config, layer_plan, random_weights
from mxserve.bench.layers.kernels import EngineKernels, build_bench_model, parse_kernels_option
from mxserve.config import AttentionKind, ModelConfig
from mxserve.engine.cuda_graphs import DecodeGraphs, bucket_for
from mxserve.model.decode_batch import DecodeGeometry
from mxserve.model.deepseek_v4 import DeepseekV4Model
from mxserve.model.forward_batch import ForwardBatch
from mxserve.testing.tiny_configs import get_config

BLOCK_SIZE = 64


def triton_generate(model: DeepseekV4Model, prompts: list[list[int]], num_new: int, device: torch.device,
                    max_model_len: int) -> tuple[list[list[int]], str]:
    """Greedy continuations of every prompt (prefill in one batch, then decode steps of all rows)."""
    n = len(prompts)
    state = model.new_cache_state(max_sequences=n, max_positions=max_model_len, block_size=BLOCK_SIZE, device=device)
    logits = model.forward(ForwardBatch.from_chunks(prompts, list(range(n)), [0] * n, logits_for="last",
                                                    device=device), state)
    generated = [[t] for t in logits.argmax(-1).tolist()]
    geometry = DecodeGeometry.for_positions(model.config, BLOCK_SIZE, max_model_len)
    graphs = DecodeGraphs(model, state, geometry, device, capture=device.type == "cuda")
    for step in range(num_new - 1):
        positions = [len(p) + step for p in prompts]
        step_logits = graphs.run([g[-1] for g in generated], list(range(n)), positions, bucket_for(n))
        if step_logits is None:
            raise SystemExit(f"error: the decode graphs are unavailable: {graphs.unavailable}")
        for row, token in zip(generated, step_logits.argmax(-1).tolist(), strict=True):
            row.append(token)
    how = f"CUDA-graph replay ({graphs.num_replays} replays)" if graphs.captured_buckets() else "static buffers, eager"
    return generated, how


def model_arguments(description: str, out: str) -> argparse.ArgumentParser:
    """The options of a random few-layer model and its prompts (shared with `numerics_drift.py`)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--config", default="flash", help="a mxserve.testing config name (flash, tiny-all, ...)")
    ap.add_argument("--layers", type=int, default=4, help="main layers to build (kinds cycle by frequency)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--kernels", default="linear=triton,moe=triton,attention=triton,hc=triton")
    ap.add_argument("--numerics", default="faithful", choices=["faithful", "exact"])
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--prompt-len", type=int, default=24)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path(out))
    return ap


@dataclass
class RandomModel:
    kinds: tuple[AttentionKind, ...]  # the built layers' kinds
    config: ModelConfig  # the few-layer config
    weights: dict[str, object]  # release-format random weights
    model: DeepseekV4Model  # as the engine builds it, with the kernels of --kernels
    engine: EngineKernels  # its kernel choices
    prompts: list[list[int]]
    build_s: float  # seconds to make the weights


def random_model(args: argparse.Namespace, max_model_len: int) -> RandomModel:
    """The weights, the engine-built model and the random prompts of `model_arguments`' options."""
    device = torch.device(args.device)
    full = get_config(args.config)
    kinds = layer_plan(full, args.layers)
    config = bench_config(full, kinds)
    t0 = time.perf_counter()
    weights = random_weights(config, device, seed=args.seed)
    build_s = time.perf_counter() - t0
    overrides, source = parse_kernels_option(args.kernels)
    model, engine = build_bench_model(config, weights, device=device, numerics=args.numerics, overrides=overrides,
                                      source=source, max_model_len=max_model_len)
    g = torch.Generator().manual_seed(args.seed)
    prompts = torch.randint(2, config.vocab_size, (args.prompts, args.prompt_len), generator=g).tolist()
    return RandomModel(kinds, config, weights, model, engine, prompts, build_s)


def main() -> None:
    ap = model_arguments(__doc__.split("\n")[0], "flash_parity.json")
    ap.add_argument("--num-new", type=int, default=256)
    args = ap.parse_args()
    device = torch.device(args.device)
    max_model_len = args.prompt_len + args.num_new + 1
    built = random_model(args, max_model_len)
    kinds, model, prompts = built.kinds, built.model, built.prompts
    t0 = time.perf_counter()
    with torch.no_grad():
        generated, how = triton_generate(model, prompts, args.num_new, device, max_model_len)
    triton_s = time.perf_counter() - t0
    reference = DeepseekV4Model(built.config, built.weights, numerics=args.numerics)
    t0 = time.perf_counter()
    with torch.no_grad():
        rows = score_continuations(reference, prompts, generated, device)
    result = {
        "config": args.config, "layers": [k.value for k in kinds], "numerics": args.numerics, "kernels": args.kernels,
        "kernel_reasons": list(built.engine.reasons), "prompts": args.prompts, "prompt_len": args.prompt_len,
        "num_new": args.num_new, "decode": how, "build_s": built.build_s, "triton_s": triton_s,
        "reference_s": time.perf_counter() - t0, "rows": rows,
        "all_equal": all(r["tokens_equal"] for r in rows),
        "every_divergence_a_near_tie": all(r["tokens_equal"] or r["near_tie"] for r in rows),
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k not in ("rows", "kernel_reasons")}))
    for i, r in enumerate(rows):
        print(f"prompt {i}: " + ("equal" if r["tokens_equal"] else
                                 f"first divergence at {r['first_divergence']}, reference gap {r['ref_gap_nats']:.4f} nat"
                                 f" ({'near tie' if r['near_tie'] else 'NOT a near tie'})"))


if __name__ == "__main__":
    main()
