"""Decode branches A/B (MXSERVE_DECODE_BRANCHES, model/decode_branches.py; and MXSERVE_HC_SIDE_STREAM):
the device time of one replayed decode step with the independent parts on side lanes or not, and
its logits bit for bit against the one-stream step.

Models: the packaged default model (`default`) and DeepSeek-V4-Flash layers at real shapes with
random release-format weights plus the head (`flash`, as `mxserve bench layers` builds them), every
Triton kernel. Caches look like B sequences of C tokens (`bench.layers.cache`). For each (model,
batch) the configurations are interleaved over `--rounds` rounds in one process: each round captures
a fresh `DecodeGraphs` per configuration (the switches are read while the step is captured) and
times it with the engine's device-only replay loop (20 back-to-back replays, median of 5 rounds).

    PYTHONPATH=src python benchmarks/branches_ab.py --out $OUT/branches_ab.json        # GPU

Prints one line per (model, batch, configuration): the device ms of each round, and whether every
round's logits equal the first configuration's bit for bit. `--configs` picks the configurations
(session 17 added MXSERVE_HC_FUSED: "hc fused", "branches + hc fused").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path
from typing import Any

import torch

from mxserve.bench.layers.build import bench_config, layer_plan, random_weights
from mxserve.bench.layers.cache import build_cache_state
from mxserve.bench.layers.kernels import build_bench_model, parse_kernels_option
from mxserve.engine.cuda_graphs import DecodeGraphs, bucket_for
from mxserve.model.decode_batch import DecodeGeometry
from mxserve.model.decode_branches import BRANCHES_ENV
from mxserve.testing.tiny_configs import get_config

HC_SIDE_ENV = "MXSERVE_HC_SIDE_STREAM"
HC_FUSED_ENV = "MXSERVE_HC_FUSED"  # session 17: hc_pre + block norm in 2 launches (kernels/hyper_connection)
CONFIGS = {  # name -> the switches it sets; the first is the baseline every other is compared with
    "one stream": {BRANCHES_ENV: "0", HC_SIDE_ENV: "0", HC_FUSED_ENV: "0"},
    "branches": {BRANCHES_ENV: "1", HC_SIDE_ENV: "0", HC_FUSED_ENV: "0"},
    "branches + hc side": {BRANCHES_ENV: "1", HC_SIDE_ENV: "1", HC_FUSED_ENV: "0"},
    "hc fused": {BRANCHES_ENV: "0", HC_SIDE_ENV: "0", HC_FUSED_ENV: "1"},
    "branches + hc fused": {BRANCHES_ENV: "1", HC_SIDE_ENV: "0", HC_FUSED_ENV: "1"},
}
DEFAULT_CONFIGS = "one stream,branches,branches + hc side"


def default_model(device: torch.device, overrides: dict[str, str]):
    from mxserve import LLM

    return LLM(device=str(device), kernel_overrides=overrides, progress=False).engine.model


def flash_model(device: torch.device, overrides: dict[str, str], layers: int, max_len: int):
    full = get_config("flash")
    config = bench_config(full, layer_plan(full, layers))
    weights = random_weights(config, device, seed=0)
    model, _ = build_bench_model(config, weights, device=device, numerics="faithful", overrides=overrides,
                                 source="--kernels", max_model_len=max_len)
    return model


def measure(model, device: torch.device, batch: int, context: int, max_len: int, rounds: int,
            configs: dict[str, dict[str, str]]) -> dict[str, Any]:
    state = build_cache_state(model.config, model.policy, num_seqs=batch, context_len=context, new_tokens=1,
                              block_size=64, device=device)
    geometry = DecodeGeometry.for_positions(model.config, state.block_size, max_len)
    tokens, seqs, positions = [(7 * i) % model.config.vocab_size for i in range(batch)], list(range(batch)), \
        [context] * batch
    bucket = bucket_for(batch)
    device_ms: dict[str, list[float]] = {name: [] for name in configs}
    equal: dict[str, bool] = {name: True for name in configs}
    status: dict[str, str] = {}
    baseline = None
    for _ in range(rounds):
        for name, switches in configs.items():
            os.environ.update(switches)
            graphs = DecodeGraphs(model, state, geometry, device, capture=device.type == "cuda")
            logits = graphs.run(tokens, seqs, positions, bucket)  # probe + capture + first replay
            if logits is None:
                status[name] = f"not captured: {graphs.unavailable}"
                continue
            logits = logits.clone()
            status[name] = "replayed"
            seconds = graphs.replay_device_seconds(bucket, replays=20, rounds=5)  # None off the GPU (smoke runs)
            if seconds:
                device_ms[name].append(1e3 * statistics.median(seconds))
            if baseline is None:
                baseline = logits
            equal[name] &= bool(torch.equal(logits, baseline))
            del graphs
    return {"batch": batch, "context": context, "bucket": bucket, "device_ms": device_ms, "logits_equal": equal,
            "status": status}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--what", nargs="+", default=["default", "flash"], choices=["default", "flash"])
    ap.add_argument("--batches", default="1,64")
    ap.add_argument("--default-context", type=int, default=512)
    ap.add_argument("--flash-context", type=int, default=4096)
    ap.add_argument("--flash-layers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--kernels", default="linear=triton,moe=triton,attention=triton,hc=triton")
    ap.add_argument("--configs", default=DEFAULT_CONFIGS,
                    help=f"comma-separated, the first is the baseline; known: {', '.join(CONFIGS)}")
    ap.add_argument("--device", default="cuda", help="cpu: a smoke run of the script (no timing)")
    ap.add_argument("--out", type=Path, default=Path("branches_ab.json"))
    args = ap.parse_args()
    device = torch.device(args.device)
    overrides, _ = parse_kernels_option(args.kernels)
    unknown = [c for c in args.configs.split(",") if c not in CONFIGS]
    if unknown:
        ap.error(f"unknown --configs {unknown}; known: {list(CONFIGS)}")
    configs = {c: CONFIGS[c] for c in args.configs.split(",")}
    rows = []
    for what in args.what:
        context = args.default_context if what == "default" else args.flash_context
        max_len = context + 1  # the engine's max_model_len: sizes the decode geometry's candidate sets
        model = default_model(device, overrides) if what == "default" else flash_model(
            device, overrides, args.flash_layers, max_len)
        for batch in [int(b) for b in args.batches.split(",")]:
            row = {"model": what, **measure(model, device, batch, context, max_len, args.rounds, configs)}
            rows.append(row)
            for name in configs:
                ms = row["device_ms"][name]
                cells = " / ".join(f"{v:.3f}" for v in ms) or row["status"].get(name, "-")
                print(f"{what:8s} b{batch:<3d} ctx {context:<6d} {name:20s} device ms {cells:24s} "
                      f"logits == one stream: {row['logits_equal'][name]}", flush=True)
        del model
        torch.cuda.empty_cache()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"kernels": args.kernels, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
