"""`mxserve bench layers`: time full-size layers, set them against their floors, project the model.

The model is built by the engine's own function with the engine's kernel overrides
(`bench/layers/kernels.py`), so it runs the kernels serving runs. Scenarios: one prefill of
`prefill_tokens` tokens into empty caches, and decode steps (one new token per sequence) for
every (batch, context) pair. Each scenario is timed as whole eager steps (`model.forward`, the
device synchronized around each; median of `reps` after `warmup`); decode scenarios are also
timed as the engine's CUDA-graph replay when the engine would replay one (`bench/layers/graphs.py`;
otherwise the reason is reported), then profiled once (eager) for the per-layer, per-op split: by
device kernel time (`torch.profiler`) on CUDA, by synchronizing host timers on the CPU or when
asked (`op_split`; `bench/layers/op_split.py` says why the two differ); every row and projection
names its basis.
Each layer's time is set against its bandwidth floor (bytes it must read / `bandwidth_tb_s`) and,
for prefill, its compute floor (FLOPs / `peak_tflops`).

The projection (clearly a projection, not a measurement): a full-model single-stream decode
step = the replayed batch-1 step of the built layers + head, plus for each further layer of the
full config the marginal replayed cost of one more layer of its kind (the step replayed with that
kind's first layer appended once more, minus the step: `graphs.time_graph_marginals`); tok/s =
1 / that. Without marginals it falls back to the replayed step split across layers in the eager
profile's proportions (which over-weights launch-heavy layers: the eager step is host-bound), or
the eager step; the projection says which. The op it says holds the step back is the largest
share of the projected kernel time (layers + head) on the device basis, of the step on the wall
one, and the line says which. A kind that was not built (K smaller than the number of kinds)
borrows a measured kind's time, labelled as such. Failures of one scenario (e.g. out of memory)
are recorded and the others still run.
"""

from __future__ import annotations

import datetime
import gc
import importlib.metadata
import json
import platform
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from mxserve.bench.layers.build import (
    bench_config,
    kinds_by_frequency,
    layer_plan,
    random_weights,
    weight_bytes,
)
from mxserve.bench.layers.cache import build_cache_state
from mxserve.bench.layers.graphs import time_graph_decode, time_graph_marginals
from mxserve.bench.layers.kernels import EngineKernels, build_bench_model, kernel_labels
from mxserve.bench.layers.op_split import (
    OP_SPLIT_DEVICE,
    OP_SPLIT_MODES,
    OP_SPLIT_WALL,
    OpSplit,
    resolve_op_split,
)
from mxserve.bench.layers.roofline import cache_read_bytes, layer_weight_bytes, routed_bytes, step_flops
from mxserve.bench.layers.timing import OpProfiler, median, time_steps, weight_owners
from mxserve.config import AttentionKind, ModelConfig
from mxserve.engine.llm_engine import resolve_device
from mxserve.model.deepseek_v4 import DeepseekV4Model
from mxserve.model.forward_batch import ForwardBatch
from mxserve.testing.tiny_configs import get_config

TARGET_RATIO = 1.5  # issue 12: batch-1 decode layer time within 1.5x of its bandwidth floor
TARGET_TOK_S = 200.0  # issue 12: projected single-stream decode
SLOW_STEP_S = 5.0  # a step this slow is timed once, not `reps` times (the time budget is for scenarios)


