#!/usr/bin/env bash
# Session 12, fifth H200 call: the serving sweep with EVERY Triton kernel. Every earlier sweep (sessions 10-12)
# exported MXSERVE_KERNEL_OVERRIDES=linear=triton,moe=triton,attention=triton, without hc=triton, so the
# hyper-connections ran as ~140 torch ops per hc_pre inside the graphs. A CPU stub server
# (benchmarks/server_overhead.py, 1 ms steps) gave 836 tok/s per stream at N = 1, so the HTTP path is not
# what held the H200 server at 194 tok/s per stream while batch_trace (hc=triton) decodes in 1.1 ms.
# Predictions: batch_trace N = 8 plain without hc=triton: decode steps >= 4 ms (vs 1.1 ms with it);
# serving with hc=triton: plain N = 1 >= 600 tok/s per stream (was 194), K = 7 >= 1.5x plain at N = 1.
#   run(command="bash benchmarks/gpu_s12_call5.sh", carry=[".tc", ".whl"], timeout_s=240)
source benchmarks/gpu_s5_env.sh
stamp "batch_trace N=8 plain, hc kernels = reference"
(cd benchmarks && timeout 45 python3 batch_trace.py --concurrency 8 --k 0 --capture-at-start \
    --kernels linear=triton,moe=triton,attention=triton --out "$R/trace8_k0_hcref.json" > "$R/trace8_k0_hcref.log" 2>&1)
echo "exit $?"; grep -v Warning "$R/trace8_k0_hcref.log" | tail -n 6 | cut -c1-200
for spec in off 7; do
    stamp "serving sweep, every Triton kernel, speculation $spec"; serve_sweep 85 "$spec" all-triton
done
gpu_s5_pack
