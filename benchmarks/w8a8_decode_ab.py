"""W8A8 decode launches of linear_fp8_block (faithful numerics' path) under the session-5 options.

    PYTHONPATH=src python benchmarks/w8a8_decode_ab.py --out $OUT/w8a8_ab.json

Session 5's A/B (benchmarks/kernels.py --decode-ab) covered weight-only decode; the model runs W8A8
by default (activation quantization + FP8-MMA tile). This times `linear_fp8_block_triton(x, w,
quantize_input=True)` at M = 1 and 8 on the Flash shapes under CUDA-graph replay (weight copies
rotated so a pass reads >= 3x the L2) for: the autotuned launch, a programmatic dependent launch
(pdl), the 128 x 8-warp tile, and both; each variant's rows are checked bit-identical to the
autotuned launch's first.

`--fused` (session 6) runs the A/B of the fused activation quantization and the output-dtype
epilogue instead (`fused_ab`, below): bit checks at every shape and M = 1, 8, 16 first, then
CUDA-graph timings of today's model path (act_quant launch, linear, `.to(bf16)`) against the fused
launch with the bf16 epilogue, L2-cold (rotating weight copies, >= 192 MB a pass) and L2-warm (one
copy, 8 calls), and a chain of one layer's W8A8 linears (2 layers, distinct copies) against the sum
of the isolated cold timings. `--device cpu` (under TRITON_INTERPRET=1) runs the checks only, at
tiny shapes: the smoke test of the GPU script's Python.

    PYTHONPATH=src python benchmarks/w8a8_decode_ab.py --fused --out $OUT/w8a8_fused.json
    TRITON_INTERPRET=1 PYTHONPATH=src python benchmarks/w8a8_decode_ab.py --fused --device cpu
"""

# ruff: noqa: B023  (every lambda runs at once, inside the loop iteration that defines it)
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import torch
from _cuda_timing import graph_time

from kernels import ROTATE_BYTES, SHAPES, make_weight
from mxserve.formats import QuantizedWeight, WeightLayout
from mxserve.kernels.linear_fp8_block import triton as launcher
from mxserve.kernels.linear_fp8_block.triton import DecodeOptions, linear_fp8_block_triton

VARIANTS = {  # name: (options, forced decode config)
    "auto": (DecodeOptions(shape_rule=False), None),
    "pdl": (DecodeOptions(shape_rule=False, pdl=True), None),
    "n128w8": (DecodeOptions(shape_rule=False), (128, 8, 4)),
    "n128w8_pdl": (DecodeOptions(shape_rule=False, pdl=True), (128, 8, 4)),
    "n64w4_pdl": (DecodeOptions(shape_rule=False, pdl=True), (64, 4, 4)),
}


