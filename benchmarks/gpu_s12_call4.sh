#!/usr/bin/env bash
# Session 12, fourth H200 call: verify buckets up to 512 rows (MXSERVE_SPEC_VERIFY_MAX_ROWS, default 512;
# 64 = session 11's), so 64 requests verify whole K = 7 blocks instead of having their drafts cut to 0.
# Call 3 (64-row buckets, graphs captured at start): serving N = 64 with K = 7 gave 3205 tok/s aggregate
# against 5210 plain (0.62x).
# Predictions:
# - the GPU tests pass (the large-batch test now also runs > 64 verify rows);
# - batch_trace N = 64, K = 7: 512-row buckets >= 1.3x the 64-row ones in aggregate tok/s, and >= plain;
# - serving sweep K = 7: N = 64 aggregate >= 1.0x plain (was 0.62x); N = 1 and 8 as in call 3.
#   run(command="bash benchmarks/gpu_s12_call4.sh", carry=[".tc", ".whl"], timeout_s=540)
source benchmarks/gpu_s5_env.sh
stamp "GPU tests: speculative step graphs (> 64 verify rows), capture at start"
timeout 150 python3 -m pytest -q tests/speculative/test_step_graphs_gpu.py tests/engine/test_graph_capture_at_start.py \
    > "$R/gpu_tests.log" 2>&1; echo "exit $?"
grep -E "passed|failed|FAILED|Error" "$R/gpu_tests.log" | tail -n 6 | cut -c1-300
cd benchmarks
for setting in "7 512" "7 64" "0 512"; do
    set -- $setting; stamp "batch_trace N=64 K=$1 verify rows $2"
    MXSERVE_SPEC_VERIFY_MAX_ROWS=$2 timeout 100 python3 batch_trace.py --concurrency 64 --k "$1" --capture-at-start \
        --out "$R/trace64_k$1_r$2.json" > "$R/trace64_k$1_r$2.log" 2>&1; echo "exit $?"
    grep -v Warning "$R/trace64_k$1_r$2.log" | tail -n 8 | cut -c1-300
done
cd ..
for spec in 7 off; do
    stamp "serving sweep, speculation $spec (verify rows up to 512)"; serve_sweep 120 "$spec" linear=triton,moe=triton,attention=triton
done
gpu_s5_pack
