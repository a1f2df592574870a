"""Sparse-attention decode launch parameters on one H200: where does the ~21 us per launch go?

    PYTHONPATH=src python benchmarks/attention_sweep.py --out $OUT/attn_sweep.json

Session 5 measured the split-K decode at 21-23 us per launch at batch 1 whatever the key count (160
to 640 keys), after the chunk's entry loads were all issued up front (predicted 12-16 us). This
times `sparse_attention_triton` at Flash shapes (64 heads x 512, fp8_ds_mla, window 128 + CSA top-512
or HCA 32 entries at 4K context) under CUDA-graph replay for each (heads per program, keys per chunk,
warps), and the combine kernel alone, so the time per program can be read against the tile it
carries. Every variant's output is compared with the default parameters' (relative error: another
chunking is another fold order, within the kernel's stated tolerance).
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path

import torch
from _cuda_timing import graph_time
from attention import kv_cache

from mxserve.kernels.attention_ops.cache_args import EntryMode
from mxserve.kernels.sparse_attention import triton as launcher

DEV = "cuda"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("attn_sweep.json"))
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--deadline", type=float, default=80.0, help="seconds; later variants are skipped")
    ap.add_argument("--heads", type=int, default=64, help="64: Flash; 4: the packaged default model")
    ap.add_argument("--topk", type=int, default=512, help="CSA entries attended (512 Flash, 64 default model)")
    ap.add_argument("--variants", choices=["all", "default"], default="all",
                    help="default: only the launch parameters the launcher picks")
    args = ap.parse_args()
    t0 = time.time()
    g = torch.Generator(device=DEV).manual_seed(3)
    heads, d, window, topk, ctx = args.heads, 512, 128, args.topk, 4096
    default = launcher.launch_params(EntryMode.DS_MLA, heads, d)
    grid = [(default.block_h, default.block_k, default.num_warps)] if args.variants == "default" else \
        list(itertools.product((16, 32, 64), (16, 32, 64), (4, 8)))
    rows = []
    for batch in args.batches:
        win, comp = kv_cache(batch * window), kv_cache(batch * ctx // 4)
        seq = torch.arange(batch, device=DEV)
        ws = seq[:, None] * window + torch.arange(window, device=DEV)[None, :]
        cs = seq[:, None] * (ctx // 4) + torch.stack(
            [torch.randperm(ctx // 4, device=DEV, generator=g)[:topk] for _ in range(batch)])
        hs = ws[:, :32].contiguous()  # 32 HCA entries at 4K: the chunk count of an HCA layer
        q = (torch.randn(batch, heads, d, device=DEV, generator=g) * 0.05).bfloat16()
        sink = torch.randn(heads, device=DEV, generator=g)
        for kind, srcs in (("csa", [(win, ws), (comp, cs)]), ("hca", [(win, ws), (win, hs)])):
            want = launcher.sparse_attention_triton(q, srcs, sink, d**-0.5)
            for block_h, block_k, warps in grid:
                if time.time() - t0 > args.deadline:
                    break
                lp = launcher.LaunchParams(dot=1, block_h=block_h, block_k=block_k, piece=64, num_warps=warps)
                try:
                    got = launcher.sparse_attention_triton(q, srcs, sink, d**-0.5, params=lp)
                    err = float((got - want).norm() / want.norm())
                    us = graph_time([lambda lp=lp, srcs=srcs, q=q, sink=sink: launcher.sparse_attention_triton(
                        q, srcs, sink, d**-0.5, params=lp)]) * 1e6
                    row = {"heads": heads, "topk": topk, "batch": batch, "kind": kind, "block_h": block_h, "block_k": block_k, "warps": warps,
                           "us": us, "rel_err_vs_default": err, "default": lp == default}
                except Exception as exc:  # a config that does not compile: say so, keep going
                    row = {"batch": batch, "kind": kind, "block_h": block_h, "block_k": block_k, "warps": warps,
                           "error": f"{type(exc).__name__}: {str(exc)[:200]}"}
                rows.append(row)
                print(json.dumps(row), flush=True)
    args.out.write_text(json.dumps({"device": torch.cuda.get_device_name(), "rows": rows}, indent=1))
    ok = [r for r in rows if "us" in r]
    for (batch, kind), group in itertools.groupby(sorted(ok, key=lambda r: (r["batch"], r["kind"], r["us"])),
                                                  key=lambda r: (r["batch"], r["kind"])):
        group = list(group)
        d_us = next((r["us"] for r in group if r["default"]), float("nan"))
        best = group[0]
        print(f"b{batch} {kind}: default {d_us:.1f} us; best {best['us']:.1f} us (h{best['block_h']} k{best['block_k']} "
              f"w{best['warps']}, err {best['rel_err_vs_default']:.1e}); worst {group[-1]['us']:.1f}")


if __name__ == "__main__":
    main()