@dataclass(frozen=True)
class LayersBenchOptions:
    config: str  # a name in mxserve.testing.TINY_CONFIGS ("flash", "tiny-all", ...)
    num_layers: int
    device: str
    prefill_tokens: int  # 0 = skip prefill
    decode_batches: tuple[int, ...]
    contexts: tuple[int, ...]
    reps: int
    warmup: int
    numerics: str
    bandwidth_tb_s: float
    peak_tflops: float
    seed: int
    time_budget_s: float = 120.0  # scenarios not started within this (after the weights are built) are skipped
    block_size: int = 64
    kernel_overrides: dict[str, str] = field(default_factory=dict)  # resolved (bench/layers/kernels.py)
    kernel_source: str = "engine defaults"  # where kernel_overrides came from, in words
    max_model_len: int = 0  # the engine's max_model_len (choosers, decode-graph geometry); 0 = the longest step
    op_split: str = "auto"  # basis of the per-op split: auto (device on CUDA, else wall), device, wall (op_split.py)

    @property
    def resolved_max_model_len(self) -> int:
        """The capacity the model is built and decode graphs are captured for."""
        return self.max_model_len or max(self.prefill_tokens, max(self.contexts, default=0) + 1)

    def __post_init__(self) -> None:
        for name in ("num_layers", "reps", "block_size"):
            if getattr(self, name) <= 0:
                raise ValueError(f"bench layers: {name}={getattr(self, name)} must be positive")
        if self.warmup < 0 or self.prefill_tokens < 0:
            raise ValueError("bench layers: warmup and prefill_tokens must be >= 0")
        if any(b <= 0 for b in self.decode_batches) or any(c < 0 for c in self.contexts):
            raise ValueError(f"bench layers: batches must be positive and contexts >= 0, got "
                             f"{list(self.decode_batches)} / {list(self.contexts)}")
        if self.op_split not in OP_SPLIT_MODES:
            raise ValueError(f"bench layers: op_split={self.op_split!r} is not one of {list(OP_SPLIT_MODES)}")
        if self.bandwidth_tb_s <= 0 or self.peak_tflops <= 0:
            raise ValueError("bench layers: bandwidth and peak FLOP rate must be positive")
        longest = max(self.prefill_tokens, max(self.contexts, default=0) + 1)
        if self.max_model_len and self.max_model_len < longest:
            raise ValueError(f"bench layers: --max-model-len {self.max_model_len} is below the longest step's "
                             f"{longest} positions")


@dataclass(frozen=True)
class Scenario:
    name: str  # "prefill 8192" / "decode b8 ctx4096"
    phase: str  # "prefill" or "decode"
    num_seqs: int
    context_len: int  # tokens already in the caches
    new_tokens: int  # per sequence


def scenarios(opts: LayersBenchOptions) -> list[Scenario]:
    """Batch-1 decodes first (the projection needs them), then the prefill, then larger batches,
    so a run cut short by the time budget keeps what matters most."""
    decodes = [Scenario(f"decode b{batch} ctx{context}", "decode", batch, context, 1)
               for batch in sorted(opts.decode_batches) for context in opts.contexts]
    prefill = [Scenario(f"prefill {opts.prefill_tokens}", "prefill", 1, 0, opts.prefill_tokens)] if opts.prefill_tokens else []
    first = [d for d in decodes if d.num_seqs == min(opts.decode_batches)]
    return first + prefill + [d for d in decodes if d not in first]


def run_layers_bench(opts: LayersBenchOptions, out_json: Path, *, echo: Callable[[str], None] = print) -> dict[str, Any]:
    device = resolve_device(opts.device)
    split_mode = resolve_op_split(opts.op_split, device)  # before the weights: a bad pairing fails fast
    full = get_config(opts.config)
    kinds = layer_plan(full, opts.num_layers)
    config = bench_config(full, kinds)
    start = time.perf_counter()
    weights = random_weights(config, device, seed=opts.seed)
    build_s = time.perf_counter() - start
    model, engine = build_bench_model(config, weights, device=device, numerics=opts.numerics,
                                      overrides=opts.kernel_overrides, source=opts.kernel_source,
                                      max_model_len=opts.resolved_max_model_len)
    labels = kernel_labels(model.kernels)
    echo(f"built {len(kinds)} {opts.config} layers ({', '.join(k.value for k in kinds)}) + head on {device} in "
         f"{build_s:.0f} s; {sum(weight_bytes(w) for w in weights.values()) / 1e9:.2f} GB of weights")
    echo(f"kernels (the engine's, overrides {engine.overrides or 'none'} from {engine.source}): "
         + ", ".join(f"{op}={label}" for op, label in labels.items()))
    for line in engine.reasons:
        echo(f"  {line}")
    result: dict[str, Any] = {
        "meta": _meta(opts, device, config, kinds, build_s, engine, labels, model.policy.kv_cache_dtype.value),
        "scenarios": [],
    }
    result["meta"]["op_split_mode"] = split_mode
    profiler = OpProfiler(weight_owners(model), device, mode=split_mode)
    started = time.perf_counter()
    for scenario in scenarios(opts):
        if time.perf_counter() - started > opts.time_budget_s:
            result["scenarios"].append({"scenario": asdict(scenario), "error": f"skipped: the {opts.time_budget_s:.0f} s "
                                        "time budget was spent (--time-budget)"})
            echo(f"{scenario.name}: skipped (time budget)")
            continue
        scenario_start = time.perf_counter()
        try:
            row = _run_scenario(scenario, opts, model, config, kinds, weights, profiler, device)
        except Exception as exc:  # one scenario (e.g. out of memory) must not lose the others
            row = {"scenario": asdict(scenario), "error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"}
            echo(f"{scenario.name}: FAILED {row['error']}")
        else:
            echo(_scenario_line(row))
            for note in row["op_split_notes"]:
                echo(f"  note: {note}")
        row["wall_s"] = time.perf_counter() - scenario_start  # cache fill, compiles, capture, reps, profile
        result["scenarios"].append(row)
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    result["meta"]["scenarios_wall_s"] = time.perf_counter() - started
    result["projection"] = project(result["scenarios"], full, opts)
    for line in step_table(result):
        echo(line)
    for line in projection_lines(result["projection"]):
        echo(line)
    out_json.parent.mkdir(parents=True, exist_ok=True)
    out_json.write_text(json.dumps(result, indent=1))
    return result


