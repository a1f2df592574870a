"""One launch of each decode linear under Nsight Compute (issue 9: why the 32 MB layers stream at
~55% of copy). Warms every launch up (compiles, autotunes), then runs each once between
cudaProfilerStart/Stop, so `ncu --profile-from-start off` sees exactly those launches:
the read-ceiling kernel at wo_b's byte count, then wq_b and wo_b at M = 1 weight-only (bf16 x,
the shipped rule: the activation preparation launch + the GEMM) and W8A8 (x quantized in the
programs, what faithful numerics run).

    ncu --clock-control none --profile-from-start off --section SpeedOfLight ... \\
        python3 benchmarks/ncu_linear_probe.py
"""

from __future__ import annotations

import torch
from _cuda_timing import profiled_once
from read_ceiling import read_launch

from mxserve.formats import QuantizedWeight
from mxserve.kernels.linear_fp8_block.triton import linear_fp8_block_triton

SHAPES = {"wq_b": (32768, 1024), "wo_b": (4096, 8192)}


def main() -> None:
    calls = []
    n, k = SHAPES["wo_b"]
    buf = torch.randint(-2**31, 2**31 - 1, (n * k // 4,), dtype=torch.int32, device="cuda")
    out = torch.empty(buf.numel() // 4096, dtype=torch.int32, device="cuda")
    calls.append(read_launch(buf, out, 4096, 4, 8))
    for n, k in SHAPES.values():
        codes = torch.randint(0, 126, (n, k), dtype=torch.uint8, device="cuda")
        scales = torch.randint(118, 124, (n // 128, k // 128), dtype=torch.uint8, device="cuda")
        w = QuantizedWeight.from_fp8_block(codes, scales)
        x = torch.randn(1, k, device="cuda").bfloat16()
        calls.append(lambda w=w, x=x: linear_fp8_block_triton(x, w, out_dtype=torch.bfloat16))
        calls.append(lambda w=w, x=x: linear_fp8_block_triton(x, w, quantize_input=True, out_dtype=torch.bfloat16))
    for fn in calls:
        for _ in range(3):
            fn()
    profiled_once(calls)
    print("profiled:", len(calls), "calls")


if __name__ == "__main__":
    main()
