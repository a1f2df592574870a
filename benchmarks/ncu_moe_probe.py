"""The Flash MoE's routed experts under Nsight Compute (issue 10: 1 token 47.5 us, ~40% of copy on
the hit experts' ~78 MB; 64 tokens 1.12 ms). Warms the shipped decode path up (compiles), then runs
one call per token count between cudaProfilerStart/Stop, so `ncu --profile-from-start off` sees
exactly those launches, each with its own routing and fresh activations (no expert left in L2 from
the warm-up: the 50 MB L2 holds under one call's bytes).

    ncu --clock-control none --profile-from-start off --section SpeedOfLight ... \\
        python3 benchmarks/ncu_moe_probe.py [--tokens 1 64]
"""

from __future__ import annotations

import argparse

import torch
from _cuda_timing import profiled_once
from moe import TOP_K, D, random_layer

from mxserve.kernels.moe.experts import moe_experts_triton
from mxserve.kernels.moe.router import route_triton


def call(st, x, gate, bias):
    w, ids = route_triton(x, gate, top_k=TOP_K, routed_scaling=1.5, bias=bias)
    return lambda: moe_experts_triton(x, ids, w, st, limit=10.0, quantize_inputs=True, hidden_dtype=torch.bfloat16)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, nargs="*", default=[1, 64])
    args = ap.parse_args()
    st = random_layer(0)
    g = torch.Generator(device="cuda").manual_seed(1)
    gate = (torch.randn(st.num_experts, D, device="cuda", generator=g) * 0.02).bfloat16()  # as moe.py
    bias = torch.randn(st.num_experts, device="cuda", generator=g) * 0.01
    for n in args.tokens:
        warm = call(st, torch.randn(n, D, device="cuda", generator=g).bfloat16(), gate, bias)
        for _ in range(3):
            warm()
    timed = [call(st, torch.randn(n, D, device="cuda", generator=g).bfloat16(), gate, bias) for n in args.tokens]
    profiled_once(timed)
    print("profiled token counts:", args.tokens)


if __name__ == "__main__":
    main()
