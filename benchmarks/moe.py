"""Roofline benchmark of the Triton MoE on the DeepSeek-V4-Flash layer (GPU only), issue 10.

Layer: 256 routed experts (MXFP4, gate/up 2048x4096, down 4096x2048), top-6, plus the shared
expert (FP8 block, same shapes). Random release-format weights (codes uniform, UE8M0 group
scales in [112, 122]). For tokens in {1, 4, 16, 64, 256, 1024, 4096} and routing "real" (the
Triton router on random activations and a random gate) and "worst" (every token on experts 0..5,
so expert 0 gets all tokens) it times, under CUDA-graph replay with a different routing per call
inside one graph (so the hit experts are not in L2 from the previous call):
  routed part (sort + gate/up + down + combine + activation quantization) for the variants
    bf16 (weights widened to bf16), w4a8 (FP8 tensor cores), repack (128x128 FP8 block weights),
  the router alone, the shared expert on `linear_fp8_block`'s Triton kernel,
  bf16 grouped matmul on the same experts (`torch._grouped_mm`, else a per-expert loop),
  dequantize-then-matmul (eager: dequantize the hit experts to bf16, then matmul; events).
It reports time, bytes of the experts actually hit, achieved TB/s, fraction of the measured
copy bandwidth and of 4.27 TB/s, and same-run ratios. First it checks parity against the fp64
torch twin (`moe_experts_ref`) at every token count and routing, and batch invariance.

    PYTHONPATH=src python benchmarks/moe.py --out $OUT/moe.json      # ~2-3 min on an H200
    PYTHONPATH=src python benchmarks/moe.py --variants bf16 bf16-split --tokens 1 4 16 64 256 \
        --skip invariance --out $OUT/moe_split.json                  # issue 10: split decode vs fused
    PYTHONPATH=src python benchmarks/moe.py --variants bf16 bf16-split bf16-stream --tokens 1 4 16 64 \
        --stream-configs n64s4 n64s6 n128s4 n64s4pdl --no-twin --baselines grouped --kernel-times 1 64 \
        --skip invariance --out $OUT/moe_stream.json                 # issue 10: streaming decode, config sweep
    PYTHONPATH=src python benchmarks/moe.py --variants bf16 bf16-prefill --tokens 1024 4096 \
        --prefill-configs m64w8s3 m128w8s3 --parity-max-tokens 4096 --no-twin --baselines grouped \
        --skip invariance --out $OUT/moe_prefill.json                # issue 10: the prefill tile, config sweep
Split-K configs (`--splitk-configs`, variant "bf16-stream-splitk" under each `stream_splitk.CONFIG`):
n<block_n>s<stages>g<gate/up splits>d<down splits>[r<maxnreg>][pdl] at this layer's D and I (g2: K_SPLIT =
D/2; pdl: gate/up and down as early starts), e.g. n64s4g2d2r80; each is a column "splitk:<name>", checked against the twin, against "bf16"
(the fused kernel) and "bf16-stream" (normwise errors) and for token 0 alone in the parity section.
Stream configs (`--stream-configs`, variant "bf16-stream" under each `stream.CONFIG`): n<block_n>
s<num_stages>[w<num_warps>][pdl], e.g. n64s4pdl; each is timed as its own column and bit-checked
against "bf16" (the fused kernel) in the parity section. Prefill configs (`--prefill-configs`,
variant "bf16-prefill" under each `prefill.CONFIG`): m<block_m>w<num_warps>s<num_stages>[n<down
block_n>][dw<down warps>ds<down stages>] (one block_m at every size), the same way; the prefill
table at the end gives each column's ms, useful TFLOP/s and ratio to the bf16 grouped matmul.
MMA order A/B (`--mma-ab`, instead of everything above): variant "bf16" (the default) with the old K
order ("old", MXSERVE_MOE_MMA_ORDER=0) against the MMA order ("new", =1; "new-tile": the same with
tile="prefill", the prefill tile in MMA order, at <= MMA_DECODE_MAX_PAIRS pairs), real routing only:
token 0, n/2 and n-1 alone == in the batch, new-tile == new bit for bit, normwise new vs old, then us a
call under graph replay. `--mma-ab-cols` picks columns (with --warm-only: compile them, one process
per column to fill the cache in parallel).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import time
import traceback
from contextlib import contextmanager
from pathlib import Path

import torch
from _cuda_timing import copy_bandwidth, event_time, graph_time

from mxserve.formats import QuantizedWeight, WeightLayout
from mxserve.kernels.moe import ExpertWeights, moe_experts_ref, prefill, stream, stream_splitk
from mxserve.kernels.moe.experts import StackedExperts, moe_experts_triton
from mxserve.kernels.moe.router import route_triton

E, D, I, TOP_K = 256, 4096, 2048, 6
DEVICE = "cuda"  # --cpu-smoke: "cpu" (the interpreter), with a tiny layer and wall-clock timers
TOKENS = (1, 4, 16, 64, 256, 1024, 4096)
NOMINAL_TBS = 4.27e12
LIMIT = 10.0
TIMED_VARIANTS = {  # timed name: (moe_experts_triton variant, layer)
    "bf16": ("bf16-fused", "mxfp4"), "w4a8": ("w4a8", "mxfp4"), "repack": ("bf16", "fp8"),
    "bf16-split": ("bf16-split", "mxfp4"), "bf16-stream": ("bf16-stream", "mxfp4"),
    "bf16-prefill": ("bf16-prefill", "mxfp4"), "bf16-stream-splitk": ("bf16-stream-splitk", "mxfp4"),
}
GROUPED_MM = [hasattr(torch, "_grouped_mm")]  # falls back to a per-expert loop if it fails once


def stream_config(name: str) -> dict:
    """`stream.CONFIG` of a config name n<block_n>s<stages>[w<warps>][pdl] (module docstring)."""
    m = re.fullmatch(r"n(\d+)s(\d+)(?:w(\d+))?(pdl)?", name)
    if m is None:
        raise ValueError(f"stream config {name!r} is not n<block_n>s<stages>[w<warps>][pdl]")
    return dict(stream.CONFIG, block_n=int(m.group(1)), num_stages=int(m.group(2)), num_warps=int(m.group(3) or 4),
                pdl=m.group(4) is not None)


def prefill_config(name: str) -> dict:
    """`prefill.CONFIG` of a config name m<block_m>w<warps>s<stages>[n<down block_n>][dw<w>ds<s>] (docstring)."""
    m = re.fullmatch(r"m(\d+)w(\d+)s(\d+)(?:n(\d+))?(?:dw(\d+)ds(\d+))?", name)
    if m is None:
        raise ValueError(f"prefill config {name!r} is not m<block_m>w<warps>s<stages>[n<down_block_n>][dw<w>ds<s>]")
    block_m, warps, stages = int(m.group(1)), int(m.group(2)), int(m.group(3))
    tile = prefill.Tile(block_m, warps, stages, int(m.group(4) or 128), int(m.group(5) or warps),
                        int(m.group(6) or stages))
    return dict(prefill.CONFIG, tiers=((None, tile),))


SPLITK_CONFIG = re.compile(r"n(\d+)s(\d+)(?:w(\d+))?g(\d+)d(\d+)(?:r(\d+))?(pdl)?")


def splitk_config(name: str) -> dict:
    """`stream_splitk.CONFIG` of a config name n<block_n>s<stages>[w<warps>]g<splits>d<splits>[r<maxnreg>][pdl]
    (module docstring): K columns per program D / g for gate/up, I / d for down; pdl: early starts."""
    m = SPLITK_CONFIG.fullmatch(name)
    if m is None:
        raise ValueError(f"split-K config {name!r} is not n<block_n>s<stages>[w<warps>]g<splits>d<splits>[r<maxnreg>]")
    g, d = int(m.group(4)), int(m.group(5))
    if D % (128 * g) or I % (128 * d):
        raise ValueError(f"split-K config {name!r}: D={D} / {g} and I={I} / {d} must be multiples of 128")
    return dict(stream_splitk.CONFIG, block_n=int(m.group(1)), num_stages=int(m.group(2)),
                num_warps=int(m.group(3) or 4), gate_up_k_split=D // g, down_k_split=I // d,
                maxnreg=int(m.group(6) or 0), pdl=m.group(7) is not None)


@contextmanager
def stream_configured(name: str | None):
    """Run the body with `stream.CONFIG` (a stream config name), `stream_splitk.CONFIG` (a split-K
    config name, "...g<n>d<n>...") or `prefill.CONFIG` (a prefill config name, "m...") set to config
    `name` (None: as they are)."""
    if name is not None and name.startswith("m"):
        module, config = prefill, prefill_config
    elif name is not None and SPLITK_CONFIG.fullmatch(name):
        module, config = stream_splitk, splitk_config
    else:
        module, config = stream, stream_config
    old = dict(module.CONFIG)
    if name is not None:
        module.CONFIG.update(config(name))
    try:
        yield
    finally:
        module.CONFIG.clear()
        module.CONFIG.update(old)


def timed_entries(variants: list[str], configs: list[str], prefill_configs: list[str] = (),
                  splitk_configs: list[str] = ()) -> list[tuple[str, str, str, str | None]]:
    """(column, moe_experts_triton variant, layer, config) for every variant and stream / prefill /
    split-K config."""
    out = []
    for name in variants:
        v, which = TIMED_VARIANTS[name]
        if name == "bf16-stream" and configs:
            out += [(f"stream:{c}", v, which, c) for c in configs]
        elif name == "bf16-stream-splitk" and splitk_configs:
            out += [(f"splitk:{c}", v, which, c) for c in splitk_configs]
        elif name == "bf16-prefill" and prefill_configs:
            out += [(f"prefill:{c}", v, which, c) for c in prefill_configs]
        else:
            out.append((name, v, which, None))
    return out


def kernel_times(st, cases, entries, log, n, pattern) -> None:
    """Device time per kernel (torch.profiler, eager calls, us per call) of every timed entry."""
    from torch.profiler import ProfilerActivity, profile

    for col, v, which, cfg in entries:
        if which != "mxfp4":
            continue
        try:
            with stream_configured(cfg):
                for c in cases:  # compile and warm up outside the profile
                    moe_experts_triton(c[0], c[2], c[1], st, limit=LIMIT, quantize_inputs=True,
                                       hidden_dtype=torch.bfloat16, variant=v)
                torch.cuda.synchronize()
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for c in cases:
                        moe_experts_triton(c[0], c[2], c[1], st, limit=LIMIT, quantize_inputs=True,
                                           hidden_dtype=torch.bfloat16, variant=v)
                    torch.cuda.synchronize()
            rows = {}
            for evt in prof.key_averages():
                dev_us = getattr(evt, "self_device_time_total", 0.0) or 0.0
                if dev_us > 0:
                    rows[evt.key[:60]] = round(dev_us / len(cases), 2)
            row = {"kind": "kernel_times", "tokens": n, "routing": pattern, "entry": col, "us_per_call": rows}
        except Exception as exc:
            row = {"kind": "kernel_times", "tokens": n, "routing": pattern, "entry": col, "error": repr(exc)[:300]}
        log.append(row)
        print(json.dumps(row), flush=True)


def random_layer(seed: int) -> StackedExperts:
    g = torch.Generator(device=DEVICE).manual_seed(seed)

    def codes(n, k):
        return torch.randint(0, 256, (E, n, k // 2), dtype=torch.uint8, device=DEVICE, generator=g)

    def scales(n, k):
        return torch.randint(112, 123, (E, n, k // 32), dtype=torch.uint8, device=DEVICE, generator=g)

    return StackedExperts("mxfp4", codes(I, D), scales(I, D), codes(I, D), scales(I, D), codes(D, I), scales(D, I),
                          E, I, D)


def random_fp8_layer(seed: int) -> StackedExperts:
    """Timing stand-in for the repacked layer: same shapes and bytes as the repack produces."""
    g = torch.Generator(device=DEVICE).manual_seed(seed)

    def codes(n, k):
        c = torch.randint(0, 256, (E, n, k), dtype=torch.uint8, device=DEVICE, generator=g)
        return torch.where((c & 0x7F) == 0x7F, c & 0xF0, c)  # no NaN codes

    def scales(n, k):
        return torch.randint(112, 123, (E, n // 128, k // 128), dtype=torch.uint8, device=DEVICE, generator=g)

    return StackedExperts("fp8_block", codes(I, D), scales(I, D), codes(I, D), scales(I, D), codes(D, I),
                          scales(D, I), E, I, D)


def experts_view(st: StackedExperts, ids: list[int]) -> dict[int, ExpertWeights]:
    def q(c, s, e, cols):
        return QuantizedWeight.from_mxfp4(c[e], s[e], cols)

    return {e: ExpertWeights(q(st.w1, st.w1_scales, e, D), q(st.w2, st.w2_scales, e, I), q(st.w3, st.w3_scales, e, D))
            for e in ids}


class _Lazy(dict):
    """experts[e] for the reference, built on first access (the twin indexes by expert id)."""

    def __init__(self, st):
        super().__init__()
        self.st = st

    def __getitem__(self, e):
        if e not in self:
            self.update(experts_view(self.st, [e]))
        return dict.__getitem__(self, e)


def routings(num_tokens: int, count: int, gate: torch.Tensor, bias: torch.Tensor, seed: int):
    """`count` (x, weights, ids) triples per pattern, each with fresh activations."""
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    real, worst = [], []
    for _ in range(count):
        x = (torch.randn(num_tokens, D, device=DEVICE, generator=g)).bfloat16()
        w, ids = route_triton(x, gate, top_k=TOP_K, routed_scaling=1.5, bias=bias)
        real.append((x, w, ids))
        wid = torch.arange(TOP_K, device=DEVICE).repeat(num_tokens, 1)
        worst.append((x, w, wid))
    return {"real": real, "worst": worst}


def dequant_bf16(st: StackedExperts, e: torch.Tensor, which: str) -> torch.Tensor:
    """Dequantize experts e (int tensor) of one matrix to bf16 [n_e, N, K] with torch ops."""
    codes, scales = {"w1": (st.w1, st.w1_scales), "w3": (st.w3, st.w3_scales), "w2": (st.w2, st.w2_scales)}[which]
    c, s = codes[e], scales[e]
    lut = torch.tensor([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6], device=DEVICE)
    vals = torch.stack([lut[(c & 15).long()], lut[(c >> 4).long()]], dim=-1).flatten(-2)
    sc = torch.exp2(s.float() - 127).repeat_interleave(32, dim=-1)
    return (vals * sc).bfloat16()


def bf16_grouped(x, ids, w, w13, w2, hit_index):
    """bf16 grouped matmul on the hit experts: tokens sorted by expert, `torch._grouped_mm` (or a loop)."""
    flat = ids.reshape(-1)
    order = torch.sort(flat, stable=True).indices
    tok = order // TOP_K
    local = hit_index[flat[order]]
    # scatter_add, not bincount: bincount sizes its output from max(local), a host sync that made
    # the baseline's graph capture fail (it then ran as an eager loop)
    counts = torch.zeros(w13.shape[0], dtype=torch.long, device=DEVICE).scatter_add_(0, local, torch.ones_like(local))
    offs = torch.cumsum(counts, 0).int()
    xs = x[tok]
    if GROUPED_MM[0]:
        gu = torch._grouped_mm(xs, w13.transpose(1, 2), offs=offs)
    else:  # per-expert loop (host-side split: eager only)
        gu = torch.cat([a @ b.t() for a, b in zip(torch.split(xs, counts.tolist()), w13, strict=True)])
    gate, up = gu[:, :I].float(), gu[:, I:].float()
    h = (torch.nn.functional.silu(gate.clamp(max=LIMIT)) * up.clamp(-LIMIT, LIMIT)).bfloat16()
    if GROUPED_MM[0]:
        y = torch._grouped_mm(h, w2.transpose(1, 2), offs=offs)
    else:
        y = torch.cat([a @ b.t() for a, b in zip(torch.split(h, counts.tolist()), w2, strict=True)])
    out = torch.zeros(x.shape[0], D, dtype=torch.float32, device=DEVICE)
    out.index_add_(0, tok, y.float() * w.reshape(-1)[order][:, None])
    return out


def dequant_then_matmul(st, x, ids, w):
    out = torch.zeros(x.shape[0], D, dtype=torch.float32, device=DEVICE)
    for e in torch.unique(ids).tolist():
        t, slot = torch.nonzero(ids == e, as_tuple=True)
        et = torch.tensor([e], device=DEVICE)
        w1, w3, w2 = (dequant_bf16(st, et, n)[0] for n in ("w1", "w3", "w2"))
        xe = x[t]
        h = torch.nn.functional.silu((xe @ w1.t()).float().clamp(max=LIMIT)) * (xe @ w3.t()).float().clamp(-LIMIT, LIMIT)
        out.index_add_(0, t, (h * w[t, slot][:, None]).bfloat16().matmul(w2.t()).float())
    return out


def baselines(row: dict, st: StackedExperts, case: tuple, n: int, pattern: str, dequant: bool = True) -> None:
    """bf16 grouped matmul and dequantize-then-matmul on the experts of one routing (same run)."""
    x, w, ids = case
    try:
        hit_ids = torch.unique(ids)
        hit_index = torch.full((E,), -1, dtype=torch.long, device=DEVICE)
        hit_index[hit_ids] = torch.arange(hit_ids.numel(), device=DEVICE)
        w13 = torch.cat([dequant_bf16(st, hit_ids, "w1"), dequant_bf16(st, hit_ids, "w3")], dim=1)
        w2 = dequant_bf16(st, hit_ids, "w2")

        def grouped():
            return bf16_grouped(x, ids, w, w13, w2, hit_index)

        try:
            row["bf16_grouped_us"] = graph_time([grouped], replays=5) * 1e6
        except Exception as exc:
            row["grouped_mm_error"] = repr(exc)[:300]
            GROUPED_MM[0] = False
            row["bf16_grouped_us"] = event_time(grouped) * 1e6
        row["bf16_grouped_kind"] = "torch._grouped_mm (graph)" if GROUPED_MM[0] else "loop (eager)"
        mine = moe_experts_triton(x, ids, w, st, limit=LIMIT, quantize_inputs=False, hidden_dtype=torch.bfloat16)
        row["bf16_grouped_err_vs_ours"] = rel_err(grouped(), mine)
        row["bf16_us_same_experts"] = graph_time([lambda: moe_experts_triton(
            x, ids, w, st, limit=LIMIT, quantize_inputs=True, hidden_dtype=torch.bfloat16)], replays=5) * 1e6
    except Exception as exc:
        row["bf16_grouped_error"] = repr(exc)[:300]
    if dequant and (n <= 256 or pattern == "worst"):
        try:
            row["dequant_matmul_us"] = event_time(lambda: dequant_then_matmul(st, x, ids, w), reps=3) * 1e6
        except Exception as exc:
            row["dequant_matmul_error"] = repr(exc)[:300]


def warm(entries, decode_tokens: list[int] | None = None) -> None:
    """Compile what a run of `entries` launches (prefill sizes, faithful numerics) on an 8-expert layer of
    the same D and I: the kernels take the expert count only as a run-time value, except the sort
    (cheap to compile), so the run's own layer then finds them in the Triton cache. `decode_tokens`:
    instead, only the entries at these token counts as the timing calls them (the decode kernels)."""
    global E
    E_run, E = E, 8
    try:
        st = random_layer(1)
        g = torch.Generator(device=DEVICE).manual_seed(0)
        gate = (torch.randn(E, D, device=DEVICE, generator=g) * 0.02).bfloat16()
        x = torch.randn(64, D, device=DEVICE, generator=g).bfloat16()
        w, ids = route_triton(x, gate, top_k=TOP_K, routed_scaling=1.5, bias=torch.zeros(E, device=DEVICE))
        kw = dict(limit=LIMIT, quantize_inputs=True, hidden_dtype=torch.bfloat16)
        if decode_tokens is not None:
            for _, v, which, cfg in entries:
                for n in decode_tokens:
                    if which == "mxfp4":
                        with stream_configured(cfg):
                            moe_experts_triton(x[:n], ids[:n], w[:n], st, variant=v, **kw)
            if DEVICE == "cuda":
                torch.cuda.synchronize()
            return
        for _, v, which, cfg in entries:
            if which == "mxfp4":
                with stream_configured(cfg):
                    moe_experts_triton(x, ids, w, st, variant=v, tile="prefill", **kw)
        # the default variant: every tier of the prefill tile, and one token (the stream decode)
        for _, t in prefill.CONFIG["tiers"]:
            with stream_configured(f"m{t.block_m}w{t.num_warps}s{t.num_stages}n{t.down_block_n}"
                                   f"dw{t.down_num_warps}ds{t.down_num_stages}"):
                moe_experts_triton(x, ids, w, st, variant="bf16", tile="prefill", **kw)
        moe_experts_triton(x[:1], ids[:1], w[:1], st, **kw)
        if DEVICE == "cuda":
            torch.cuda.synchronize()
    finally:
        E = E_run


MMA_AB_COLS = {"old": ("0", "auto"), "new": ("1", "auto"), "new-tile": ("1", "prefill")}  # (env, tile)


def mma_order_ab(tokens: list[int], cols: list[str], deadline: float, warm_only: bool, out: Path | None) -> None:
    """--mma-ab (module docstring): the Flash layer, real routing, faithful numerics."""
    from mxserve.kernels.moe import experts as experts_mod

    t0 = time.time()
    st = random_layer(1)
    gen = torch.Generator(device=DEVICE).manual_seed(2)
    gate = (torch.randn(E, D, device=DEVICE, generator=gen) * 0.02).bfloat16()
    bias = torch.randn(E, device=DEVICE, generator=gen) * 0.01
    kw = dict(limit=LIMIT, quantize_inputs=True, hidden_dtype=torch.bfloat16, variant="bf16")

    def call(col, x, w, ids):
        env, tile = MMA_AB_COLS[col]
        os.environ[experts_mod.MMA_ORDER_ENV] = env  # read by each call (and so at graph capture)
        return moe_experts_triton(x, ids, w, st, tile=tile, **kw)

    log: list[dict] = []
    for n in tokens:
        if time.time() - t0 > deadline:
            log.append({"kind": "skipped", "tokens": n, "why": "deadline"})
            break
        here = [c for c in cols if c != "new-tile" or (n > 1 and n * TOP_K <= experts_mod.MMA_DECODE_MAX_PAIRS)]
        count = 8 if n <= 64 else 2  # routings per graph: decode-sized calls hit few experts (L2-cold rotation)
        cases = routings(n, count, gate, bias, seed=100 + n)["real"]
        x, w, ids = cases[0]
        row = {"kind": "mma_ab", "tokens": n, "routing": "real"}
        try:
            outs = {c: call(c, x, w, ids) for c in here}
            if warm_only:
                for c in here:  # and the token alone (the decode)
                    call(c, x[:1], w[:1], ids[:1])
                if DEVICE == "cuda":
                    torch.cuda.synchronize()
                print(f"warm {n}: {here} ({time.time() - t0:.0f} s)", flush=True)
                continue
            for c in here:
                alone_ok = [torch.equal(call(c, x[t:t + 1], w[t:t + 1], ids[t:t + 1])[0], outs[c][t])
                            for t in sorted({0, n // 2, n - 1})]
                row[f"{c}_alone_equal"] = all(alone_ok)
            if "new" in outs and "old" in outs:
                row["new_vs_old"] = rel_err(outs["new"], outs["old"])
            if "new-tile" in outs and "new" in outs:
                row["new_tile_equal_new"] = torch.equal(outs["new-tile"], outs["new"])
            for c in here:
                calls = [lambda c=c, k=k: call(c, k[0], k[1], k[2]) for k in cases]
                row[f"{c}_us"] = graph_time(calls, replays=10 if n <= 64 else 5) * 1e6
        except Exception as exc:
            traceback.print_exc()
            row["error"] = repr(exc)[:300]
        log.append(row)
        print(json.dumps(row), flush=True)
    if out and not warm_only:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"rows": log}, indent=1))


def cpu_smoke_setup() -> None:
    """--cpu-smoke: every section on the CPU under TRITON_INTERPRET=1 with a tiny layer (8 experts,
    D 256, I 128), host wall-clock timers in place of the CUDA ones: checks that the script runs
    through (its numbers mean nothing)."""
    global DEVICE, E, D, I, graph_time, event_time, copy_bandwidth
    if os.environ.get("TRITON_INTERPRET") != "1":
        raise SystemExit("--cpu-smoke needs TRITON_INTERPRET=1 in the environment (set before Triton is imported)")
    DEVICE, E, D, I = "cpu", 8, 256, 128

    def wall_event_time(fn, reps: int = 5) -> float:
        fn()
        start = time.perf_counter()
        for _ in range(reps):
            fn()
        return (time.perf_counter() - start) / reps

    def wall_graph_time(calls: list, replays: int = 15) -> float:
        return wall_event_time(lambda: [fn() for fn in calls], reps=1) / len(calls)

    graph_time, event_time, copy_bandwidth = wall_graph_time, wall_event_time, lambda: NOMINAL_TBS


def print_prefill_table(log: list[dict], entries) -> None:
    """Per timed row and column: ms, useful TFLOP/s (tokens x top-k x 3 matmuls of D x I, no padding) and
    the bf16 grouped matmul's time over this column's (> 1: faster than the grouped matmul)."""
    print("\nMoE prefill: variant, tokens, routing, ms, TFLOP/s, x bf16mm (grouped matmul ms / ms)")
    print(f"{'variant':>24} {'tok':>6} {'routing':>8} {'ms':>9} {'TFLOP/s':>8} {'x bf16mm':>9}")
    cols = [("bf16-fused" if e[0] == "bf16" else e[0], f"{e[0]}_us") for e in entries] + [("bf16 (default)", "bf16_us_same_experts"),
                                                     ("bf16 grouped mm", "bf16_grouped_us")]
    for r in log:
        if r.get("kind") != "time":
            continue
        flop = r["tokens"] * TOP_K * 3 * D * I * 2
        for name, key in cols:
            if key not in r:
                continue
            us = r[key]
            ratio = f"{r['bf16_grouped_us'] / us:.2f}" if "bf16_grouped_us" in r else "-"
            print(f"{name:>24} {r['tokens']:>6} {r['routing']:>8} {us / 1e3:>9.3f} {flop / (us * 1e-6) / 1e12:>8.1f} "
                  f"{ratio:>9}")


def rel_err(out, ref) -> float:
    return float((out.double() - ref.double()).norm() / ref.double().norm().clamp(min=1e-300))


def section(name, log, fn):
    t0 = time.time()
    try:
        fn()
    except Exception as exc:  # the lead gets one run: report and continue
        traceback.print_exc()
        log.append({"kind": "error", "section": name, "error": repr(exc)[:500]})
    print(f"[{name}: {time.time() - t0:.1f} s]", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--tokens", type=int, nargs="*", default=list(TOKENS))
    ap.add_argument("--skip", nargs="*", default=[], choices=["parity", "invariance", "timing", "extras", "exact"],
                    help="extras: the router and shared-expert timings; exact: the parity section's exact-numerics "
                         "(fp32) bit check of the stream decode")
    ap.add_argument("--deadline", type=float, default=165.0, help="seconds after which no new token count is timed")
    ap.add_argument("--variants", nargs="*", default=["bf16", "w4a8", "repack"], choices=list(TIMED_VARIANTS),
                    help="routed-part variants to time (bf16-split: issue 10's split decode, next to bf16)")
    ap.add_argument("--stream-configs", nargs="*", default=[], help="bf16-stream configs to time (docstring)")
    ap.add_argument("--splitk-configs", nargs="*", default=[], help="bf16-stream-splitk configs to time (docstring)")
    ap.add_argument("--warm-tokens", type=int, nargs="*", default=None,
                    help="with --warm-only: compile the timed entries at these token counts only (decode kernels)")
    ap.add_argument("--prefill-configs", nargs="*", default=[], help="bf16-prefill configs to time (docstring)")
    ap.add_argument("--cpu-smoke", action="store_true", help="tiny layer on the CPU under TRITON_INTERPRET=1 (runs through)")
    ap.add_argument("--time-tokens", type=int, nargs="*", default=None, help="token counts to time (default: --tokens)")
    ap.add_argument("--warm-only", action="store_true",
                    help="compile every timed entry on an 8-expert layer of the same D, I (run several at once to "
                         "fill the Triton cache in parallel), then exit")
    ap.add_argument("--parity-max-tokens", type=int, default=1024, help="parity runs min(tokens, this)")
    ap.add_argument("--no-twin", action="store_true", help="parity: skip the fp64 twin (bit checks vs bf16 only)")
    ap.add_argument("--baselines", choices=["all", "grouped", "none"], default="all",
                    help="same-run baselines: bf16 grouped matmul and dequantize-then-matmul, the first, or none")
    ap.add_argument("--kernel-times", type=int, nargs="*", default=[],
                    help="token counts at which to record device time per kernel (torch.profiler, eager, real routing)")
    ap.add_argument("--baseline-max-tokens", type=int, default=1 << 30,
                    help="same-run baselines only up to this many tokens (they dequantize every hit expert)")
    ap.add_argument("--mma-ab", action="store_true", help="the MMA order A/B only (module docstring)")
    ap.add_argument("--mma-ab-cols", nargs="*", default=list(MMA_AB_COLS), choices=list(MMA_AB_COLS))
    args = ap.parse_args()
    for cfg in args.stream_configs:
        stream_config(cfg)  # a bad name fails here, before any GPU work
    for cfg in args.splitk_configs:
        splitk_config(cfg)
    for cfg in args.prefill_configs:
        prefill_config(cfg)
    entries = timed_entries(args.variants, args.stream_configs, args.prefill_configs, args.splitk_configs)
    if args.cpu_smoke:
        cpu_smoke_setup()
        args.kernel_times = []
    else:
        assert torch.cuda.is_available(), "benchmarks/moe.py needs a GPU"
    if args.mma_ab:
        mma_order_ab(args.time_tokens or args.tokens, args.mma_ab_cols, args.deadline, args.warm_only, args.out)
        return
    t_start = time.time()
    if args.warm_only:
        warm(entries, args.warm_tokens)
        print(f"warm: {[e[0] for e in entries]} compiled in {time.time() - t_start:.0f} s", flush=True)
        return
    log: list[dict] = []
    st = random_layer(1)
    gen = torch.Generator(device=DEVICE).manual_seed(2)
    gate = (torch.randn(E, D, device=DEVICE, generator=gen) * 0.02).bfloat16()
    bias = torch.randn(E, device=DEVICE, generator=gen) * 0.01
    per_expert_bytes = st.nbytes_per_expert
    ceiling = {}
    section("copy bandwidth", log, lambda: ceiling.setdefault("copy", copy_bandwidth()))
    copy_bw = ceiling.get("copy", NOMINAL_TBS)
    print(f"copy bandwidth {copy_bw / 1e12:.2f} TB/s; one expert {per_expert_bytes / 1e6:.2f} MB", flush=True)
    fp8 = {}
    if "repack" in args.variants:  # 6.4 GB of FP8 codes: built only when timed
        section("fp8 stand-in layer", log, lambda: fp8.setdefault("st", random_fp8_layer(3)))

    # parity against the fp64 twin: every token count and routing, variants bf16 and w4a8
    ref_experts = _Lazy(st)

    def parity():
        for n in args.tokens:
            for pattern, cases in routings(min(n, args.parity_max_tokens), 1, gate, bias, seed=10 + n).items():
                x, w, ids = cases[0]
                ref = None if args.no_twin else moe_experts_ref(x, ids, w, ref_experts, limit=LIMIT,
                                                               quantize_inputs=True, hidden_dtype=torch.bfloat16)
                row = {"kind": "parity", "tokens": x.shape[0], "routing": pattern}
                outs = {}
                checked = [e for e in entries if e[2] == "mxfp4"]
                if not any(e[1] == "bf16-fused" for e in checked):
                    checked.insert(0, ("bf16", "bf16-fused", "mxfp4", None))
                if not args.no_twin and not any(e[1] == "w4a8" for e in checked):
                    checked.append(("w4a8", "w4a8", "mxfp4", None))
                for col, v, _, cfg in checked:
                    try:
                        with stream_configured(cfg):
                            out = outs[col] = moe_experts_triton(x, ids, w, st, limit=LIMIT, quantize_inputs=True,
                                                                 hidden_dtype=torch.bfloat16, variant=v)
                    except Exception as exc:
                        row[col + "_error"] = repr(exc)[:300]
                        continue
                    if ref is not None:
                        row[col] = rel_err(out, ref)
                    row[col + "_nan"] = bool(torch.isnan(out).any())
                fused = outs.get("bf16")
                if any(col.startswith(("prefill:", "bf16-prefill")) for col in outs) and fused is not None:
                    # the default variant (the prefill tile at prefill sizes) and a token alone (the stream
                    # decode): the fused variant's bits, and row 0 of the batch
                    default = moe_experts_triton(x, ids, w, st, limit=LIMIT, quantize_inputs=True,
                                                 hidden_dtype=torch.bfloat16)
                    row["default_bf16_bit_identical_to_bf16"] = bool(torch.equal(default, fused))
                    alone = moe_experts_triton(x[:1], ids[:1], w[:1], st, limit=LIMIT, quantize_inputs=True,
                                               hidden_dtype=torch.bfloat16)
                    row["token0_alone_equal_in_batch"] = bool(torch.equal(alone[0], default[0]))
                splitk = [e for e in checked if e[1] == "bf16-stream-splitk" and e[0] in outs]
                for col in outs:  # the split and stream decodes and the prefill tile must give the fused variant's bits
                    if col.startswith(("bf16-split", "stream:", "bf16-stream", "prefill:", "bf16-prefill")) \
                            and fused is not None and col not in {e[0] for e in splitk}:
                        row[col + "_bit_identical_to_bf16"] = bool(torch.equal(outs[col], fused))
                stream_col = next((c for c in outs if c.startswith("stream:") or c == "bf16-stream"), None)
                for col, v, _, cfg in splitk:  # its own bits: normwise errors, and token 0 alone = in the batch
                    if fused is not None:
                        row[col + "_vs_bf16"] = rel_err(outs[col], fused)
                    if stream_col is not None:
                        row[col + "_vs_stream"] = rel_err(outs[col], outs[stream_col])
                    with stream_configured(cfg):
                        alone = moe_experts_triton(x[:1], ids[:1], w[:1], st, limit=LIMIT, quantize_inputs=True,
                                                   hidden_dtype=torch.bfloat16, variant=v)
                    row[col + "_token0_alone_equal"] = bool(torch.equal(alone[0], outs[col][0]))
                if x.shape[0] <= 64 and not args.no_twin:
                    ref_x = moe_experts_ref(x.float(), ids, w, ref_experts, limit=LIMIT, quantize_inputs=False)
                    out = moe_experts_triton(x.float(), ids, w, st, limit=LIMIT, quantize_inputs=False)
                    row["exact_fp32"] = rel_err(out, ref_x)
                if x.shape[0] <= 64 and "exact" not in args.skip:  # exact numerics (fp32 x, hidden): the stream's other path
                    exact = {}
                    for col, v, _, cfg in [e for e in checked if e[1] in ("bf16-fused", "bf16-stream")][:2]:
                        try:
                            with stream_configured(cfg):
                                exact[v] = moe_experts_triton(x.float(), ids, w, st, limit=LIMIT,
                                                              quantize_inputs=False, variant=v)
                        except Exception as exc:
                            row[f"exact_{col}_error"] = repr(exc)[:300]
                    if len(exact) == 2:
                        row["exact_stream_bit_identical_to_bf16"] = bool(torch.equal(*exact.values()))
                log.append(row)
                print(json.dumps(row), flush=True)
    if "parity" not in args.skip:
        section("parity", log, parity)

    def invariance():
        cases = routings(257, 1, gate, bias, seed=99)["real"]
        x, w, ids = cases[0]
        for variant in ("bf16", "w4a8"):
            full = moe_experts_triton(x, ids, w, st, limit=LIMIT, quantize_inputs=True, hidden_dtype=torch.bfloat16,
                                      variant=variant)
            same = True
            for m in (1, 7, 64):
                part = moe_experts_triton(x[:m], ids[:m], w[:m], st, limit=LIMIT, quantize_inputs=True,
                                          hidden_dtype=torch.bfloat16, variant=variant)
                same &= torch.equal(part, full[:m])
            row = {"kind": "invariance", "variant": variant, "bit_identical_M_1_7_64_vs_257": bool(same)}
            log.append(row)
            print(json.dumps(row), flush=True)
        r_full, i_full = route_triton(x, gate, top_k=TOP_K, routed_scaling=1.5, bias=bias)
        r1, i1 = route_triton(x[:1], gate, top_k=TOP_K, routed_scaling=1.5, bias=bias)
        log.append({"kind": "invariance", "variant": "router",
                    "bit_identical_M_1_vs_257": bool(torch.equal(r1, r_full[:1]) and torch.equal(i1, i_full[:1]))})
        print(json.dumps(log[-1]), flush=True)
    if "invariance" not in args.skip:
        section("batch invariance", log, invariance)

    def timing():
        shared = {}
        section("shared expert weights", log, lambda: "extras" in args.skip or shared.update(
            {n: QuantizedWeight.quantize(torch.randn(*shape, device=DEVICE) * 0.02, WeightLayout.FP8_BLOCK)
             for n, shape in (("w1", (I, D)), ("w3", (I, D)), ("w2", (D, I)))}))
        for n in args.tokens if args.time_tokens is None else args.time_tokens:
            if time.time() - t_start > args.deadline:
                log.append({"kind": "error", "section": "timing", "error": f"deadline: skipped tokens={n}"})
                print(log[-1], flush=True)
                continue
            reps = 8 if n <= 64 else (3 if n <= 1024 else 1)
            for pattern, cases in routings(n, reps, gate, bias, seed=1000 + n).items():
                row = {"kind": "time", "tokens": n, "routing": pattern}
                hit = [int(torch.unique(ids).numel()) for _, _, ids in cases]
                row["hit_experts"] = statistics.mean(hit)
                row["hit_bytes"] = row["hit_experts"] * per_expert_bytes
                for col, v, which, cfg in entries:
                    layer = st if which == "mxfp4" else fp8.get("st")
                    if layer is None:
                        continue
                    try:
                        calls = [lambda c=c, v=v, layer=layer: moe_experts_triton(
                            c[0], c[2], c[1], layer, limit=LIMIT, quantize_inputs=True, hidden_dtype=torch.bfloat16,
                            variant=v) for c in cases]
                        with stream_configured(cfg):
                            row[f"{col}_us"] = graph_time(calls) * 1e6
                        row[f"{col}_TBs"] = row["hit_bytes"] / (row[f"{col}_us"] * 1e-6) / 1e12
                        row[f"{col}_frac_copy"] = row[f"{col}_TBs"] * 1e12 / copy_bw
                    except Exception as exc:
                        row[f"{col}_error"] = repr(exc)[:300]
                if pattern == "real" and "extras" not in args.skip:
                    try:
                        calls = [lambda c=c: route_triton(c[0], gate, top_k=TOP_K, routed_scaling=1.5, bias=bias)
                                 for c in cases]
                        row["router_us"] = graph_time(calls) * 1e6
                    except Exception as exc:
                        row["router_error"] = repr(exc)[:300]
                    if shared:
                        try:
                            from mxserve.kernels.moe.shared import expert_ffn_fp8
                            sh = ExpertWeights(shared["w1"], shared["w2"], shared["w3"])
                            calls = [lambda c=c, sh=sh: expert_ffn_fp8(c[0], sh, limit=LIMIT, quantize_inputs=True,
                                                                hidden_dtype=torch.bfloat16) for c in cases]
                            row["shared_us"] = graph_time(calls) * 1e6
                        except Exception as exc:
                            row["shared_error"] = repr(exc)[:300]
                if args.baselines != "none" and n <= args.baseline_max_tokens:
                    baselines(row, st, cases[0], n, pattern, dequant=args.baselines == "all")
                if "bf16_us" in row:
                    row["bf16_TBs"] = row["hit_bytes"] / (row["bf16_us"] * 1e-6) / 1e12
                    row["bf16_frac_copy"] = row["bf16_TBs"] * 1e12 / copy_bw
                    row["bf16_frac_4.27"] = row["bf16_TBs"] * 1e12 / NOMINAL_TBS
                if "w4a8_us" in row:
                    row["w4a8_TBs"] = row["hit_bytes"] / (row["w4a8_us"] * 1e-6) / 1e12
                log.append(row)
                print(json.dumps(row), flush=True)
                if n in args.kernel_times and pattern == "real":
                    kernel_times(st, cases[:4], entries, log, n, pattern)
    if "timing" not in args.skip:
        section("timing", log, timing)

    print(f"\nMoE layer ({E} experts, top-{TOP_K}, {D}->{I}->{D}), times in us, faithful numerics")
    hdr = ("tok", "routing", "hit", "MB", "bf16", "w4a8", "repack", "split", "stream", "TB/s", "%copy", "router",
           "shared", "bf16mm", "x bf16mm", "deq+mm", "x deq")
    print(" ".join(f"{h:>8}" for h in hdr))
    for r in log:
        if r.get("kind") != "time":
            continue
        streams = [v for k, v in r.items() if k.startswith(("stream:", "bf16-stream")) and k.endswith("_us")]
        if streams:
            r["stream_best_us"] = min(streams)
        best = min(r.get(k, float("inf")) for k in ("bf16_us", "w4a8_us", "bf16-split_us", "stream_best_us"))
        cells = [r["tokens"], r["routing"], f"{r['hit_experts']:.0f}", f"{r['hit_bytes'] / 1e6:.0f}",
                 *(f"{r[k]:.1f}" if k in r else "-"
                   for k in ("bf16_us", "w4a8_us", "repack_us", "bf16-split_us", "stream_best_us")),
                 f"{r['hit_bytes'] / (best * 1e-6) / 1e12:.2f}" if best < float("inf") else "-",
                 f"{100 * r['hit_bytes'] / (best * 1e-6) / copy_bw:.0f}" if best < float("inf") else "-",
                 *(f"{r[k]:.1f}" if k in r else "-" for k in ("router_us", "shared_us", "bf16_grouped_us")),
                 f"{r['bf16_grouped_us'] / r['bf16_us_same_experts']:.2f}"
                 if "bf16_grouped_us" in r and "bf16_us_same_experts" in r else "-",
                 f"{r['dequant_matmul_us']:.0f}" if "dequant_matmul_us" in r else "-",
                 f"{r['dequant_matmul_us'] / best:.1f}" if "dequant_matmul_us" in r and best < float("inf") else "-"]
        print(" ".join(f"{c!s:>8}" for c in cells))
    if any(e[1] == "bf16-prefill" for e in entries):
        print_prefill_table(log, entries)
    errors = [r for r in log if r.get("kind") == "error"]
    print(f"\n{len(errors)} section errors; total {time.time() - t_start:.0f} s")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"copy_bandwidth": copy_bw, "per_expert_bytes": per_expert_bytes,
                                        "rows": log}, indent=1))


if __name__ == "__main__":
    main()