def _run_scenario(scenario: Scenario, opts: LayersBenchOptions, model: DeepseekV4Model, config: ModelConfig,
                  kinds: tuple[AttentionKind, ...], weights: dict, profiler: OpProfiler,
                  device: torch.device) -> dict[str, Any]:
    state = build_cache_state(config, model.policy, num_seqs=scenario.num_seqs, context_len=scenario.context_len,
                              new_tokens=scenario.new_tokens, block_size=opts.block_size, device=device,
                              seed=opts.seed)
    g = torch.Generator().manual_seed(opts.seed)
    tokens = torch.randint(0, config.vocab_size, (scenario.num_seqs, scenario.new_tokens), generator=g).tolist()
    batch = ForwardBatch.from_chunks(tokens, list(range(scenario.num_seqs)), [scenario.context_len] * scenario.num_seqs,
                                     logits_for="last", device=device)

    def step() -> None:
        # Re-running a step rewrites the same cache slots with the same values: every rep is the same work.
        model.forward(batch, state)

    first_s = time_steps(step, device, warmup=0, reps=1)[0]  # also the warm-up (kernel compiles, allocator)
    # Slow steps (tens of seconds with reference kernels at full size) get one timed rep, not `reps`.
    # A slow first step may only be Triton compiling, so the first timed step decides.
    times = time_steps(step, device, warmup=max(0, opts.warmup - 1) if first_s < SLOW_STEP_S else 0, reps=1)
    if times[0] < SLOW_STEP_S:
        times += time_steps(step, device, warmup=0, reps=opts.reps - 1)
    reps = len(times)
    total_s = median(times)
    graph: dict[str, Any] = {"graph_s": None, "graph_median_s": None, "graph_status": "prefill: the engine runs it eager"}
    if scenario.phase == "decode":
        graph_args = dict(device=device, max_model_len=opts.resolved_max_model_len, warmup=opts.warmup, reps=reps)
        token_ids, positions = [row[0] for row in tokens], [scenario.context_len] * scenario.num_seqs
        graph = time_graph_decode(model, state, token_ids, positions, **graph_args)
        if graph["graph_median_s"] is not None and scenario.num_seqs == 1:  # the projection's scenarios
            graph.update(time_graph_marginals(model, state, token_ids, positions, [k.value for k in kinds],
                                              graph, **graph_args))

    plain_kernels = model.kernels
    model.set_kernels(profiler.kernels(plain_kernels))
    try:
        split = profiler.profile_step(step)
    finally:
        model.set_kernels(plain_kernels)
    spans, ops = split.spans_s, split.ops_s
    # Layer times: the plain eager step shared out as the split's basis shares it (wall: the
    # profiled spans, slowed by the per-op syncs; device: kernel seconds). Op seconds stay as measured.
    scale = total_s / split.total_s
    kernel_s = split.basis == OP_SPLIT_DEVICE

    kv_entry = state.layers[0].window.bytes_per_entry
    indexer_entry = next((c.indexer.bytes_per_entry for c in state.layers if c.indexer is not None), 0)
    layers = []
    for layer_id, kind in enumerate(kinds):
        owner = f"layer {layer_id}"
        dense, experts = layer_weight_bytes(weights, layer_id)
        routed = routed_bytes(experts, profiler.routed_expert_ids.get(owner, []))
        cache = cache_read_bytes(config, kind, num_seqs=scenario.num_seqs, context_len=scenario.context_len,
                                 new_tokens=scenario.new_tokens, kv_entry_bytes=kv_entry,
                                 indexer_entry_bytes=indexer_entry)
        flops = step_flops(config, kind, num_seqs=scenario.num_seqs, context_len=scenario.context_len,
                           new_tokens=scenario.new_tokens)
        layers.append(_floors(owner, kind.value, spans.get(owner, 0.0) * scale, ops.get(owner, {}),
                              dense + routed + cache, flops, opts, {"weights": dense, "routed_experts": routed,
                                                                    "cache": cache},
                              kernel_s=spans.get(owner, 0.0) if kernel_s else None))
    rows = scenario.num_seqs  # logits rows: the last token of every sequence
    head_bytes = sum(weight_bytes(w) for name, w in weights.items() if not name.startswith(("layers.", "embed.")))
    head_flops = 2.0 * rows * config.vocab_size * config.hidden_size
    head = _floors("head", "head", spans.get("head", 0.0) * scale, ops.get("head", {}), head_bytes, head_flops, opts,
                   {"weights": head_bytes}, kernel_s=spans.get("head", 0.0) if kernel_s else None)
    return {"scenario": asdict(scenario), "first_step_s": first_s, "step_s": times, "step_median_s": total_s,
            "eager_s": total_s, **graph, "preamble_s": split.preamble_s * scale, **_split_fields(split),
            "layers": layers, "head": head}


