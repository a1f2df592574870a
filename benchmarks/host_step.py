"""The engine's host work per decode step at many concurrent requests, with the model made free.

Issue 11's 64-request target is host-bound on the H200: a 64-row decode step took ~20 ms while
its GPU work is a few ms. This harness runs the real engine (`LLM` with the packaged default
model: scheduler, block manager, runner, sampler, detokenizer, output objects) with the model
replaced by a stand-in whose logits cost one small gather (`FreeModel`), and reports the host
milliseconds per decode step by component. It also counts the host reads of tensor values
(`.item()`, `.tolist()`, `bool()`, `int()`, `float()`, `nonzero`) per step, by call site: on CUDA
each read of a device tensor waits for the GPU, so a step should do one.

On the CPU the step takes the engine's CUDA path (`--path graph`, the default): the runner runs
the static-buffer path on any device (`MXSERVE_DECODE_GRAPHS=1`) and `DecodeGraphs` runs uncaptured (`capture=False`),
so `build_decode_batch`, the static-buffer copies and the row bookkeeping run exactly as they do
around a replay. `--path eager` keeps the CPU's eager `ForwardBatch` path instead.

    PYTHONPATH=src python benchmarks/host_step.py                       # 64 requests, greedy
    PYTHONPATH=src python benchmarks/host_step.py --sampled --profile   # + seeded top-p rows, cProfile
    PYTHONPATH=src python benchmarks/host_step.py --device cuda --out $R/host_step.json   # on the GPU

With `--device cuda` the stand-in's logits live on the GPU and the graph path is the real one
(uncaptured: there is nothing to capture), so device reads are real syncs.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import gc
import io
import json
import pstats
import statistics
import time
import traceback
from pathlib import Path
from typing import Any

import torch

from mxserve import LLM, SamplingParams
from mxserve.default_model import default_model_path
from mxserve.engine.cuda_graphs import DecodeGraphs
from mxserve.engine.tokenizer import Tokenizer
from mxserve.model.decode_batch import DecodeGeometry

CACHE_BYTES = 1 << 30  # caches of every engine built here (64 x 512 tokens of the default model fit many times)


class FreeModel:
    """The model's interface with logits from a fixed random table: row logits = table[input token],
    so greedy decoding walks a fixed random chain (varied tokens, hence varied text)."""

    supports_cuda_graphs = True
    observer = None

    def __init__(self, real, device: torch.device, seed: int = 0) -> None:
        self.config, self.policy = real.config, real.policy
        vocab = real.config.vocab_size
        gen = torch.Generator().manual_seed(seed)
        self.table = (4.0 * torch.randn(vocab, vocab, generator=gen)).to(device)
        self._out: dict[int, torch.Tensor] = {}  # bucket → the static logits buffer a graph would own

    def forward(self, batch, state) -> torch.Tensor:
        tokens = batch.token_ids if batch.logits_rows is None else batch.token_ids[batch.logits_rows]
        return self.table.index_select(0, tokens)

    def decode_forward(self, batch, state, geometry) -> torch.Tensor:
        rows = batch.num_rows
        out = self._out.get(rows)
        if out is None:
            out = self._out[rows] = self.table.new_empty(rows, self.table.shape[1])
        return torch.index_select(self.table, 0, batch.token_ids, out=out)


class ReadCounter:
    """Counts host reads of tensor values by call site (file:line in mxserve or the harness)."""

    NAMES = ("item", "tolist", "__bool__", "__int__", "__float__", "nonzero")

    def __init__(self) -> None:
        self.counts: collections.Counter = collections.Counter()
        self.active = False
        self._saved: dict[str, Any] = {}

    def install(self) -> None:
        for name in self.NAMES:
            original = getattr(torch.Tensor, name)
            self._saved[name] = original
            setattr(torch.Tensor, name, self._wrap(name, original))

    def uninstall(self) -> None:
        for name, original in self._saved.items():
            setattr(torch.Tensor, name, original)

    def _wrap(self, name: str, original):
        counter = self

        def wrapped(tensor, *args, **kwargs):
            if counter.active:
                frames = [f for f in traceback.extract_stack(limit=12)[:-1] if "mxserve" in f.filename
                          or "host_step" in f.filename]
                where = f"{frames[-1].filename.split('/')[-1]}:{frames[-1].lineno} {frames[-1].name}" if frames else "?"
                counter.counts[f"{name} @ {where}"] += 1
            return original(tensor, *args, **kwargs)

        return wrapped


COMPONENTS = {  # label → (object path, attribute): the functions whose inclusive time is reported
    "schedule": ("mxserve.engine.scheduler", "Scheduler", "schedule"),
    "runner.execute": ("mxserve.engine.model_runner", "ModelRunner", "execute"),
    "  graphs.run": ("mxserve.engine.cuda_graphs", "DecodeGraphs", "run"),
    "    build_decode_batch": ("mxserve.engine.cuda_graphs", None, "build_decode_batch"),
    "    model (stand-in)": ("__main__", "FreeModel", "decode_forward"),
    "  sampler.sample": ("mxserve.engine.sampler", "Sampler", "sample"),
    "update_from_output": ("mxserve.engine.scheduler", "Scheduler", "update_from_output"),
    "detokenize": ("mxserve.engine.detokenizer", "IncrementalDetokenizer", "add_tokens"),
    "snapshot": ("mxserve.engine.llm_engine", "_Tracked", "snapshot"),
}


class ComponentTimer:
    def __init__(self, clock=time.perf_counter) -> None:
        self.clock = clock
        self.seconds: collections.Counter = collections.Counter()
        self.calls: collections.Counter = collections.Counter()

    def install(self) -> None:
        import importlib
        import sys

        for label, (module_name, owner, attr) in COMPONENTS.items():
            module = sys.modules[module_name] if module_name == "__main__" else importlib.import_module(module_name)
            target = getattr(module, owner) if owner else module
            original = getattr(target, attr)
            setattr(target, attr, self._wrap(label, original))

    def _wrap(self, label: str, original):
        timer, clock = self, self.clock

        def wrapped(*args, **kwargs):
            t0 = clock()
            try:
                return original(*args, **kwargs)
            finally:
                timer.seconds[label] += clock() - t0
                timer.calls[label] += 1

        return wrapped


class OpCounter:
    """Counts aten ops per step (each is a kernel launch, or a copy, on CUDA), by op name."""

    def __init__(self) -> None:
        from torch.utils._python_dispatch import TorchDispatchMode

        counts: collections.Counter = collections.Counter()

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                counts[str(func.overloadpacket.__name__)] += 1
                return func(*args, **(kwargs or {}))

        self.counts, self.mode = counts, Mode()


def build_llm(args: argparse.Namespace) -> LLM:
    llm = LLM(str(default_model_path()), device=args.device, max_model_len=512, max_num_seqs=args.batch,
              progress=False, kv_cache_memory=CACHE_BYTES)
    engine = llm.engine
    device = engine.device
    stand_in = FreeModel(engine.model, device)
    runner = engine.runner
    runner.model = stand_in
    if args.path == "graph":
        geometry = DecodeGeometry.for_positions(engine.model_config, runner.cache_state.block_size, 512)
        runner.decode_graphs = DecodeGraphs(stand_in, runner.cache_state, geometry, device, capture=False)
        runner.static_decode = True  # as MXSERVE_DECODE_GRAPHS=1: the static-buffer path on any device
    return llm


def prompts(count: int, length: int = 24) -> list[list[int]]:
    """As `e2e_vs_transformers.prompts_for`: BOS + 24 held-out tokens each."""
    model_dir = default_model_path()
    tok = Tokenizer.from_dir(model_dir)
    ids = tok.encode((model_dir / "heldout_sample.txt").read_text(encoding="utf-8"))
    step = max(1, (len(ids) - length) // count)
    return [[tok.bos_token_id, *ids[(i * step) % (len(ids) - length):][:length]] for i in range(count)]


def params_for(args: argparse.Namespace, count: int) -> list[SamplingParams]:
    if not args.sampled:
        return [SamplingParams(temperature=0, max_tokens=args.new_tokens, ignore_eos=True)] * count
    # every other request sampled (seeded top-p), the rest greedy: the mixed batch
    return [SamplingParams(temperature=0.8, top_p=0.9, seed=i, max_tokens=args.new_tokens, ignore_eos=True)
            if i % 2 else SamplingParams(temperature=0, max_tokens=args.new_tokens, ignore_eos=True)
            for i in range(count)]


def logits_math_ms(rows: int, vocab: int, clock) -> float:
    """CPU time of the greedy step's math on the logits: the finiteness flag, log_softmax, argmax,
    the gather of the chosen logprob (what `ModelRunner.execute` and `Sampler.sample` compute)."""
    logits = torch.randn(rows, vocab)
    best = float("inf")
    for _ in range(5):
        t0 = clock()
        for _ in range(20):
            finite = torch.isfinite(logits).all()
            logprobs = torch.log_softmax(logits, dim=-1)
            tokens = torch.argmax(logits, dim=-1)
            logprobs.gather(1, tokens[:, None])
            bool(finite)
        best = min(best, (clock() - t0) / 20)
    return 1e3 * best


def run(args: argparse.Namespace) -> dict[str, Any]:
    llm = build_llm(args)
    engine = llm.engine
    batch_prompts = prompts(args.batch)
    # warm-up (allocations, tokenizer caches)
    llm.generate(batch_prompts, [SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)] * args.batch)
    # On the CPU the process's CPU time: this box is shared, and wall time there counts the other
    # processes' time slices. On CUDA the wall time (the step's one read waits for the device).
    clock = time.perf_counter if args.device == "cuda" else time.process_time
    timer, reads = ComponentTimer(clock), ReadCounter()
    if not args.no_components:
        timer.install()
    if args.count_reads:
        reads.install()
    for i, (p, sp) in enumerate(zip(batch_prompts, params_for(args, args.batch), strict=True)):
        engine.add_request(f"h{i}", p, sp)
    engine.step()  # the prefill step (all prompts fit one step's budget)
    step_s: list[float] = []
    profiler = cProfile.Profile() if args.profile else None
    timer.seconds.clear()
    timer.calls.clear()
    reads.active = True
    num_tokens = 0
    ops = OpCounter() if args.count_ops else None
    while engine.has_unfinished_requests():
        if profiler is not None:
            profiler.enable()
        t0 = clock()
        if ops is not None:
            with ops.mode:
                outs = engine.step()
        else:
            outs = engine.step()
        if args.device == "cuda":
            torch.cuda.synchronize()
        step_s.append(clock() - t0)
        if profiler is not None:
            profiler.disable()
        num_tokens += len(outs)
    reads.active = False
    reads.uninstall()
    steps = len(step_s)
    result: dict[str, Any] = {
        "device": args.device, "path": args.path, "batch": args.batch, "new_tokens": args.new_tokens,
        "sampled": args.sampled, "decode_steps": steps, "clock": clock.__name__,
        "step_ms_median": 1e3 * statistics.median(step_s), "step_ms_mean": 1e3 * statistics.fmean(step_s),
        "step_ms_min": 1e3 * min(step_s),
        "components_ms_per_step": {k: 1e3 * v / steps for k, v in timer.seconds.items()},
        "reads_per_step": {k: v / steps for k, v in reads.counts.most_common()},
        "eager_reasons": dict(engine.runner.eager_stats.counts),
        "aten_ops_per_step": {k: v / steps for k, v in ops.counts.most_common()} if ops is not None else None,
    }
    model_ms = result["components_ms_per_step"].get("    model (stand-in)", 0.0)
    result["host_ms_excluding_model"] = result["step_ms_median"] - model_ms  # median: robust to a slow first step
    if args.device == "cpu":
        # On the CPU the runner's and sampler's ops on the [64, vocab] logits compute here; on CUDA
        # they are ~10 launches of device work. Timed alone at this shape, to be subtracted.
        result["logits_math_ms"] = logits_math_ms(args.batch, engine.model_config.vocab_size, clock)
        result["host_ms_excluding_model_and_logits_math"] = result["host_ms_excluding_model"] - result["logits_math_ms"]
    if profiler is not None:
        stream = io.StringIO()
        pstats.Stats(profiler, stream=stream).sort_stats("cumulative").print_stats(45)
        result["profile"] = stream.getvalue()
    return result


def check_graph_tokens(args: argparse.Namespace) -> dict[str, Any]:
    """The real default model at `args.batch` requests: greedy tokens through the decode graphs
    (every Triton kernel, the fast host path with its pinned numpy-filled buffers) == enforce_eager,
    token for token. Raises SystemExit on a mismatch."""
    kernels = dict(item.split("=", 1) for item in args.check_kernels.split(",") if item)
    batch_prompts = prompts(args.batch)
    params = SamplingParams(temperature=0, max_tokens=args.check_tokens, ignore_eos=True)
    tokens = {}
    for eager in (False, True):
        llm = LLM(str(default_model_path()), device=args.device, numerics="faithful", kernel_overrides=kernels,
                  max_model_len=512, max_num_seqs=args.batch, enforce_eager=eager, progress=False,
                  kv_cache_memory=CACHE_BYTES)
        tokens[eager] = [o.outputs[0].token_ids for o in llm.generate(batch_prompts, params)]
        graphs = llm.engine.runner.decode_graphs
        replays = graphs.num_replays if graphs is not None else 0
        if not eager and replays == 0:
            raise SystemExit(f"check: no decode step replayed a graph ({dict(llm.engine.runner.eager_stats.counts)})")
        del llm, graphs
        gc.collect()
        if args.device == "cuda":
            torch.cuda.empty_cache()
    mismatched = [i for i, (a, b) in enumerate(zip(tokens[False], tokens[True], strict=True)) if a != b]
    result = {"requests": args.batch, "tokens_each": args.check_tokens, "mismatched_requests": mismatched}
    print(f"check: graphs vs enforce_eager, {args.batch} requests x {args.check_tokens} greedy tokens: "
          f"{'EQUAL' if not mismatched else f'{len(mismatched)} requests differ, first {mismatched[0]}'}", flush=True)
    if mismatched:
        raise SystemExit(1)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--path", choices=("graph", "eager"), default="graph")
    ap.add_argument("--sampled", action="store_true", help="every other request seeded top-p (else all greedy)")
    ap.add_argument("--profile", action="store_true", help="print cProfile's top functions (cumulative)")
    ap.add_argument("--count-reads", action="store_true", help="count host reads of tensor values by call site")
    ap.add_argument("--count-ops", action="store_true", help="count aten ops per step (launches on CUDA)")
    ap.add_argument("--no-components", action="store_true", help="no per-component wrappers (their own cost)")
    ap.add_argument("--check", action="store_true",
                    help="first: the real model's greedy tokens through graphs == enforce_eager (CUDA)")
    ap.add_argument("--check-tokens", type=int, default=16)
    ap.add_argument("--check-kernels", default="linear=triton,moe=triton,attention=triton,hc=triton")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(1)
    check = check_graph_tokens(args) if args.check else None
    result = run(args)
    result["check"] = check
    if args.profile:
        print(result["profile"])
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({k: v for k, v in result.items() if k != "profile"}, indent=1))
    print(f"host_step: {args.batch} requests, {result['decode_steps']} decode steps, path {args.path}, "
          f"device {args.device}, {'mixed greedy/top-p' if args.sampled else 'greedy'}")
    print(f"  step ms ({result['clock']}): median {result['step_ms_median']:.3f}, mean {result['step_ms_mean']:.3f}, "
          f"min {result['step_ms_min']:.3f}; median excluding the stand-in model: {result['host_ms_excluding_model']:.3f}")
    if "logits_math_ms" in result:
        print(f"  logits math (device work on CUDA), timed alone: {result['logits_math_ms']:.3f} ms; host step "
              f"excluding it and the stand-in: {result['host_ms_excluding_model_and_logits_math']:.3f} ms")
    for label, ms in result["components_ms_per_step"].items():
        print(f"  {label:<24} {ms:8.3f} ms/step")
    if result["reads_per_step"]:
        print("  host reads of tensor values per step:")
        for site, n in result["reads_per_step"].items():
            print(f"    {n:6.1f}  {site}")
    if result["aten_ops_per_step"]:
        total = sum(result["aten_ops_per_step"].values())
        print(f"  aten ops per step: {total:.1f} (" + ", ".join(f"{k} {v:.1f}" for k, v in
                                                            result["aten_ops_per_step"].items()) + ")")
    if result["eager_reasons"]:
        print(f"  eager steps: {result['eager_reasons']}")


if __name__ == "__main__":
    main()
