"""The host work of one prefill forward of the default model, counted and timed on the CPU.

The H200 prefill step is host-bound (docs/benchmarks.md, "The prefill step is host-bound": 39 ms
of wall for 1.5 ms of kernels at one 25-token prompt): every aten op and Triton launch of the
eager step costs host time. This harness measures one `DeepseekV4Model.forward` over `--batch`
prompts of 25 tokens on a fresh cache, two ways:

1. `reference`: the model as the engine builds it on the CPU (reference kernels). Prints the aten
   op calls (torch.profiler, CPU activities: every `aten::` event, nested ones included), the
   Python function calls (cProfile), and the host wall (median of `--repeats`).
2. `h200` (with TRITON_INTERPRET=1; `--launches`): the model with every Triton kernel as the H200
   runs it (`tests.model.launch_count`: sm_90 choosers, CUDA paths of the slot maps), and the
   launches of one forward counted: aten compute ops (each a kernel launch on CUDA) plus Triton
   launches, by name. The kernels are counted, not run (`--execute` runs them, slowly); the host
   wall of the forward with the launches stubbed (the model's glue, the launchers' Python and the
   aten ops on small CPU tensors; not Triton's own launch path) is the median of `--repeats`.

    PYTHONPATH=src:. python benchmarks/prefill_host_ops.py --batch 1
    TRITON_INTERPRET=1 PYTHONPATH=src:. python benchmarks/prefill_host_ops.py --batch 1 --launches

3. `--ab` (on the GPU): the engine's prefill step (`generate(max_tokens=1)`, every Triton kernel)
   with the forward's maps shared (default) and per layer (MXSERVE_PREFILL_LAYER_MAPS=1), the two
   interleaved in one process (prefill timings move between processes): median wall of each.

    PYTHONPATH=src:. python benchmarks/prefill_host_ops.py --ab --device cuda --batches 1,64
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import statistics
import time
from collections import Counter
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from mxserve.default_model import default_model_path
from mxserve.model.forward_batch import ForwardBatch


def prompts(count: int, length: int = 24) -> list[list[int]]:
    """`e2e_vs_transformers.prompts_for`'s prompts (BOS + `length` held-out tokens each)."""
    from mxserve.engine.tokenizer import Tokenizer

    model_dir = default_model_path()
    tok = Tokenizer.from_dir(model_dir)
    ids = tok.encode((model_dir / "heldout_sample.txt").read_text(encoding="utf-8"))
    step = max(1, (len(ids) - length) // count)
    return [[tok.bos_token_id, *ids[(i * step) % (len(ids) - length):][:length]] for i in range(count)]


def one_forward(model, state, token_lists: list[list[int]]) -> torch.Tensor:
    """One prefill forward on a fresh set of sequences (logits of each prompt's last row, as the
    engine asks), then the sequences are freed so the next call finds the same free pages."""
    seqs = list(range(len(token_lists)))
    batch = ForwardBatch.from_chunks(token_lists, seqs, [0] * len(seqs), logits_for="last")
    logits = model.forward(batch, state)
    for s in seqs:
        state.free_sequence(s)
    return logits


def reference_counts(batch: int, repeats: int) -> dict:
    from mxserve import LLM

    llm = LLM(device="cpu", max_num_seqs=batch, progress=False)
    model = llm.engine.model
    state = model.new_cache_state(max_sequences=batch, max_positions=64, block_size=64)
    tokens = prompts(batch)
    one_forward(model, state, tokens)  # warm-up
    walls = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        one_forward(model, state, tokens)
        walls.append(time.perf_counter() - t0)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        one_forward(model, state, tokens)
    names = [e.name for e in prof.events() if e.name.startswith("aten::")]
    by_name: dict[str, int] = {}
    for n in names:
        by_name[n] = by_name.get(n, 0) + 1
    host = cProfile.Profile()
    host.enable()
    one_forward(model, state, tokens)
    host.disable()
    stats = pstats.Stats(host, stream=io.StringIO())
    top = io.StringIO()
    pstats.Stats(host, stream=top).sort_stats("tottime").print_stats(12)
    return {"batch": batch, "wall_ms": [1e3 * w for w in walls], "wall_median_ms": 1e3 * statistics.median(walls),
            "aten_calls": len(names), "python_calls": stats.total_calls,
            "aten_top": sorted(by_name.items(), key=lambda kv: -kv[1])[:12], "cprofile_top": top.getvalue()}


def h200_launches(batch: int, execute: bool, sites: bool = False, repeats: int = 5) -> dict:
    from tests.model.launch_count import ALL_TRITON, LaunchCounter, gpu_like_checks, h200_platform

    from mxserve.model.checkpoint import CheckpointReader
    from mxserve.model.kernel_selection import build_engine_model

    reader = CheckpointReader(default_model_path())
    with h200_platform():
        model, _ = build_engine_model(reader.config, reader.load(progress=False), device=torch.device("cpu"),
                                      numerics="faithful", kv_cache_dtype=None, overrides=ALL_TRITON, max_model_len=64)
    state = model.new_cache_state(max_sequences=batch, max_positions=64, block_size=64)
    for caches in state.layers:  # the fixed-shape (CUDA) forms of the cache reads and writes
        for cache in (caches.window, caches.compressed, caches.indexer):
            if cache is not None and hasattr(cache, "sync_free"):
                cache.sync_free = True
    tokens = prompts(batch)
    counter, warm_up = LaunchCounter(), LaunchCounter()
    if sites:
        counter.sites = Counter()
    walls = []
    with torch.no_grad(), gpu_like_checks():
        for c in (warm_up, counter):  # the warm-up: autotuners, expert stacking
            with c.counting_triton(execute=execute), c:
                one_forward(model, state, tokens)
        if not execute:  # host time with the Triton launches stubbed: the model's glue and the launchers' Python
            for _ in range(repeats):
                with LaunchCounter().counting_triton(execute=False):
                    t0 = time.perf_counter()
                    one_forward(model, state, tokens)
                    walls.append(1e3 * (time.perf_counter() - t0))
    return {"batch": batch, "aten_launches": sum(counter.aten.values()), "triton_launches": sum(counter.triton.values()),
            "report": counter.report(), "sites": dict(counter.sites or {}), "stubbed_wall_ms": walls,
            "stubbed_wall_median_ms": statistics.median(walls) if walls else None}


def ab_walls(batch: int, device: str, rounds: int) -> dict:
    from mxserve import LLM, SamplingParams
    from mxserve.model.chunk_batch import LAYER_MAPS_ENV

    overrides = {"linear": "triton", "moe": "triton", "attention": "triton", "hc": "triton"} if device != "cpu" else {}
    llm = LLM(kernel_overrides=overrides, max_num_seqs=batch, device=device, progress=False)
    tokens, params = prompts(batch), SamplingParams(temperature=0, max_tokens=1, ignore_eos=True)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    walls: dict[str, list[float]] = {"shared": [], "per_layer": []}
    outputs: dict[str, list] = {}
    for r in range(rounds + 2):  # two warm-up rounds (compiles, autotuning)
        for mode in ("per_layer", "shared") if r % 2 else ("shared", "per_layer"):
            if mode == "per_layer":
                os.environ[LAYER_MAPS_ENV] = "1"
            else:
                os.environ.pop(LAYER_MAPS_ENV, None)
            sync()
            t0 = time.perf_counter()
            out = llm.generate(tokens, params)
            sync()
            if r >= 2:
                walls[mode].append(1e3 * (time.perf_counter() - t0))
            outputs[mode] = [o.outputs[0].token_ids for o in out]
    os.environ.pop(LAYER_MAPS_ENV, None)
    med = {mode: statistics.median(w) for mode, w in walls.items()}
    return {"batch": batch, "walls_ms": walls, "median_ms": med, "ratio": med["shared"] / med["per_layer"],
            "same_tokens": outputs["shared"] == outputs["per_layer"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--launches", action="store_true", help="the h200 count (needs TRITON_INTERPRET=1)")
    ap.add_argument("--execute", action="store_true", help="with --launches: run the interpreted kernels")
    ap.add_argument("--sites", action="store_true", help="with --launches: the aten ops by source line")
    ap.add_argument("--ab", action="store_true", help="shared vs per-layer maps, engine prefill walls")
    ap.add_argument("--device", default="cuda", help="with --ab")
    ap.add_argument("--batches", default="1,64", help="with --ab")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    result: dict = {}
    if args.ab:
        rows = [ab_walls(int(b), args.device, args.repeats) for b in args.batches.split(",")]
        for row in rows:
            print(f"[prefill A/B] {row['batch']} x 25 tokens: shared maps {row['median_ms']['shared']:.1f} ms, "
                  f"per layer {row['median_ms']['per_layer']:.1f} ms (x{row['ratio']:.3f}); same greedy tokens: "
                  f"{row['same_tokens']}")
        result = {"ab": rows}
    elif args.launches:
        if os.environ.get("TRITON_INTERPRET") != "1":
            raise SystemExit("--launches needs TRITON_INTERPRET=1 (set before Python starts)")
        result = h200_launches(args.batch, args.execute, args.sites, args.repeats)
        print(result["report"])
        for site, n in sorted(result["sites"].items(), key=lambda kv: kv[0].split()[1]):
            print(f"{n:5d}  {site}")
        print(f"\n[prefill h200-shaped] {args.batch} x 25 tokens: {result['aten_launches']} aten compute ops + "
              f"{result['triton_launches']} Triton launches = "
              f"{result['aten_launches'] + result['triton_launches']} launches")
        if result["stubbed_wall_median_ms"] is not None:
            print(f"[prefill h200-shaped] host wall with the Triton launches stubbed: median "
                  f"{result['stubbed_wall_median_ms']:.1f} ms (of {args.repeats}: "
                  f"{', '.join(f'{w:.1f}' for w in result['stubbed_wall_ms'])})")
    else:
        result = reference_counts(args.batch, args.repeats)
        print(result["cprofile_top"])
        print("aten top:", ", ".join(f"{n} {k}" for n, k in result["aten_top"]))
        print(f"\n[prefill reference CPU] {args.batch} x 25 tokens: {result['aten_calls']} aten op calls, "
              f"{result['python_calls']} Python function calls, 0 Triton launches, host wall median "
              f"{result['wall_median_ms']:.1f} ms (of {args.repeats}: "
              f"{', '.join(f'{w:.1f}' for w in result['wall_ms'])})")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