def _split_fields(split: OpSplit) -> dict[str, Any]:
    """A scenario row's record of how its op split was measured (keys beside the older ones)."""
    device = split.basis == OP_SPLIT_DEVICE
    return {"op_split": split.basis, "op_split_notes": list(split.notes),
            "kernel_s": split.total_s if device else None,  # device kernel seconds placed in the split
            "unattributed_kernel_s": split.unattributed_s if device else None,
            "preamble_kernel_s": split.preamble_s if device else None,
            "num_kernels": split.num_kernels if device else None}


def _floors(owner: str, kind: str, time_s: float, ops: dict[str, float], nbytes: int, flops: float,
            opts: LayersBenchOptions, bytes_split: dict[str, int], *, kernel_s: float | None) -> dict[str, Any]:
    """`time_s`: the owner's share of the eager step; `ops`: its op split (the row's `op_split`
    basis); `kernel_s`: its device kernel seconds on the device basis, else None."""
    bw_floor = nbytes / (opts.bandwidth_tb_s * 1e12)
    flop_floor = flops / (opts.peak_tflops * 1e12)
    return {"owner": owner, "kind": kind, "time_s": time_s, "kernel_s": kernel_s, "bytes": nbytes,
            "bytes_split": bytes_split,
            "bandwidth_floor_s": bw_floor, "ratio_to_bandwidth_floor": time_s / bw_floor if bw_floor else None,
            "achieved_tb_s": nbytes / time_s / 1e12 if time_s else None, "flops": flops,
            "compute_floor_s": flop_floor, "ops_s": dict(sorted(ops.items(), key=lambda kv: -kv[1])),
            "top_op": max(ops, key=ops.get) if ops else None}