def run(options: DecodeOptions, cfg, fn):
    prev, prev_cfg = launcher.set_decode_options(options), launcher._FORCED["decode"]
    launcher._FORCED["decode"] = cfg
    try:
        return fn()
    finally:
        launcher.set_decode_options(prev)
        launcher._FORCED["decode"] = prev_cfg


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("w8a8_ab.json"))
    ap.add_argument("--ms", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--fused", action="store_true", help="the session-6 A/B (fused act quant, bf16 epilogue)")
    ap.add_argument("--device", default="cuda", help="cpu: the --fused checks only, tiny shapes (interpreter)")
    args = ap.parse_args()
    if args.fused:
        fused_ab(args.out, args.device)
        return
    rows = []
    for name, (n, k) in SHAPES.items():
        copies = max(1, min(4, ROTATE_BYTES // (n * k)))
        ws = [make_weight(n, k, seed) for seed in range(copies)]
        for m in args.ms:
            x = torch.randn(m, k, device="cuda", generator=torch.Generator(device="cuda").manual_seed(m)).bfloat16()
            want = run(*VARIANTS["auto"], lambda: linear_fp8_block_triton(x, ws[0], quantize_input=True))
            row = {"shape": name, "m": m}
            for label, (opts, cfg) in VARIANTS.items():
                got = run(opts, cfg, lambda: linear_fp8_block_triton(x, ws[0], quantize_input=True))
                row[f"{label}_equal"] = bool(torch.equal(got, want))
                row[f"{label}_us"] = run(opts, cfg, lambda: graph_time(
                    [lambda w=w: linear_fp8_block_triton(x, w, quantize_input=True) for w in ws])) * 1e6
            rows.append(row)
            print(json.dumps(row), flush=True)
    args.out.write_text(json.dumps({"device": torch.cuda.get_device_name(), "rows": rows}, indent=1))
    print(f"{'shape':>11} {'M':>3} " + " ".join(f"{v:>11}" for v in VARIANTS) + "  all bit-identical")
    for r in rows:
        print(f"{r['shape']:>11} {r['m']:>3} " + " ".join(f"{r[v + '_us']:11.1f}" for v in VARIANTS)
              + f"  {all(r[v + '_equal'] for v in VARIANTS)}")


# --- session 6: the fused activation quantization and the bf16 epilogue ---------------------------
TWO_LAUNCH = DecodeOptions(fused_act_quant=False)  # the act_quant launch, then the linear (the off switch)
FUSED = DecodeOptions(fused_act_quant_large=True)  # x quantized inside the linear's programs, every layer size
FUSED_VARIANTS = {  # name: (options, out_dtype of the launch, cast to bf16 after it)
    "two_cast": (TWO_LAUNCH, None, True),  # the model's path before: act_quant, linear (fp32), .to(bf16)
    "fused_cast": (FUSED, None, True),  # the quantization fused, the cast kept
    "fused_bf16": (FUSED, torch.bfloat16, False),  # one launch a linear
    "two_bf16": (TWO_LAUNCH, torch.bfloat16, False),  # the epilogue alone
    "rule_bf16": (DecodeOptions(), torch.bfloat16, False),  # the default: fused below 32 Mi weights, else two
}
# the model runs wq_a and wkv, and the shared expert's w1 and w3, as separate launches (model/attention.py,
# kernels/moe/shared.py); SHAPES has them merged (wq_a||wkv, shared_w13), the launches a merge would give
MODEL_SHAPES = {"wq_a": (1024, 4096), "wkv": (512, 4096), "shared_w1": (2048, 4096)}
# one CSA layer's W8A8 linears in the model's order: (shape, copy offset) — w3 is a second w1-shaped weight
CHAIN = (("wq_a", 0), ("wkv", 0), ("wq_b", 0), ("idx_wq_b", 0), ("wo_b", 0), ("shared_w1", 0), ("shared_w1", 1),
         ("shared_w2", 0))
TINY_SHAPES = {"tiny_72x700": (72, 700), "tiny_256x512": (256, 512)}
WARM_MAX_BYTES = 48 << 20  # an L2-warm timing only for weights that fit the H200's L2 (50 MB)


def _variant_call(name: str, x: torch.Tensor, w: QuantizedWeight) -> torch.Tensor:
    opts, out_dtype, cast = FUSED_VARIANTS[name]
    prev = launcher.set_decode_options(opts)
    try:
        out = linear_fp8_block_triton(x, w, quantize_input=True, out_dtype=out_dtype)
        return out.to(torch.bfloat16) if cast else out
    finally:
        launcher.set_decode_options(prev)


def _fp32_call(opts: DecodeOptions, x: torch.Tensor, w: QuantizedWeight) -> torch.Tensor:
    prev = launcher.set_decode_options(opts)
    try:
        return linear_fp8_block_triton(x, w, quantize_input=True)
    finally:
        launcher.set_decode_options(prev)


def _bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    ints = {torch.float32: torch.int32, torch.bfloat16: torch.int16}
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(ints[a.dtype]), b.view(ints[b.dtype]))


def _weight(n: int, k: int, seed: int, device: str) -> QuantizedWeight:
    if device == "cuda":
        return make_weight(n, k, seed)
    w = torch.randn(n, k, generator=torch.Generator().manual_seed(seed)) * 0.02
    return QuantizedWeight.quantize(w, WeightLayout.FP8_BLOCK)


def _activations(m: int, k: int, device: str) -> torch.Tensor:
    """bf16 x with blocks that stress the scale rule: one all-zero, one huge, some tiny values."""
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(1000 + m))
    x[0, :128] = 0.0
    if m > 1:
        x[1, -100:] *= 2.0**40
        x[m - 1, 3:60] *= 1e-5
    return x.to(device).bfloat16()


def fused_checks(shapes: dict, ms: tuple, device: str, emit) -> int:
    """Bit checks per (shape, M): fused == two-launch (fp32); the bf16 epilogue == .to(bf16) on both
    paths; three fused calls in a row equal (concurrent arrivals of the fused split sum). → failures."""
    failures = 0
    for name, (n, k) in shapes.items():
        w = _weight(n, k, 0, device)
        for m in ms:
            x = _activations(m, k, device)
            row = {"kind": "check", "shape": name, "m": m}
            try:
                two = _fp32_call(TWO_LAUNCH, x, w)
                fused = [_fp32_call(FUSED, x, w) for _ in range(3)]
                row.update(fused_equal=_bits_equal(fused[0], two),
                           fused_repeat_equal=all(_bits_equal(f, fused[0]) for f in fused[1:]),
                           fused_bf16_equal=_bits_equal(_variant_call("fused_bf16", x, w), two.to(torch.bfloat16)),
                           two_bf16_equal=_bits_equal(_variant_call("two_bf16", x, w), two.to(torch.bfloat16)),
                           finite=bool(two.isfinite().all()))
            except Exception as e:  # a failed case is a failed check; the others still run
                row.update(error=f"{type(e).__name__}: {str(e).splitlines()[0][:200]}", checks_equal=False)
            failures += sum(not v for key, v in row.items() if key.endswith("equal"))
            emit(row)
        del w
    return failures


def _copies(w0: QuantizedWeight, n: int, k: int) -> list[QuantizedWeight]:
    """w0 and clones so that one pass over them reads >= ROTATE_BYTES (>= 3x the L2): L2-cold."""
    num = max(1, math.ceil(ROTATE_BYTES / (n * k)))
    return [w0] + [QuantizedWeight.from_fp8_block(w0.codes.clone(), w0.scales.clone()) for _ in range(num - 1)]


def _time_variants(x: torch.Tensor, ws: list, row: dict, suffix: str) -> None:
    for v in FUSED_VARIANTS:
        try:
            row[f"{v}_{suffix}_us"] = graph_time([lambda w=w, v=v: _variant_call(v, x, w) for w in ws]) * 1e6
        except Exception as e:  # one failed variant must not lose the rest of the run
            row[f"{v}_{suffix}_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"


def fused_times(shapes: dict, ms: tuple, emit, weights: dict) -> None:
    """Per (shape, M): every variant L2-cold (rotating copies) and, where the weight fits the L2,
    L2-warm (one copy, 8 calls a graph). `weights[name]` keeps the copies for the chain."""
    for name, (n, k) in shapes.items():
        if name not in weights:
            weights[name] = _copies(make_weight(n, k, 0), n, k)
        ws = weights[name]
        for m in ms:
            x = _activations(m, k, "cuda")
            row = {"kind": "time", "shape": name, "m": m, "copies": len(ws), "weight_mb": n * k / 2**20}
            _time_variants(x, ws, row, "cold")
            if n * k <= WARM_MAX_BYTES:
                _time_variants(x, [ws[0]] * 8, row, "warm")
            emit(row)


def chain_times(weights: dict, emit, layers: int = 2) -> None:
    """M = 1: one graph runs a CSA layer's W8A8 linears in the model's order (CHAIN) for `layers`
    layers (distinct weight copies, as in a step: nothing of the previous layer is in L2), against
    the sum of each linear's isolated L2-cold time — the in-step excess of launches back to back."""
    shapes = {**SHAPES, **MODEL_SHAPES}
    xs = {name: _activations(1, shapes[name][1], "cuda") for name, _ in CHAIN}
    row = {"kind": "chain", "m": 1, "layers": layers, "linears": [name for name, _ in CHAIN]}
    # layer i takes copy 2i + offset of each shape (w1 and w3: two copies of one shape)
    steps = [(name, weights[name][(2 * i + off) % len(weights[name])]) for i in range(layers) for name, off in CHAIN]
    for v in ("two_cast", "fused_bf16", "rule_bf16"):
        calls = [lambda name=name, w=w, v=v: _variant_call(v, xs[name], w) for name, w in steps]
        row[f"{v}_chain_us_per_layer"] = graph_time(calls) * len(calls) / layers * 1e6
    emit(row)


def fused_ab(out: Path, device: str) -> None:
    rows: list[dict] = []
    sink = out.with_suffix(".jsonl").open("w")

    def emit(row: dict) -> None:
        rows.append(row)
        print(json.dumps(row), flush=True)
        sink.write(json.dumps(row) + "\n")
        sink.flush()

    gpu = device == "cuda"
    shapes = SHAPES if gpu else TINY_SHAPES
    try:
        failures = fused_checks(shapes, (1, 8, 16) if gpu else (1, 2, 16), device, emit)
        print(f"bit checks: {failures} failures", flush=True)
        if gpu:
            weights: dict = {}
            model_shapes = {k: v for k, v in SHAPES.items() if k != "head"}
            fused_times(model_shapes, (1,), emit, weights)
            fused_times(MODEL_SHAPES, (1,), emit, weights)  # the separate launches the model runs (chain)
            chain_times(weights, emit)
            fused_times(model_shapes, (8,), emit, weights)
            weights.clear()
            torch.cuda.empty_cache()
            fused_times({"head": SHAPES["head"]}, (1, 8), emit, weights)  # weight-only in the model: last
    except KeyboardInterrupt:  # the script's timeout: keep (and summarize) what was measured
        print("interrupted: summarizing the rows so far", flush=True)
    out.write_text(json.dumps({"device": torch.cuda.get_device_name() if gpu else "cpu", "rows": rows}, indent=1))
    _fused_table(rows)


def _fused_table(rows: list[dict]) -> None:
    checks = [r for r in rows if r["kind"] == "check"]
    bad = [f"{r['shape']} M={r['m']}" for r in checks if not all(v for key, v in r.items() if key.endswith("equal"))]
    print(f"\nbit checks: {len(checks)} (shape, M) cases, {len(checks) - len(bad)} all equal" + (f"; FAILED: {bad}"
                                                                                                   if bad else ""))
    print(f"{'shape':>11} {'M':>2} {'L2':>4} " + " ".join(f"{v:>10}" for v in FUSED_VARIANTS) + "  saving us (%)")
    for r in rows:
        if r["kind"] != "time":
            continue
        for l2 in ("cold", "warm"):
            t = {v: r.get(f"{v}_{l2}_us") for v in FUSED_VARIANTS}
            if all(val is None for val in t.values()):
                continue
            cells = " ".join(f"{t[v]:10.2f}" if t[v] is not None else f"{'err':>10}" for v in FUSED_VARIANTS)
            save = ""
            if t["two_cast"] is not None and t["fused_bf16"] is not None:
                d = t["two_cast"] - t["fused_bf16"]
                save = f"  {d:+.2f} ({100 * d / t['two_cast']:+.0f}%)"
            print(f"{r['shape']:>11} {r['m']:>2} {l2:>4} {cells}{save}")
    for r in rows:
        if r["kind"] == "chain":
            iso = {v: sum(next((t[f"{v}_cold_us"] for t in rows if t["kind"] == "time" and t["shape"] == s
                                and t["m"] == 1 and f"{v}_cold_us" in t), float("nan")) for s in r["linears"])
                   for v in ("two_cast", "fused_bf16", "rule_bf16")}
            for v in ("two_cast", "fused_bf16", "rule_bf16"):
                print(f"chain M=1 {v}: {r[v + '_chain_us_per_layer']:.1f} us a layer in one graph vs "
                      f"{iso[v]:.1f} summed isolated L2-cold")


if __name__ == "__main__":
    main()
