"""Roofline benchmark of `linear_fp8_block` on the DeepSeek-V4-Flash dense shapes (GPU only).

For every shape (N out x K in) and M it times, under CUDA-graph replay with rotating weight copies
(so a layer smaller than the 60 MB L2 is still read from HBM): the Triton kernel weight-only with
bf16 and fp32 activations, the Triton kernel W8A8 (GEMM only: activations already quantized, as
for `_scaled_mm`), bf16 `torch.matmul`, native `torch._scaled_mm` rowwise and block-scaled
(1x128 activations, 128x128 weights, where it accepts the shape), and, at a few M,
dequantize-then-matmul in eager torch (events, no graph: the decode builds its table on the host).
It reports median time, TB/s on the weight bytes (FP8 codes + scales for our kernel), TFLOP/s,
the fraction of the device-to-device copy bandwidth measured in the same run, and same-run ratios.
`--check` first runs parity against the fp64 torch twin and the batch-invariance check;
`--check-fused` only the decode checks of the single-launch split-K (fused sum equal to the
two-launch twin bit for bit, repeated, eager and under CUDA-graph replay; counters back at 0).
`--split-sum both` times the decode launches both ways: the main rows fused, `*_2l` two launches.
`--prepared-x` adds the issue-9 experiment: weight-only on activations prepared by their own
launch (`fp8_wo_px`, GEMM only, like W8A8's; `prep_x` the preparation alone), at M <= 16.
`--decode-ab` (issue 9 session 5) runs the decode A/B of `DecodeOptions` instead of the main rows:
for every shape and M it checks each variant bit for bit against today's default launch (the
pre-option code, autotuned), then (unless `--ab-checks-only`) times them all under graph replay in
two rounds of opposite order (drift shows as a round difference), next to bf16 cuBLAS,
`_scaled_mm` rowwise, W8A8 (GEMM only) and, at M = 1, the opt-in GEMV.
`--prefill-fast` adds the opt-in fast prefill tile at M >= 64 (`fast_wo`: bf16 x; `fast_w8a8`:
GEMM only on quantized activations), timed after the baselines of the same shape (its autotuner
keys on the layer shape only, so its first call — the timing at the largest M — picks the config),
then its parity against the fp64 twin on 256 rows (`fast_*_err`) and rows 1 and 7 against the
same rows of the full batch (`fast_*_rows_equal`).

    python benchmarks/kernels.py --check --out DIR        # full table, raw rows in DIR/kernels.jsonl
    python benchmarks/kernels.py --shapes wq_b wo_b head 'wq_a||wkv' --ms 1 8 16 --split-sum both \
        --prepared-x --check-fused --skip fp8_wo_f32x smm_block --out DIR   # decode: fused vs two launches
    python benchmarks/kernels.py --ms 2048 --prefill-fast --skip fp8_wo fp8_w8a8 smm_row deq_mm \
        --out DIR   # prefill: the fast tile next to bf16 cuBLAS and block-scaled _scaled_mm
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch
from _cuda_timing import copy_bandwidth, event_time, graph_time

from mxserve.formats import QuantizedWeight, WeightLayout, ue8m0_value
from mxserve.kernels.linear_fp8_block import linear_fp8_block_ref, quantize_activation_fp8_block
from mxserve.kernels.linear_fp8_block import triton as fp8_launcher
from mxserve.kernels.linear_fp8_block.triton import (
    DecodeOptions,
    grouped_linear_fp8_block_triton,
    launch_gemv_fp8_block,
    launch_linear_fp8_block,
    launch_prefill_fast,
    linear_fp8_block_triton,
    prepare_activation_fp16,
    split_counters,
)

SHAPES = {  # name: (N out, K in), DeepSeek-V4-Flash dense layers
    "wq_a||wkv": (1536, 4096),
    "wq_b": (32768, 1024),
    "wo_b": (4096, 8192),
    "shared_w13": (4096, 4096),
    "shared_w2": (4096, 2048),
    "idx_wq_b": (8192, 1024),
    "head": (129280, 4096),
}
MS = (1, 2, 4, 8, 16, 32, 64, 256, 2048)
ROTATE_BYTES = 192 << 20  # weight copies per graph so that one pass reads >= 3x the L2
DEQ_MS = (1, 8, 2048)


_SINK: list = []  # the open raw-rows file (written row by row, so a killed run keeps its rows)


def emit(row: dict) -> None:
    print(json.dumps(row), flush=True)
    for fh in _SINK:
        fh.write(json.dumps(row) + "\n")
        fh.flush()


def make_weight(n: int, k: int, seed: int) -> QuantizedWeight:
    g = torch.Generator(device="cuda").manual_seed(seed)
    w = torch.randn(n, k, device="cuda", generator=g) * 0.02
    return QuantizedWeight.quantize(w, WeightLayout.FP8_BLOCK)


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref.double()).norm() / ref.double().norm().clamp(min=1e-300))


def check(shapes: dict, log: list) -> None:
    """Parity against the fp64 twin at M in {1, 16, 2048}, and batch invariance (M = 1, 7, 64, 257)."""
    for name, (n, k) in shapes.items():
        w = make_weight(n, k, 1)
        for m in (1, 4, 16, 2048):
            x = torch.randn(m, k, device="cuda")
            row = {"kind": "parity", "shape": name, "M": m}
            cases = [("wo_bf16x", x.bfloat16(), False, "auto"), ("wo_fp32x", x, False, "auto"), ("w8a8", x, True, "auto")]
            if m <= 4:
                cases += [("gemv_bf16x", x.bfloat16(), False, "gemv"), ("gemv_w8a8", x, True, "gemv")]
            for label, xin, q, tile in cases:
                out = linear_fp8_block_triton(xin, w, quantize_input=q, tile=tile)
                row[label] = rel_err(out, linear_fp8_block_ref(xin, w, quantize_input=q))
                row[label + "_nan"] = bool(torch.isnan(out).any())
            log.append(row)
            emit(row)
    t, g, kk, r = 64, 8, 4096, 1024  # wo_a, grouped
    wg = make_weight(g * r, kk, 3)
    for m in (1, 16, t):
        xg = torch.randn(m, g, kk, device="cuda").bfloat16()
        from mxserve.kernels.linear import grouped_linear_ref

        row = {"kind": "parity", "shape": "wo_a", "M": m,
               "grouped": rel_err(grouped_linear_fp8_block_triton(xg, wg), grouped_linear_ref(xg, wg))}
        log.append(row)
        emit(row)
    for name in shapes:
        n, k = SHAPES[name]
        w = make_weight(n, k, 2)
        x = torch.randn(257, k, device="cuda")
        for label, xin, q in (("wo_bf16x", x.bfloat16(), False), ("wo_fp32x", x, False), ("w8a8", x, True)):
            full = linear_fp8_block_triton(xin, w, quantize_input=q)
            same = {}
            for m in (1, 7, 64):
                part = linear_fp8_block_triton(xin[:m], w, quantize_input=q)
                same[m] = bool(torch.equal(part, full[:m]))
            forced = {m: bool(torch.equal(linear_fp8_block_triton(xin[:m], w, quantize_input=q, tile="decode"),
                                          linear_fp8_block_triton(xin, w, quantize_input=q, tile="decode")[:m]))
                      for m in (1, 7, 64)}
            gemv = {}
            if not q:
                g4 = linear_fp8_block_triton(xin[:4], w, tile="gemv")
                gemv = {m: bool(torch.equal(linear_fp8_block_triton(xin[:m], w, tile="gemv"), g4[:m])) for m in (1, 2, 3)}
            row = {"kind": "invariance", "shape": name, "variant": label, "auto_tile": same, "decode_tile": forced,
                   "gemv_1_to_4": gemv}
            log.append(row)
            emit(row)


def check_fused(shapes: dict, log: list) -> None:
    """Decode M = 1, 7, 16: the fused split-K sum against the two-launch twin, bit for bit, 10
    calls in a row (a missing release/acquire shows as an occasional mismatch), then 10 replays
    of a CUDA graph of the fused call on fresh inputs; counters must be all 0 afterwards."""
    for name, (n, k) in shapes.items():
        w = make_weight(n, k, 4)
        for label, q in (("wo_bf16x", False), ("w8a8", True)):
            row = {"kind": "fused_check", "shape": name, "variant": label}
            for m in (1, 7, 16):
                x = torch.randn(m, k, device="cuda")
                xin = x if q else x.bfloat16()
                twin = linear_fp8_block_triton(xin, w, quantize_input=q, split_sum="two_launch")
                eager = all(torch.equal(linear_fp8_block_triton(xin, w, quantize_input=q, split_sum="fused"), twin)
                            for _ in range(10))
                static_x = xin.clone()
                graph = torch.cuda.CUDAGraph()
                stream = torch.cuda.Stream()
                stream.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(stream):
                    linear_fp8_block_triton(static_x, w, quantize_input=q, split_sum="fused")  # warm-up
                torch.cuda.current_stream().wait_stream(stream)
                with torch.cuda.graph(graph):
                    static_out = linear_fp8_block_triton(static_x, w, quantize_input=q, split_sum="fused")
                replay = True
                for i in range(10):
                    static_x.copy_(xin * (1 + i))
                    graph.replay()
                    expect = linear_fp8_block_triton(static_x, w, quantize_input=q, split_sum="two_launch")
                    replay &= bool(torch.equal(static_out, expect))
                row[f"M{m}_eager_equal"] = eager
                row[f"M{m}_graph_equal"] = replay
            row["counters_zero"] = bool((split_counters(torch.device("cuda", torch.cuda.current_device()), 0) == 0).all())
            log.append(row)
            emit(row)


def scaled_mm_block_layout(xq, xs, wt, ws) -> tuple | None:
    """(a_scale, weight-scale transform) that `_scaled_mm` accepts for (1x128, 128x128) scaling,
    trying the plausible memory layouts; None where it accepts none (e.g. an unsupported M)."""
    for a_scale in (xs, xs.t().contiguous().t()):
        for transform in (lambda s: s.t(), lambda s: s.t().contiguous()):
            try:
                torch._scaled_mm(xq, wt, a_scale, transform(ws), out_dtype=torch.bfloat16)
                return a_scale, transform
            except (RuntimeError, ValueError):
                continue
    return None


def bench_shape(name: str, n: int, k: int, ms: tuple, copy_bw: float, log: list, split_sum: str = "auto",
                skip: tuple = (), prepared_x: bool = False, prefill_fast: bool = False) -> None:
    w0 = make_weight(n, k, 0)
    fp8_bytes = w0.nbytes
    copies = max(1, math.ceil(ROTATE_BYTES / fp8_bytes))
    ws_ = [w0] + [QuantizedWeight.from_fp8_block(w0.codes.clone(), w0.scales.clone()) for _ in range(copies - 1)]
    wb_ = [w.dequantize(torch.bfloat16) for w in ws_[: max(1, math.ceil(ROTATE_BYTES / (2 * n * k)))]]
    w8_ = [w.codes.view(torch.float8_e4m3fn) for w in ws_]
    wsc = [ue8m0_value(w.scales) for w in ws_]  # fp32 [N/128, K/128]
    wrow = [ue8m0_value(w.scales).repeat_interleave(128, 0)[:n, :1].t().contiguous() for w in ws_]  # [1, N]
    for m in sorted(ms, reverse=prefill_fast):  # --prefill-fast: the largest M first picks its config
        res = bench_one(name, n, k, m, (ws_, wb_, w8_, wsc, wrow), copies, copy_bw, split_sum, skip, prepared_x,
                        prefill_fast)
        log.append(res)
        emit(res)
    torch.cuda.empty_cache()


def bench_one(name: str, n: int, k: int, m: int, weights: tuple, copies: int, copy_bw: float, split_sum: str = "auto",
              skip: tuple = (), prepared_x: bool = False, prefill_fast: bool = False) -> dict:
    ws_, wb_, w8_, wsc, wrow = weights
    w0 = ws_[0]
    fp8_bytes = w0.nbytes
    x32 = torch.randn(m, k, device="cuda")
    xb = x32.bfloat16()
    xq, xs = quantize_activation_fp8_block(x32)
    xq8 = xq.view(torch.float8_e4m3fn)
    xrow = xs.amax(dim=1, keepdim=True)  # rowwise: one scale per token (values approximated)
    main = "fused" if split_sum == "both" else split_sum  # the main rows' split-K sum
    res = {"kind": "bench", "shape": name, "N": n, "K": k, "M": m, "copies": copies, "split_sum": main}
    variants = {
        "fp8_wo": [lambda w=w: launch_linear_fp8_block(xb, w, split_sum=main) for w in ws_],
        "fp8_w8a8": [lambda w=w: launch_linear_fp8_block(xq, w, x_scales=xs, split_sum=main) for w in ws_],
        "bf16": [lambda w=w: torch.matmul(xb, w.t()) for w in wb_],
    }
    if split_sum == "both" and m <= 16:
        variants["fp8_wo_2l"] = [lambda w=w: launch_linear_fp8_block(xb, w, split_sum="two_launch") for w in ws_]
        variants["fp8_w8a8_2l"] = [lambda w=w: launch_linear_fp8_block(xq, w, x_scales=xs, split_sum="two_launch")
                                   for w in ws_]
    if prepared_x and m <= 16:
        try:
            xh, xinv = prepare_activation_fp16(xb)
            res["px_equal"] = bool(torch.equal(launch_linear_fp8_block(xh, ws_[0], x_inv=xinv, split_sum=main),
                                               launch_linear_fp8_block(xb, ws_[0], split_sum=main)))
            variants["fp8_wo_px"] = [lambda w=w: launch_linear_fp8_block(xh, w, x_inv=xinv, split_sum=main)
                                     for w in ws_]
            variants["prep_x"] = [lambda: prepare_activation_fp16(xb)]
        except Exception as e:  # the experiment must not hide the main rows
            res["px_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
    if m <= 4:
        variants["fp8_gemv"] = [lambda w=w: launch_gemv_fp8_block(xb, w) for w in ws_]
    if m <= 16:
        variants["fp8_wo_f32x"] = [lambda w=w: launch_linear_fp8_block(x32, w) for w in ws_]
    try:
        torch._scaled_mm(xq8, w8_[0].t(), xrow, wrow[0], out_dtype=torch.bfloat16)
        variants["smm_row"] = [lambda i=i: torch._scaled_mm(xq8, w8_[i].t(), xrow, wrow[i], out_dtype=torch.bfloat16)
                               for i in range(len(ws_))]
    except (RuntimeError, ValueError) as e:
        res["smm_row_error"] = str(e).splitlines()[0][:160]
    lay = scaled_mm_block_layout(xq8, xs, w8_[0].t(), wsc[0])
    if lay is None:
        res["smm_block_error"] = "no scale layout accepted"
    else:
        a_s, transform = lay
        bs = [transform(s) for s in wsc]
        variants["smm_block"] = [lambda i=i: torch._scaled_mm(xq8, w8_[i].t(), a_s, bs[i], out_dtype=torch.bfloat16)
                                 for i in range(len(ws_))]
    fast = prefill_fast and m >= 64
    if fast:  # after the baselines: a failing new tile must not hide them
        variants["fast_wo"] = [lambda w=w: launch_prefill_fast(xb, w) for w in ws_]
        variants["fast_w8a8"] = [lambda w=w: launch_prefill_fast(xq, w, x_scales=xs) for w in ws_]
    for label, calls in variants.items():
        if label in skip:
            continue
        try:
            res[label + "_s"] = graph_time(calls)
        except Exception as e:  # a baseline that fails must not hide the others
            res[label + "_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
    if fast:
        try:
            check_prefill_fast(res, x32, w0)
        except Exception as e:
            res["fast_check_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
    if m in DEQ_MS and "deq_mm" not in skip:
        res["deq_mm_s"] = event_time(lambda: torch.matmul(xb, w0.dequantize(torch.bfloat16).t()))
    t = res.get("fp8_wo_s")
    if t:
        res["fp8_wo_TBps"] = fp8_bytes / t / 1e12
        res["fp8_wo_frac_copy"] = fp8_bytes / t / copy_bw
        res["fp8_wo_TFLOPs"] = 2 * m * n * k / t / 1e12
    for mine in ("fast_wo", "fast_w8a8"):
        if res.get(mine + "_s"):
            res[mine + "_TFLOPs"] = 2 * m * n * k / res[mine + "_s"] / 1e12
    for mine in ("fp8_w8a8", "fp8_gemv", "fp8_wo_2l", "fp8_w8a8_2l", "fp8_wo_px"):
        if res.get(mine + "_s"):
            res[mine + "_TBps"] = fp8_bytes / res[mine + "_s"] / 1e12
            res[mine + "_frac_copy"] = fp8_bytes / res[mine + "_s"] / copy_bw
    for mine in ("fp8_wo", "fp8_w8a8"):  # two-launch time / fused time
        if res.get(mine + "_s") and res.get(mine + "_2l_s"):
            res[mine + "_fused_speedup"] = res[mine + "_2l_s"] / res[mine + "_s"]
    for base in ("bf16", "smm_row", "smm_block", "deq_mm"):
        for mine in ("fp8_wo", "fp8_w8a8", "fp8_gemv", "fast_wo", "fast_w8a8"):
            if res.get(base + "_s") and res.get(mine + "_s"):
                res[f"{mine}_vs_{base}"] = res[base + "_s"] / res[mine + "_s"]
    return res


def check_prefill_fast(res: dict, x32: torch.Tensor, w: QuantizedWeight) -> None:
    """The fast tile's parity (normwise vs the fp64 twin, 256 rows) and rows 1 and 7 equal to the
    same rows of the full batch (its claim: a row's bits do not depend on M)."""
    xb = x32.bfloat16()
    rows = min(256, x32.shape[0])
    for label, q, xin in (("fast_wo", False, xb), ("fast_w8a8", True, x32)):
        full = linear_fp8_block_triton(xin, w, quantize_input=q, tile="prefill_fast")
        res[label + "_err"] = rel_err(full[:rows], linear_fp8_block_ref(xin[:rows], w, quantize_input=q))
        res[label + "_nan"] = bool(torch.isnan(full).any())
        res[label + "_rows_equal"] = all(
            bool(torch.equal(linear_fp8_block_triton(xin[:m], w, quantize_input=q, tile="prefill_fast"), full[:m]))
            for m in (1, 7))


def bench_grouped(copy_bw: float, ms: tuple, log: list) -> None:
    """wo_a: 8 groups of (1024 x 4096) in one launch against bf16 `torch.bmm` over the groups."""
    g, r, k = 8, 1024, 4096
    w0 = make_weight(g * r, k, 0)
    copies = max(1, math.ceil(ROTATE_BYTES / w0.nbytes))
    ws_ = [w0] + [QuantizedWeight.from_fp8_block(w0.codes.clone(), w0.scales.clone()) for _ in range(copies - 1)]
    wb_ = [w.dequantize(torch.bfloat16).view(g, r, k).transpose(1, 2) for w in ws_[: max(1, copies // 2)]]
    for m in ms:
        xg = torch.randn(m, g, k, device="cuda").bfloat16()
        xt = xg.transpose(0, 1)
        res = {"kind": "bench", "shape": "wo_a (8 groups)", "N": g * r, "K": k, "M": m, "copies": copies}
        for label, calls in (("fp8_wo", [lambda w=w, xg=xg: grouped_linear_fp8_block_triton(xg, w) for w in ws_]),
                             ("bf16", [lambda w=w, xt=xt: torch.bmm(xt, w) for w in wb_])):
            try:
                res[label + "_s"] = graph_time(calls)
            except Exception as e:
                res[label + "_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
        if res.get("fp8_wo_s"):
            res["fp8_wo_TBps"] = w0.nbytes / res["fp8_wo_s"] / 1e12
            res["fp8_wo_frac_copy"] = w0.nbytes / res["fp8_wo_s"] / copy_bw
            if res.get("bf16_s"):
                res["fp8_wo_vs_bf16"] = res["bf16_s"] / res["fp8_wo_s"]
        log.append(res)
        emit(res)
    torch.cuda.empty_cache()


def fast_table(log: list) -> list[str]:
    """The fast prefill tile against the same run's baselines (only rows that timed it)."""
    rows = [r for r in log if r.get("kind") == "bench" and ("fast_wo_s" in r or "fast_w8a8_s" in r)]
    if not rows:
        return []

    def f(v, fmt):
        return "-" if v is None else format(v, fmt)

    lines = ["", "prefill_fast (times in us; ratios = baseline time / ours; targets: w8a8 >= 0.85x smm_blk, "
             "wo >= 0.8x bf16)",
             "| shape | M | fast wo us | wo TFLOP/s | wo vs bf16 | fast w8a8 us | w8a8 TFLOP/s | w8a8 vs smm_blk | bf16 us "
             "| smm_blk us | wo err | w8a8 err | rows equal (wo, w8a8) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        us = {key: (None if r.get(key) is None else r[key] * 1e6) for key in ("fast_wo_s", "fast_w8a8_s", "bf16_s",
                                                                              "smm_block_s")}
        lines.append(
            f"| {r['shape']} | {r['M']} | {f(us['fast_wo_s'], '.1f')} | {f(r.get('fast_wo_TFLOPs'), '.0f')} | "
            f"{f(r.get('fast_wo_vs_bf16'), '.2f')} | {f(us['fast_w8a8_s'], '.1f')} | {f(r.get('fast_w8a8_TFLOPs'), '.0f')} | "
            f"{f(r.get('fast_w8a8_vs_smm_block'), '.2f')} | {f(us['bf16_s'], '.1f')} | {f(us['smm_block_s'], '.1f')} | "
            f"{f(r.get('fast_wo_err'), '.2e')} | {f(r.get('fast_w8a8_err'), '.2e')} | "
            f"{r.get('fast_wo_rows_equal')}, {r.get('fast_w8a8_rows_equal')} |")
    return lines


# Every A/B variant but "rule" switches the shape rule off, so the names keep the meaning they had
# in session 5 call 1 (the measurement that chose the rule); "rule" is the production default.
BEFORE = DecodeOptions(even=False, shape_rule=False)  # the launch before the options (same kernel code as before)
PLAIN = DecodeOptions(shape_rule=False)
AB_VARIANTS = {  # name: (options, forced decode config or None: autotuned as in production)
    "cur": (BEFORE, None),  # the pre-options path: the reference of every bit check
    "new": (PLAIN, None),  # mask-free loads, autotuned
    "rule": (DecodeOptions(), None),  # the production default: mask-free loads + the measured shape rule
    "cur64": (BEFORE, (64, 4, 4)),  # the config the autotuner picked for every large layer in call 3
    "even64": (PLAIN, (64, 4, 4)),
    "pdl64": (replace(PLAIN, pdl=True), (64, 4, 4)),
    "n128w8": (PLAIN, (128, 8, 4)),
    "n128w8_pdl": (replace(PLAIN, pdl=True), (128, 8, 4)),
    "prep64": (replace(PLAIN, prep_x=True), (64, 4, 4)),
    "prep64_pdl": (replace(PLAIN, prep_x=True, pdl=True), (64, 4, 4)),
}
AB_ONE_GROUP = {  # the head bisect (one-group layers only): the code before issue 9 call 3, and 3 programs/SM
    "inprog64": (DecodeOptions(even=False, one_group="in_program", shape_rule=False), (64, 4, 4)),
    "cur64s6": (BEFORE, (64, 4, 6)),
}


def _with_options(options: DecodeOptions, cfg: tuple | None, fn):
    prev = fp8_launcher.set_decode_options(options)
    fp8_launcher.force_config("decode", cfg)
    try:
        return fn()
    finally:
        fp8_launcher.force_config("decode", None)
        fp8_launcher.set_decode_options(prev)


def _options_call(options: DecodeOptions, cfg: tuple | None, fn):
    """`fn` run under `options` and forced decode config `cfg`, as a closure graph_time can capture."""
    return lambda: _with_options(options, cfg, fn)


def decode_ab(shapes: dict, ms: tuple, copy_bw: float, log: list, checks_only: bool) -> None:
    """Bit checks (every variant vs "cur", bf16 x; W8A8 "new" vs "cur"), then timing (module doc)."""
    for name, (n, k) in shapes.items():
        w0 = make_weight(n, k, 0)
        copies = max(1, math.ceil(ROTATE_BYTES / w0.nbytes))
        ws_ = [w0] + [QuantizedWeight.from_fp8_block(w0.codes.clone(), w0.scales.clone()) for _ in range(copies - 1)]
        one_group = fp8_launcher.kb_per_group(n, k) >= math.ceil(k / 128)
        variants = {**AB_VARIANTS, **(AB_ONE_GROUP if one_group else {})}
        for m in ms:
            row = _ab_check(name, n, k, m, w0, variants)
            log.append(row)
            emit(row)
            if not checks_only:
                res = _ab_time(name, n, k, m, ws_, variants, row, copy_bw)
                log.append(res)
                emit(res)
        torch.cuda.empty_cache()


def _ab_check(name: str, n: int, k: int, m: int, w0: QuantizedWeight, variants: dict) -> dict:
    x32 = torch.randn(m, k, device="cuda", generator=torch.Generator(device="cuda").manual_seed(m))
    xb = x32.bfloat16()
    ref = _with_options(BEFORE, None, lambda: linear_fp8_block_triton(xb, w0))
    row = {"kind": "ab_check", "shape": name, "N": n, "K": k, "M": m}
    for label, (opts, cfg) in variants.items():
        try:
            outs = [_with_options(opts, cfg, lambda: linear_fp8_block_triton(xb, w0)) for _ in range(3)]
            row[label] = all(torch.equal(o, ref) for o in outs)
        except Exception as e:  # a failing variant must not hide the others
            row[label] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
    w8_ref = _with_options(BEFORE, (64, 4, 4), lambda: linear_fp8_block_triton(x32, w0, quantize_input=True))
    row["w8a8_new"] = bool(torch.equal(
        _with_options(DecodeOptions(), (64, 4, 4), lambda: linear_fp8_block_triton(x32, w0, quantize_input=True)),
        w8_ref))
    return row


def _ab_time(name: str, n: int, k: int, m: int, ws_: list, variants: dict, checked: dict, copy_bw: float) -> dict:
    copies = len(ws_)
    x32 = torch.randn(m, k, device="cuda", generator=torch.Generator(device="cuda").manual_seed(m))
    xb = x32.bfloat16()
    res = {"kind": "ab_bench", "shape": name, "N": n, "K": k, "M": m, "copies": copies, "bytes": ws_[0].nbytes,
           "copy_TBps": copy_bw / 1e12}
    calls = {label: [_options_call(opts, cfg, lambda w=w: linear_fp8_block_triton(xb, w)) for w in ws_]
             for label, (opts, cfg) in variants.items() if checked[label] is True}  # only bit-identical ones
    for rnd, order in enumerate((list(calls), list(reversed(calls)))):
        for label in order:
            try:
                res[f"{label}_r{rnd}_s"] = graph_time(calls[label])
            except Exception as e:
                res[f"{label}_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
    for label in calls:
        if f"{label}_r0_s" in res and f"{label}_r1_s" in res:
            res[f"{label}_s"] = (res[f"{label}_r0_s"] + res[f"{label}_r1_s"]) / 2
    xq, xs = quantize_activation_fp8_block(x32)
    xq8 = xq.view(torch.float8_e4m3fn)
    wb_ = [w.dequantize(torch.bfloat16) for w in ws_[: max(1, math.ceil(ROTATE_BYTES / (2 * n * k)))]]
    w8_ = [w.codes.view(torch.float8_e4m3fn) for w in ws_]
    wrow = [ue8m0_value(w.scales).repeat_interleave(128, 0)[:n, :1].t().contiguous() for w in ws_]
    xrow = xs.amax(dim=1, keepdim=True)
    base = {
        "w8a8": [lambda w=w: launch_linear_fp8_block(xq, w, x_scales=xs) for w in ws_],
        "bf16": [lambda w=w: torch.matmul(xb, w.t()) for w in wb_],
        "smm_row": [lambda i=i: torch._scaled_mm(xq8, w8_[i].t(), xrow, wrow[i], out_dtype=torch.bfloat16)
                    for i in range(copies)],
    }
    if m == 1:
        base["gemv"] = [lambda w=w: launch_gemv_fp8_block(xb, w) for w in ws_]
    for label, fns in base.items():
        try:
            res[label + "_s"] = graph_time(fns)
        except Exception as e:
            res[label + "_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
    return res


def ab_table(log: list) -> list[str]:
    """One line per (shape, M): us of cur / new / the best variant, % of copy, ratios to the baselines."""
    lines = ["| shape | M | cur us | new us | best variant us | best %copy | best/bf16 | best/smm_row | gemv us |"
             " round drift max |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in log:
        if r.get("kind") != "ab_bench":
            continue
        times = {key[:-2]: v for key, v in r.items() if key.endswith("_s") and key[:-2] in {**AB_VARIANTS, **AB_ONE_GROUP}}
        if not times:
            continue
        best = min(times, key=times.get)
        t = times[best]
        drift = max(abs(r[f"{lb}_r0_s"] - r[f"{lb}_r1_s"]) / r[f"{lb}_s"] for lb in times)
        fmt = (lambda v: "-" if v is None else f"{v * 1e6:.1f}")  # noqa: E731
        lines.append(f"| {r['shape']} | {r['M']} | {fmt(times.get('cur'))} | {fmt(times.get('new'))} | {best} "
                     f"{t * 1e6:.1f} | {100 * r['bytes'] / t / (r['copy_TBps'] * 1e12):.0f} | "
                     f"{r['bf16_s'] / t if r.get('bf16_s') else float('nan'):.2f} | "
                     f"{r['smm_row_s'] / t if r.get('smm_row_s') else float('nan'):.2f} | {fmt(r.get('gemv_s'))} | "
                     f"{100 * drift:.1f}% |")
    checks = [r for r in log if r.get("kind") == "ab_check"]
    bad = [(r["shape"], r["M"], key) for r in checks for key, v in r.items()
           if key not in ("kind", "shape", "N", "K", "M") and v is not True]
    lines.append(f"bit checks vs cur: {len(checks)} (shape, M) cases, not bit-identical or failed: {bad or 'none'}")
    return lines


def ab_variants_table(log: list) -> str:
    """Every variant's time (us, mean of the two rounds) per (shape, M): the long form of `ab_table`."""
    names = list({**AB_VARIANTS, **AB_ONE_GROUP})
    lines = ["| shape | M | " + " | ".join(names) + " | w8a8 | bf16 | smm_row | gemv |", "|---" * (len(names) + 6) + "|"]
    for r in log:
        if r.get("kind") == "ab_bench":
            cells = [f"{r[key] * 1e6:.1f}" if r.get(key) else "-" for key in [f"{nm}_s" for nm in names]
                     + ["w8a8_s", "bf16_s", "smm_row_s", "gemv_s"]]
            lines.append(f"| {r['shape']} | {r['M']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def tuned_configs() -> dict:
    """The configs the autotuners picked, per key (for the record: they never depend on exact M)."""
    out = {}
    for name, tuner in fp8_launcher._tuned.items():
        out[name] = {str(key): str(cfg) for key, cfg in getattr(tuner, "cache", {}).items()}
    return out


def table(log: list, copy_bw: float) -> str:
    def f(v, fmt):
        return "-" if v is None else format(v, fmt)

    lines = [
        f"copy bandwidth {copy_bw / 1e12:.2f} TB/s; times in us; ratios = baseline time / ours",
        "| shape | M | wo us | wo TB/s | %copy | wo vs bf16 | wo vs smm_row | wo vs deq | gemv us | gemv TB/s | f32x us "
        "| w8a8 us | w8a8 TB/s | w8a8 vs smm_blk | bf16 us | smm_row us | smm_blk us | wo 2L us | w8a8 2L us "
        "| wo px us | prep us |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in log:
        if r.get("kind") != "bench":
            continue
        def us(key: str, r: dict = r) -> float | None:
            return None if r.get(key) is None else r[key] * 1e6

        lines.append(
            f"| {r['shape']} | {r['M']} | {f(us('fp8_wo_s'), '.1f')} | {f(r.get('fp8_wo_TBps'), '.2f')} | "
            f"{f(r.get('fp8_wo_frac_copy') and 100 * r['fp8_wo_frac_copy'], '.0f')} | {f(r.get('fp8_wo_vs_bf16'), '.2f')} | "
            f"{f(r.get('fp8_wo_vs_smm_row'), '.2f')} | {f(r.get('fp8_wo_vs_deq_mm'), '.0f')} | {f(us('fp8_gemv_s'), '.1f')} | "
            f"{f(r.get('fp8_gemv_TBps'), '.2f')} | {f(us('fp8_wo_f32x_s'), '.1f')} | "
            f"{f(us('fp8_w8a8_s'), '.1f')} | {f(r.get('fp8_w8a8_TBps'), '.2f')} | {f(r.get('fp8_w8a8_vs_smm_block'), '.2f')} | "
            f"{f(us('bf16_s'), '.1f')} | {f(us('smm_row_s'), '.1f')} | {f(us('smm_block_s'), '.1f')} | "
            f"{f(us('fp8_wo_2l_s'), '.1f')} | {f(us('fp8_w8a8_2l_s'), '.1f')} | {f(us('fp8_wo_px_s'), '.1f')} | "
            f"{f(us('prep_x_s'), '.1f')} |"
        )
    worst: dict = {}
    for r in log:
        if r.get("kind") == "parity":
            for key, v in r.items():
                if isinstance(v, float):
                    worst[key] = max(worst.get(key, 0.0), v)
                elif key.endswith("_nan") and v:
                    worst[key] = True
    inv = [r for r in log if r.get("kind") == "invariance"]
    bad = [(r["shape"], r["variant"]) for r in inv
           if not all(all(d.values()) for d in (r["auto_tile"], r["decode_tile"], r["gemv_1_to_4"]))]
    lines += fast_table(log)
    lines.append(f"parity (worst normwise rel. error per variant): {worst}")
    lines.append(f"invariance: {len(inv)} cases, not bit-identical: {bad or 'none'}")
    px_bad = [(r["shape"], r["M"]) for r in log if r.get("kind") == "bench" and r.get("px_equal") is False]
    if any("px_equal" in r for r in log):
        lines.append(f"prepared x equal to in-kernel preparation: not equal at {px_bad or 'none'}")
    fused = [r for r in log if r.get("kind") == "fused_check"]
    if fused:
        failed = [(r["shape"], r["variant"]) for r in fused if not all(v for key, v in r.items() if key.endswith(
            ("_equal", "_zero")))]
        lines.append(f"fused split-K vs two launches: {len(fused)} cases, failed: {failed or 'none'}")
    errors = [r for r in log if r.get("kind", "").endswith("error")]
    if errors:
        lines.append(f"errors: {errors}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench-out"))
    parser.add_argument("--shapes", nargs="*", default=list(SHAPES))
    parser.add_argument("--ms", nargs="*", type=int, default=list(MS))
    parser.add_argument("--check", action="store_true", help="parity and batch invariance first")
    parser.add_argument("--grouped", action="store_true", help="also the grouped wo_a projection")
    parser.add_argument("--check-fused", action="store_true",
                        help="fused split-K sum vs the two-launch twin (bitwise, eager and graph replay) first")
    parser.add_argument("--split-sum", choices=["auto", "fused", "two_launch", "both"], default="auto",
                        help="decode split-K sum of the main rows; 'both': main rows fused plus *_2l rows")
    parser.add_argument("--skip", nargs="*", default=[], help="variants not to time (e.g. fp8_wo_f32x smm_block)")
    parser.add_argument("--prepared-x", action="store_true",
                        help="also weight-only on activations prepared by their own launch (issue-9 experiment)")
    parser.add_argument("--prefill-fast", action="store_true",
                        help="also the opt-in fast prefill tile (fast_wo, fast_w8a8) at M >= 64, with its parity check")
    parser.add_argument("--decode-ab", action="store_true",
                        help="the DecodeOptions A/B (bit checks, then timing) instead of the main rows")
    parser.add_argument("--ab-checks-only", action="store_true", help="--decode-ab: bit checks only (no timing)")
    parser.add_argument("--no-bench", action="store_true",
                        help="only --check (a compile-warming pass that can run beside other work; no timing)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("benchmarks/kernels.py needs a CUDA GPU", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    import triton

    log: list = []
    _SINK.append(open(args.out / "kernels.jsonl", "w"))  # noqa: SIM115 (closed in the finally below)
    header = {
        "kind": "env", "gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "argv": sys.argv,
    }
    copy_bw = copy_bandwidth()
    header["copy_TBps"] = copy_bw / 1e12
    log.append(header)
    emit(header)
    shapes = {name: SHAPES[name] for name in args.shapes}
    try:
        if args.check:
            try:
                check(shapes, log)
            except Exception as e:  # report and still benchmark
                log.append({"kind": "check_error", "error": f"{type(e).__name__}: {e}"[:2000]})
                emit(log[-1])
        if args.check_fused:
            try:
                check_fused(shapes, log)
            except Exception as e:  # report and still benchmark
                log.append({"kind": "check_error", "error": f"{type(e).__name__}: {e}"[:2000]})
                emit(log[-1])
        if args.decode_ab:
            decode_ab(shapes, tuple(args.ms), copy_bw, log, args.ab_checks_only)
            args.no_bench = True  # the A/B replaces the main rows
        for name, (n, k) in ({} if args.no_bench else shapes).items():
            try:
                bench_shape(name, n, k, tuple(args.ms), copy_bw, log, args.split_sum, tuple(args.skip),
                            args.prepared_x, args.prefill_fast)
            except Exception as e:  # one shape failing must not hide the others
                log.append({"kind": "bench_error", "shape": name, "error": f"{type(e).__name__}: {e}"[:2000]})
                emit(log[-1])
        if args.grouped and not args.no_bench:
            try:
                bench_grouped(copy_bw, tuple(args.ms), log)
            except Exception as e:
                log.append({"kind": "bench_error", "shape": "wo_a", "error": f"{type(e).__name__}: {e}"[:2000]})
        log.append({"kind": "tuned_configs", **tuned_configs()})
        emit(log[-1])
    finally:
        _SINK.pop().close()
        if args.decode_ab:
            (args.out / "variants.md").write_text(ab_variants_table(log) + "\n")
            text = "\n".join([f"copy {copy_bw / 1e12:.2f} TB/s; us = mean of 2 graph-replay rounds",
                               *ab_table(log)])
        else:
            text = table(log, copy_bw)
        (args.out / "table.md").write_text(text + "\n")
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