def project(rows: list[dict[str, Any]], full: ModelConfig, opts: LayersBenchOptions) -> list[dict[str, Any]]:
    """Full-model single-stream decode per measured context (batch-1 decode scenarios only).

    Timing, best first: (1) the replayed step plus, for every layer the full model has beyond the
    built ones, the marginal graph cost of one more layer of its kind (`time_graph_marginals`);
    (2) the replayed step split across layers in the eager profile's proportions; (3) the eager
    step. `timing` says which. Op shares inside a layer always come from the eager profile, on its
    `op_split` basis. On the device basis, `bottleneck_op` is the op with the most projected kernel
    time (each measured layer's kernel seconds × the count of its kind, + the head's:
    `kernel_ops_s`); on the wall basis, the op with the largest share of the projected step
    (`ops_s`). `bottleneck_basis` says which, in the words the printed line uses."""
    return [_project_row(row, full) for row in rows if "error" not in row
            and row["scenario"]["phase"] == "decode" and row["scenario"]["num_seqs"] == 1]


def _project_row(row: dict[str, Any], full: ModelConfig) -> dict[str, Any]:
    """One batch-1 decode scenario's projection (see `project`)."""
    scen = row["scenario"]
    basis = row.get("op_split", OP_SPLIT_WALL)  # result files from before the device basis are wall
    by_kind: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for layer in row["layers"]:
        by_kind[layer["kind"]].append(layer)
    measured = {kind: layers[0] for kind, layers in by_kind.items()}
    marginal = row.get("graph_marginal_s") or {}
    use_marginal = row.get("graph_median_s") is not None and set(measured) <= set(marginal)
    scale = row["graph_median_s"] / row["eager_s"] if row.get("graph_median_s") is not None else 1.0
    if use_marginal:
        device_step = row.get("graph_device_median_s")
        timing = (f"CUDA-graph replay ({row['graph_median_s'] * 1e3:.2f} ms for the built layers, served step"
                  + (f"; {device_step * 1e3:.2f} ms of it device replay" if device_step is not None else "")
                  + ") + the marginal replayed cost of one more layer of each kind for the rest ("
                  + row.get("graph_marginal_basis", "served steps") + "): " + ", ".join(
                      f"{k} {v * 1e6:.0f} us" for k, v in marginal.items()))
    elif row.get("graph_median_s") is not None:
        timing = (f"CUDA-graph replay ({row['graph_median_s'] * 1e3:.2f} ms vs eager {row['eager_s'] * 1e3:.2f} ms "
                  "for the built layers; layer and op split from the eager profile, scaled)")
    else:
        timing = f"eager (no graph: {row.get('graph_status', 'not attempted')})"

    def layer_time(layer: dict[str, Any]) -> float:
        return marginal[layer["kind"]] if use_marginal else layer["time_s"] * scale

    ops_s, notes = defaultdict(float), []
    if use_marginal:
        total_s = row["graph_median_s"]
        once = total_s - sum(layer_time(layer) for layer in row["layers"])
        ops_s["head and once-per-step work"] += once
    else:
        total_s = (row["head"]["time_s"] + row["preamble_s"]) * scale
        head_ops = sum(row["head"]["ops_s"].values())
        for op, seconds in row["head"]["ops_s"].items():
            if basis == OP_SPLIT_DEVICE and head_ops:  # kernel seconds: share out the head's step time as the layers do
                seconds = row["head"]["time_s"] * seconds / head_ops
            ops_s[f"head {op}"] += seconds * scale
    floor_s = row["head"]["bandwidth_floor_s"]
    stand_ins: list[tuple[int, dict[str, Any]]] = []  # (count of a kind in the full model, its measured layer)
    for kind, count in kinds_by_frequency(full):
        layer = measured.get(kind.value)
        if layer is None:  # not built: borrow the cheapest related measured kind, say so
            stand_in = next(k for k in ("hca", "csa", "sliding") if k in measured)
            layer = measured[stand_in]
            notes.append(f"{count} {kind.value} layers not built: timed as {stand_in} layers "
                         f"({'an upper bound' if kind is AttentionKind.SLIDING else 'an estimate'})")
        stand_ins.append((count, layer))
        extra = count - (len(by_kind[kind.value]) if use_marginal else 0)  # the built ones are in the step
        total_s += extra * layer_time(layer)
        floor_s += count * layer["bandwidth_floor_s"]
        layer_ops = sum(layer["ops_s"].values()) or 1.0
        for op, seconds in layer["ops_s"].items():
            ops_s[op] += count * layer_time(layer) * seconds / layer_ops
    notes.extend(row.get("op_split_notes", []))
    kernel_ops_s: dict[str, float] = defaultdict(float)
    if basis == OP_SPLIT_DEVICE:
        for count, layer in stand_ins:
            for op, seconds in layer["ops_s"].items():
                kernel_ops_s[op] += count * seconds
        for op, seconds in row["head"]["ops_s"].items():
            kernel_ops_s[f"head {op}"] += seconds
    shares = kernel_ops_s if sum(kernel_ops_s.values()) > 0 else ops_s
    bottleneck = max(shares, key=shares.get)
    bottleneck_basis = "of the projected kernel time, layers + head" if shares is kernel_ops_s else "of the step"
    ratios = [layer_time(layer) / layer["bandwidth_floor_s"] for layer in row["layers"]]
    return {
        "label": "PROJECTION (not a measurement): full model, one stream, one GPU's bandwidth",
        "timing": timing, "is_graph": row.get("graph_median_s") is not None, "is_marginal": use_marginal,
        "context_len": scen["context_len"], "step_s": total_s, "tok_s": 1.0 / total_s,
        "bandwidth_floor_step_s": floor_s, "bandwidth_floor_tok_s": 1.0 / floor_s,
        "bottleneck_op": bottleneck, "bottleneck_share": shares[bottleneck] / sum(shares.values()),
        "bottleneck_basis": bottleneck_basis, "op_split": basis,
        "ops_s": dict(sorted(ops_s.items(), key=lambda kv: -kv[1])),
        "kernel_ops_s": dict(sorted(kernel_ops_s.items(), key=lambda kv: -kv[1])) if kernel_ops_s else None,
        "notes": notes,
        "layer_seconds": {layer["owner"]: layer_time(layer) for layer in row["layers"]},
        "layer_ratio_max": max(ratios), "hash_routing_note": "hash-routed layers timed as learned-routing ones",
        "target_layer_ratio": TARGET_RATIO, "layer_ratio_met": max(ratios) <= TARGET_RATIO,
        "target_tok_s": TARGET_TOK_S, "tok_s_met": 1.0 / total_s >= TARGET_TOK_S,
    }


