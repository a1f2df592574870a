"""Decode-size latency of the hc kernels and the block RMS norm, old vs new, under CUDA-graph replay.

    python3 benchmarks/hc_latency.py [--tokens 1 8] [--sets 48] [--out FILE.json]

Flash shapes (hc 4, D 4096, 24 mixes, BF16 streams). One graph replays `--sets` calls, each on
its own inputs and weights (48 x 1.8 MB of hc weights: more than the 50 MB L2, so each call reads
its fn from HBM as a decode step does); µs per call is the median replay over the calls. Variants
in one process: "old" (MXSERVE_HC_OLD_KERNELS=1: the kernels before session 7), "new", and for the
layer row "new+side" (MXSERVE_HC_SIDE_STREAM=1).

Rows: hc_pre, hc_pre with 1 Sinkhorn iteration (their difference / 19 = one iteration), hc_post,
hc_head, rms_norm (one [T, 4096] norm), and "layer": hc_pre → rms_norm → a stand-in block (a bf16
[T, 4096] x [4096, 12288] matmul, ~25 us, on the caller's stream) → hc_post, minus the block alone:
the in-step cost of one mHC site, the number the side stream is for.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os

import torch
from _cuda_timing import graph_time

from mxserve.kernels.hyper_connection import HyperConnectionWeights
from mxserve.kernels.hyper_connection import triton as ht
from mxserve.kernels.rms_norm.triton import rms_norm_triton

HC, DIM, ITERS, EPS = 4, 4096, 20, 1e-6
VARIANTS = {"old": {"MXSERVE_HC_OLD_KERNELS": "1"}, "new": {}, "new+side": {"MXSERVE_HC_SIDE_STREAM": "1"}}


@contextlib.contextmanager
def variant(name: str):
    saved = {k: os.environ.pop(k, None) for k in ("MXSERVE_HC_OLD_KERNELS", "MXSERVE_HC_SIDE_STREAM")}
    os.environ.update(VARIANTS[name])
    try:
        yield
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None)
            if v is not None:
                os.environ[k] = v


def make_sets(num_tokens: int, num_sets: int) -> list[dict]:
    gen = torch.Generator(device="cuda").manual_seed(num_tokens)
    n = (2 + HC) * HC
    sets = []
    for _ in range(num_sets):
        streams = (torch.randn(num_tokens, HC, DIM, generator=gen, device="cuda") * 2).bfloat16()
        w = HyperConnectionWeights(torch.randn(n, HC * DIM, generator=gen, device="cuda") * 0.05,
                                   torch.randn(n, generator=gen, device="cuda"), torch.rand(3, generator=gen, device="cuda") + 0.5)
        head = (torch.randn(HC, HC * DIM, generator=gen, device="cuda") * 0.05, torch.randn(HC, generator=gen, device="cuda"),
                torch.rand(1, generator=gen, device="cuda") + 0.5)
        norm_w = (torch.rand(DIM, generator=gen, device="cuda") + 0.5).bfloat16()
        f = torch.randn(num_tokens, DIM, generator=gen, device="cuda").bfloat16()
        _, post, comb = ht.hc_pre_triton(streams, w, sinkhorn_iters=ITERS, hc_eps=EPS, rms_eps=EPS)
        sets.append(dict(streams=streams, w=w, head=head, norm_w=norm_w, f=f, post=post, comb=comb,
                         x=f.clone()))
    return sets


def rows_for(sets: list[dict], block_w: torch.Tensor, name: str) -> dict[str, float]:
    def pre(s, iters=ITERS):
        return lambda: ht.hc_pre_triton(s["streams"], s["w"], sinkhorn_iters=iters, hc_eps=EPS, rms_eps=EPS)

    def layer(s):
        def run():
            block_in, post, comb = ht.hc_pre_triton(s["streams"], s["w"], sinkhorn_iters=ITERS, hc_eps=EPS, rms_eps=EPS)
            out = rms_norm_triton(block_in, s["norm_w"], EPS) @ block_w
            return ht.hc_post_triton(out[:, :DIM], s["streams"], post, comb)
        return run

    us = {}
    with variant(name):
        if name != "new+side":  # a lone hc_pre with the side stream would leave its fork unjoined
            us["hc_pre"] = graph_time([pre(s) for s in sets]) * 1e6
            us["hc_pre 1 iter"] = graph_time([pre(s, 1) for s in sets]) * 1e6
            us["hc_post"] = graph_time([lambda s=s: ht.hc_post_triton(s["f"], s["streams"], s["post"], s["comb"])
                                        for s in sets]) * 1e6
            us["hc_head"] = graph_time([lambda s=s: ht.hc_head_triton(s["streams"], *s["head"], hc_eps=EPS, rms_eps=EPS)
                                        for s in sets]) * 1e6
            us["rms_norm"] = graph_time([lambda s=s: rms_norm_triton(s["f"], s["norm_w"], EPS) for s in sets]) * 1e6
        us["layer"] = graph_time([layer(s) for s in sets]) * 1e6
    return us


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--sets", type=int, default=48)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    block_w = torch.randn(DIM, 3 * DIM, device="cuda").bfloat16() * 0.02
    result = {"device": torch.cuda.get_device_name(), "sets": args.sets, "tokens": {}}
    for num_tokens in args.tokens:
        sets = make_sets(num_tokens, args.sets)
        block = graph_time([lambda s=s: s["x"] @ block_w for s in sets]) * 1e6
        per = {name: rows_for(sets, block_w, name) for name in VARIANTS}
        for name in per:
            per[name]["layer - block"] = per[name]["layer"] - block
            if "hc_pre" in per[name]:  # one Sinkhorn iteration (row + column half-steps)
                per[name]["1 Sinkhorn iter"] = (per[name]["hc_pre"] - per[name]["hc_pre 1 iter"]) / (ITERS - 1)
        result["tokens"][num_tokens] = {"block_us": block, **per}
        print(f"T={num_tokens}: block alone {block:.1f} us", flush=True)
        for row in per["old"]:
            cells = "  ".join(f"{name} {per[name][row]:7.2f}" if row in per[name] else f"{name} {'-':>7}"
                              for name in VARIANTS)
            print(f"  {row:<16} {cells}", flush=True)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(result, fh, indent=1)


if __name__ == "__main__":
    main()
