"""Issue 9: the FP8 decode linear on codes stored in 64 x 128 tiles (`tile_fp8_codes`), session 13.

`benchmarks/read_ceiling.py` read 32 MB with no arithmetic at 80% of copy in contiguous 8-32 KB
runs, but at 51-66% in the linear's pattern (64 rows of one 128 B block at the row stride). Tiled
codes make a program's K group one contiguous run. For every Flash dense shape and M = 1, 8, 16 this
times, under CUDA-graph replay with rotating weight copies (`benchmarks/kernels.py`'s harness), the
shipped launch on row-major codes against the same launch on tiled codes, weight-only (bf16 x) under
a few (BLOCK_N, warps, stages) configs and W8A8 (x quantized as faithful numerics do), next to bf16
cuBLAS; and checks every tiled result bit for bit against the row-major one (same arithmetic).

    PYTHONPATH=src python benchmarks/linear_tiled_ab.py --out $OUT/tiled_ab.json
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import torch
from _cuda_timing import copy_bandwidth, graph_time

from kernels import ROTATE_BYTES, SHAPES, make_weight
from mxserve.formats import QuantizedWeight
from mxserve.kernels.linear_fp8_block.triton import (
    linear_fp8_block_triton,
    set_decode_options,
    tile_fp8_codes,
)

WO_CONFIGS = {"rule": {}, "n64s2": {"wo_config": (64, 4, 2)}, "n64s4": {"wo_config": (64, 4, 4)},
              "n128w8s4": {"wo_config": (128, 8, 4)}, "n128s4": {"wo_config": (128, 4, 4)}}


def run(x, w, tiled, w8a8: bool):
    return linear_fp8_block_triton(x, w, quantize_input=w8a8, out_dtype=torch.bfloat16, w_tiled=tiled)


def bench_shape(name: str, n: int, k: int, ms: tuple, copy_bw: float, emit) -> None:
    w0 = make_weight(n, k, 0)
    copies = max(1, math.ceil(ROTATE_BYTES / w0.nbytes))
    ws = [w0] + [QuantizedWeight.from_fp8_block(w0.codes.clone(), w0.scales.clone()) for _ in range(copies - 1)]
    tiles = [tile_fp8_codes(w.codes) for w in ws]
    wb = [w.dequantize(torch.bfloat16) for w in ws[: max(1, math.ceil(ROTATE_BYTES / (2 * n * k)))]]
    x16 = torch.randn(max(ms), k, device="cuda").bfloat16()
    for m in ms:
        x = x16[:m].contiguous()
        row = {"shape": name, "N": n, "K": k, "M": m, "bytes": w0.nbytes, "copies": copies,
               "bf16_s": graph_time([lambda w=w, x=x: torch.matmul(x, w.t()) for w in wb])}
        cases = [(f"wo:{label}", False, changes) for label, changes in WO_CONFIGS.items()]
        cases.append(("w8a8:auto", True, {}))
        for label, w8a8, changes in cases:
            prev = set_decode_options(**changes)
            try:
                for layout, pick in (("rows", lambda i: None), ("tiled", lambda i: tiles[i])):
                    if layout == "rows" and label not in ("wo:rule", "wo:n64s2", "w8a8:auto"):
                        continue  # the row-major configs were timed in linear_grid_ab.py
                    key = f"{label}:{layout}"
                    row[key + "_s"] = graph_time([lambda i=i, x=x, q=w8a8, p=pick: run(x, ws[i], p(i), q)
                                                  for i in range(copies)])
                    row[key + "_frac_copy"] = w0.nbytes / row[key + "_s"] / copy_bw
                row[f"{label}:tiled_equal"] = bool(torch.equal(run(x, w0, tiles[0], w8a8), run(x, w0, None, w8a8)))
            except Exception as e:  # one failing case must not hide the others
                row[label + "_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
            finally:
                set_decode_options(prev)
        emit(row)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--ms", nargs="+", type=int, default=[1, 8, 16])
    ap.add_argument("--out", type=Path, default=Path("tiled_ab.json"))
    args = ap.parse_args()
    copy_bw = copy_bandwidth()
    rows = []

    def emit(row: dict) -> None:
        rows.append(row)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"copy_TBps": copy_bw / 1e12, "rows": rows}, indent=1))

    for name in args.shapes:
        bench_shape(name, *SHAPES[name], tuple(args.ms), copy_bw, emit)
    print(f"copy {copy_bw / 1e12:.2f} TB/s; us per call, % of copy in brackets")
    for row in rows:
        t = {k_[:-2]: v for k_, v in row.items() if k_.endswith("_s") and k_ != "bf16_s"}
        best = min(((v, k_) for k_, v in t.items() if k_.startswith("wo:") and k_.endswith(":tiled")),
                   default=(None, "none:none"))
        def pct(v, size=row["bytes"]):
            return "  n/a" if v is None else f"{v * 1e6:6.1f} ({100 * size / v / copy_bw:3.0f}%)"
        unequal = [k_ for k_, v in row.items() if k_.endswith("tiled_equal") and not v]
        errors = [k_ for k_ in row if k_.endswith("_error")]
        print(f"{row['shape']:>10} M={row['M']:<3} bf16 {row['bf16_s'] * 1e6:6.1f} | wo rows {pct(t.get('wo:rule:rows'))} "
              f"n64s2 {pct(t.get('wo:n64s2:rows'))} tiled {pct(t.get('wo:rule:tiled'))} best tiled {pct(best[0])} "
              f"{best[1].split(':')[1]} | w8a8 rows {pct(t.get('w8a8:auto:rows'))} tiled {pct(t.get('w8a8:auto:tiled'))}"
              + (f" | BITS DIFFER: {unequal}" if unequal else "") + (f" | ERRORS: {errors}" if errors else ""))


if __name__ == "__main__":
    main()