def projection_lines(projection: list[dict[str, Any]]) -> list[str]:
    lines = []
    for p in projection:
        lines.append(
            f"PROJECTION ctx {p['context_len']} [{_projection_kind(p)}]: full-model single-stream "
            f"decode {p['tok_s']:.3g} tok/s "
            f"({p['step_s'] * 1e3:.1f} ms/token; bandwidth floor {p['bandwidth_floor_tok_s']:.0f} tok/s); "
            f"held back by {p['bottleneck_op']} ({100 * p['bottleneck_share']:.0f}% "
            f"{p.get('bottleneck_basis', 'of the step')}); worst layer "
            f"{p['layer_ratio_max']:.1f}x its floor (target {TARGET_RATIO}x: {'met' if p['layer_ratio_met'] else 'missed'}; "
            f"{TARGET_TOK_S:.0f} tok/s: {'met' if p['tok_s_met'] else 'missed'})")
        lines.append(f"  timing: {p['timing']}")
        lines.append(f"  op split: {p.get('op_split', OP_SPLIT_WALL)}")
        lines.extend(f"  note: {n}" for n in p["notes"])
    return lines


def _projection_kind(p: dict[str, Any]) -> str:
    return "graph + marginal layers" if p.get("is_marginal") else "graph" if p["is_graph"] else "eager"


def _graph_words(row: dict[str, Any]) -> str:
    if row.get("graph_median_s") is not None:
        return f"graph {row['graph_median_s'] * 1e3:.2f} ms"
    return f"graph: {row['graph_status']}"


