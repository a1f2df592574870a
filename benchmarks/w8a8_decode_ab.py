"""W8A8 decode launches of linear_fp8_block (faithful numerics' path) under the session-5 options.

    PYTHONPATH=src python benchmarks/w8a8_decode_ab.py --out $OUT/w8a8_ab.json

Session 5's A/B (benchmarks/kernels.py --decode-ab) covered weight-only decode; the model runs W8A8
by default (activation quantization + FP8-MMA tile). This times `linear_fp8_block_triton(x, w,
quantize_input=True)` at M = 1 and 8 on the Flash shapes under CUDA-graph replay (weight copies
rotated so a pass reads >= 3x the L2) for: the autotuned launch, a programmatic dependent launch
(pdl), the 128 x 8-warp tile, and both; each variant's rows are checked bit-identical to the
autotuned launch's first.
"""

# ruff: noqa: B023  (every lambda runs at once, inside the loop iteration that defines it)
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from _cuda_timing import graph_time

from kernels import ROTATE_BYTES, SHAPES, make_weight
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
    args = ap.parse_args()
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


if __name__ == "__main__":
    main()
