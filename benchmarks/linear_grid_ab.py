"""Issue 9: does the decode linear stream faster with more, shorter programs? (session 13)

`benchmarks/read_ceiling.py` found a read-only kernel at 32 MB fastest with thousands of programs of
one 8-32 KB load each (9.9 us, 80% of copy), while the decode linear runs ~512 programs that each
walk a 64-row slab through 8 K blocks (wq_b 14.6 us, wo_b 17.5). The K grouping aims the grid at
`_GROUP_TARGET_PROGRAMS` programs; this A/B sets that target (512 = today, 1024, 2048, 4096), and
for weight-only bf16 x the (BLOCK_N, warps, stages) config and PDL, at every Flash dense shape and
M = 1, 8, 16, next to bf16 cuBLAS and rowwise `_scaled_mm` in the same run (CUDA-graph replay,
rotating weight copies, `benchmarks/kernels.py`'s harness).

A grouping is a function of (N, K) only, so every setting is batch-invariant; it is another
summation order than today's, so each setting's M = 1 row is checked equal to row 0 of its M = 16
launch (batch invariance) and against the fp64 twin (normwise, `err`).

    PYTHONPATH=src python benchmarks/linear_grid_ab.py --out $OUT/grid_ab.json
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import torch
from _cuda_timing import copy_bandwidth, graph_time

from kernels import ROTATE_BYTES, SHAPES, make_weight, rel_err
from mxserve.formats import QuantizedWeight
from mxserve.kernels.linear_fp8_block import linear_fp8_block_ref
from mxserve.kernels.linear_fp8_block import triton as fp8
from mxserve.kernels.linear_fp8_block.triton import linear_fp8_block_triton, set_decode_options

TARGETS = (512, 1024, 2048, 4096)
WO_SETTINGS = {  # label: DecodeOptions changes (weight-only bf16 x)
    "rule": {},
    "n64s2": {"wo_config": (64, 4, 2)},
    "n128w8s2": {"wo_config": (128, 8, 2)},
    "rule+pdl": {"pdl": True},
}


def run(x: torch.Tensor, w: QuantizedWeight, w8a8: bool) -> torch.Tensor:
    return linear_fp8_block_triton(x, w, quantize_input=w8a8, out_dtype=torch.bfloat16)


def bench_shape(name: str, n: int, k: int, ms: tuple, copy_bw: float, emit) -> None:
    w0 = make_weight(n, k, 0)
    copies = max(1, math.ceil(ROTATE_BYTES / w0.nbytes))
    ws = [w0] + [QuantizedWeight.from_fp8_block(w0.codes.clone(), w0.scales.clone()) for _ in range(copies - 1)]
    wb = [w.dequantize(torch.bfloat16) for w in ws[: max(1, math.ceil(ROTATE_BYTES / (2 * n * k)))]]
    x16 = torch.randn(max(ms), k, device="cuda").bfloat16()
    refs = {q: linear_fp8_block_ref(x16[:1].float(), w0, quantize_input=q) for q in (False, True)}
    for m in ms:
        x = x16[:m].contiguous()
        row = {"shape": name, "N": n, "K": k, "M": m, "bytes": w0.nbytes, "copies": copies,
               "bf16_s": graph_time([lambda w=w, x=x: torch.matmul(x, w.t()) for w in wb])}
        for target in TARGETS:
            fp8._GROUP_TARGET_PROGRAMS = target
            row[f"kb_per_group@{target}"] = fp8.kb_per_group(n, k)
            for w8a8, settings in ((False, WO_SETTINGS), (True, {"auto": {}})):
                for label, changes in settings.items():
                    key = f"{'w8a8' if w8a8 else 'wo'}:{label}@{target}"
                    prev = set_decode_options(**changes)
                    try:
                        if m == 1:  # once per setting: batch invariance and parity of the new grouping
                            one, full = run(x16[:1], w0, w8a8), run(x16, w0, w8a8)
                            row[key + ":invariant"] = bool(torch.equal(one[0], full[0]))
                            row[key + ":err"] = rel_err(one.float(), refs[w8a8])
                        row[key + "_s"] = graph_time([lambda w=w, x=x, q=w8a8: run(x, w, q) for w in ws])
                    except Exception as e:  # one failing setting must not hide the others
                        row[key + "_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
                    finally:
                        set_decode_options(prev)
        fp8._GROUP_TARGET_PROGRAMS = 512
        for key in [k_ for k_ in row if k_.endswith("_s") and k_ != "bf16_s"]:
            row[key[:-2] + "_frac_copy"] = w0.nbytes / row[key] / copy_bw
        emit(row)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--ms", nargs="+", type=int, default=[1, 8, 16])
    ap.add_argument("--out", type=Path, default=Path("grid_ab.json"))
    args = ap.parse_args()
    copy_bw = copy_bandwidth()
    rows = []

    def emit(row: dict) -> None:
        rows.append(row)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"copy_TBps": copy_bw / 1e12, "rows": rows}, indent=1))

    for name in args.shapes:
        n, k = SHAPES[name]
        bench_shape(name, n, k, tuple(args.ms), copy_bw, emit)
    print(f"copy {copy_bw / 1e12:.2f} TB/s; us per call (best of each family marked *)")
    for row in rows:
        times = {k_[:-2]: v for k_, v in row.items() if k_.endswith("_s") and k_ != "bf16_s"}
        best_wo = min((v, k_) for k_, v in times.items() if k_.startswith("wo:"))
        best_q = min((v, k_) for k_, v in times.items() if k_.startswith("w8a8:"))
        today_wo, today_q = times.get("wo:rule@512"), times.get("w8a8:auto@512")
        bad = [k_ for k_, v in row.items() if k_.endswith(":invariant") and not v]
        print(f"{row['shape']:>10} M={row['M']:<3} bf16 {row['bf16_s'] * 1e6:7.1f} | wo today {today_wo * 1e6:7.1f} "
              f"best {best_wo[0] * 1e6:7.1f} ({best_wo[1]}, {100 * row['bytes'] / best_wo[0] / copy_bw:.0f}% copy) | "
              f"w8a8 today {today_q * 1e6:7.1f} best {best_q[0] * 1e6:7.1f} ({best_q[1]})"
              + (f" | NOT INVARIANT: {bad}" if bad else ""))


if __name__ == "__main__":
    main()