def _scenario_line(row: dict[str, Any]) -> str:
    parts = [f"{row['scenario']['name']}: eager step {row['eager_s'] * 1e3:.1f} ms, {_graph_words(row)}, "
             f"ops by {row.get('op_split', OP_SPLIT_WALL)}"]
    marginal = row.get("graph_marginal_s") or {}
    for layer in [*row["layers"], row["head"]]:
        replayed = marginal.get(layer["kind"]) if layer["owner"] != "head" else None
        parts.append(f"{layer['owner']} ({layer['kind']}) eager {layer['time_s'] * 1e3:.2f} ms = "
                     f"{layer['ratio_to_bandwidth_floor']:.1f}x bw floor {layer['bandwidth_floor_s'] * 1e6:.0f} us"
                     + (f", replayed marginal {replayed * 1e6:.0f} us = {replayed / layer['bandwidth_floor_s']:.1f}x"
                        if replayed is not None else "")
                     + (f", kernels {layer['kernel_s'] * 1e6:.0f} us" if layer.get("kernel_s") is not None else "")
                     + f", top op {layer['top_op']}")
    return "; ".join(parts)


def summary_table(result: dict[str, Any]) -> list[str]:
    """Markdown rows (for docs/benchmarks.md)."""
    rows = ["| scenario | layer | time ms | bytes MB | bw floor us | x floor | TB/s | compute floor us | top op (ms) |",
            "|---|---|---|---|---|---|---|---|---|"]
    for row in result["scenarios"]:
        if "error" in row:
            rows.append(f"| {row['scenario']['name']} | - | failed: {row['error'][:80]} | | | | | | |")
            continue
        rows.append(f"| {row['scenario']['name']} | whole step | eager {row['eager_s'] * 1e3:.2f}; "
                    f"{_graph_words(row)} | | | | | | |")
        for layer in [*row["layers"], row["head"]]:
            top = layer["top_op"]
            rows.append(f"| {row['scenario']['name']} | {layer['owner']} {layer['kind']} | {layer['time_s'] * 1e3:.2f} | "
                        f"{layer['bytes'] / 1e6:.1f} | {layer['bandwidth_floor_s'] * 1e6:.1f} | "
                        f"{layer['ratio_to_bandwidth_floor']:.1f} | {layer['achieved_tb_s']:.3f} | "
                        f"{layer['compute_floor_s'] * 1e6:.1f} | {top} ({layer['ops_s'].get(top, 0) * 1e3:.2f}) |")
    return rows


def step_table(result: dict[str, Any]) -> list[str]:
    """The printed summary: each scenario's whole step, eager and (decode) CUDA-graph replay."""
    lines = [f"{'scenario':<24} {'eager ms':>10} {'graph ms':>10}  graph"]
    for row in result["scenarios"]:
        name = row["scenario"]["name"]
        if "error" in row:
            lines.append(f"{name:<24} {'-':>10} {'-':>10}  {row['error'][:100]}")
            continue
        graph_ms = f"{row['graph_median_s'] * 1e3:.2f}" if row.get("graph_median_s") is not None else "-"
        lines.append(f"{name:<24} {row['eager_s'] * 1e3:>10.2f} {graph_ms:>10}  {row['graph_status']}")
    return lines


def _meta(opts: LayersBenchOptions, device: torch.device, config: ModelConfig, kinds: tuple[AttentionKind, ...],
          build_s: float, engine: EngineKernels, labels: dict[str, str], kv_cache_dtype: str) -> dict[str, Any]:
    versions = {}
    for package in ("mxserve", "torch", "triton"):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    return {
        "date_utc": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S"),
        "command": " ".join(sys.argv), "python": platform.python_version(), "versions": versions,
        "device": str(device), "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor(),
        "options": asdict(opts), "layer_kinds": [k.value for k in kinds], "weights_build_s": build_s,
        "kernels": labels, "kernel_overrides": engine.overrides, "kernel_source": engine.source,
        "kernel_builder": "mxserve.model.kernel_selection.build_engine_model (the engine's)",
        "linear_backend": engine.linear_backend, "kernel_reasons": list(engine.reasons),
        "max_model_len": opts.resolved_max_model_len, "numerics": opts.numerics,
        "kv_cache_dtype": kv_cache_dtype, "hidden_size": config.hidden_size,
        "floors": f"bandwidth {opts.bandwidth_tb_s} TB/s (copy), compute {opts.peak_tflops} TFLOP/s (bf16 dense)",
    }
