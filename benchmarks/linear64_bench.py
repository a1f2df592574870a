"""MXSERVE_LINEAR_DECODE_MAX_M on vs off at 17..64 rows (session 8, linear64): bits and graph time.

Off (default): M > 16 runs the prefill tile — W8A8: act_quant + the GEMM + `_sum_groups_kernel`
where the few output tiles split K. On (64): the decode launch over cdiv(M, 16) row tiles with its
fused split-sum and fused activation quantization, one launch. For each shape and M in 17, 33, 64:
the on and off results must be bit-identical (bf16 out, as the model calls them), and the time per
call is the median of CUDA-graph replays of `--calls` back-to-back calls (weights L2-warm: the
default model's layers fit in L2, the Flash ones mostly do). Shapes: the packaged default model's
linears read from its config.json (with per-step counts: their sum estimates the linear part of a
64-row decode step) and two Flash projections (4096x4096, 1536x4096).

    PYTHONPATH=src python benchmarks/linear64_bench.py --out $OUT/linear64.json
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch
from _cuda_timing import graph_time

from mxserve.formats import QuantizedWeight, WeightLayout
from mxserve.kernels.linear_bf16.triton import linear_bf16_triton
from mxserve.kernels.linear_fp8_block.triton import (
    DECODE_MAX_M_ENV,
    grouped_linear_fp8_block_triton,
    linear_fp8_block_triton,
)

CONFIG = Path(__file__).resolve().parent.parent / "src/mxserve/default_model/config.json"
ROWS = (17, 33, 64)


def default_shapes() -> list[dict]:
    """(name, kind, N, K, groups, count per step) of the default model's linears, from its config."""
    c = json.loads(CONFIG.read_text())
    h, layers, hd, heads = c["hidden_size"], c["num_hidden_layers"], c["head_dim"], c["num_attention_heads"]
    ratios = c["compress_ratios"][:layers]
    n_csa, n_hca = sum(r == 4 for r in ratios), sum(r == 128 for r in ratios)
    ql, og, olr, inter = c["q_lora_rank"], c["o_groups"], c["o_lora_rank"], c["moe_intermediate_size"]
    rows = [
        ("wq_a", "w8a8", ql, h, 1, layers), ("wq_b", "w8a8", heads * hd, ql, 1, layers),
        ("wkv", "w8a8", hd, h, 1, layers), ("idx_wq_b", "w8a8", c["index_n_heads"] * c["index_head_dim"], ql, 1, n_csa),
        ("wo_b", "w8a8", h, og * olr, 1, layers), ("shared_w1_w3", "w8a8", inter, h, 1, 2 * layers),
        ("shared_w2", "w8a8", h, inter, 1, layers), ("wo_a", "grouped", og * olr, heads * hd // og, og, layers),
        # bf16 weights (compressors, head): linear_bf16 takes the same switch
        ("csa_compressor", "bf16", 2 * hd, h, 1, 2 * n_csa), ("hca_compressor", "bf16", hd, h, 1, 2 * n_hca),
        ("idx_compressor", "bf16", 2 * c["index_head_dim"], h, 1, 2 * n_csa),
        ("idx_weights_proj", "bf16", c["index_n_heads"], h, 1, n_csa), ("head", "bf16", c["vocab_size"], h, 1, 1),
    ]
    return [dict(name=n, kind=k, n=nn, k=kk, groups=g, count=cnt) for n, k, nn, kk, g, cnt in rows]


FLASH = [dict(name=f"flash_{n}x{k}_{kind}", kind=kind, n=n, k=k, groups=1, count=0)
         for n, k in ((4096, 4096), (1536, 4096)) for kind in ("w8a8", "wo")]


def make_call(s: dict, m: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    if s["kind"] == "bf16":
        w = (torch.randn(s["n"], s["k"], generator=g) * 0.05).bfloat16().cuda()
        x = torch.randn(m, s["k"], generator=g).bfloat16().cuda()
        return lambda: linear_bf16_triton(x, w, out_dtype=torch.bfloat16)
    w = QuantizedWeight.quantize(torch.randn(s["n"], s["k"], generator=g) * 0.05, WeightLayout.FP8_BLOCK).to("cuda")
    if s["kind"] == "grouped":
        x = torch.randn(m, s["groups"], s["k"], generator=g).bfloat16().cuda()
        return lambda: grouped_linear_fp8_block_triton(x, w, out_dtype=torch.bfloat16)
    q = s["kind"] == "w8a8"
    x = torch.randn(m, s["k"], generator=g).bfloat16().cuda()  # the model's stream dtype
    return lambda: linear_fp8_block_triton(x, w, quantize_input=q, out_dtype=torch.bfloat16)


def with_switch(on: bool, fn):
    if on:
        os.environ[DECODE_MAX_M_ENV] = "64"
    else:
        os.environ.pop(DECODE_MAX_M_ENV, None)
    try:
        return fn()
    finally:
        os.environ.pop(DECODE_MAX_M_ENV, None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=20, help="calls per captured graph")
    ap.add_argument("--no-flash", action="store_true")
    ap.add_argument("--out", type=Path, default=Path("linear64.json"))
    args = ap.parse_args()
    shapes = default_shapes() + ([] if args.no_flash else FLASH)
    rows, mismatches = [], 0
    for i, s in enumerate(shapes):
        for m in ROWS:
            call = make_call(s, m, seed=i * 100 + m)
            off = with_switch(False, call)
            on = with_switch(True, call)
            equal = bool(torch.equal(on.view(torch.int16), off.view(torch.int16)))
            mismatches += not equal
            calls = [call] * args.calls
            t_off = with_switch(False, lambda calls=calls: graph_time(calls)) * 1e6
            t_on = with_switch(True, lambda calls=calls: graph_time(calls)) * 1e6
            rows.append(dict(s, m=m, equal=equal, off_us=t_off, on_us=t_on))
            print(f"{s['name']:>24} {s['kind']:>7} {s['n']:>5}x{s['k']:<5} M={m:<3} equal={equal!s:<5} "
                  f"off {t_off:7.2f} us  on {t_on:7.2f} us  x{t_on / t_off:.2f}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(dict(rows=rows, mismatches=mismatches), indent=1))
    print("\nlinear part of a default-model decode step (sum of count x time per call):")
    for m in ROWS:
        sel = [r for r in rows if r["m"] == m and r["count"]]
        off, on = sum(r["count"] * r["off_us"] for r in sel), sum(r["count"] * r["on_us"] for r in sel)
        print(f"  M={m:<3} {sum(r['count'] for r in sel)} calls: off {off:7.1f} us  on {on:7.1f} us  x{on / off:.2f}")
    print(f"bit mismatches on vs off: {mismatches} of {len(rows)}")


if __name__ == "__main__":
    main()
