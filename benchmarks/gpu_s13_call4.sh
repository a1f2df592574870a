#!/usr/bin/env bash
# Session 13, fourth H200 call: the small layers' new decode config gives the old bits (GPU options test), and
# session 12's prefill rows measured (the plan session 12 wrote for this session's first call; its GPU gates
# passed in call 1). Predictions (written in session 12): batch_trace N = 8, 64-token steps: no eager step with rows on,
# wall <= 0.6x rows off (K = 0), <= 0.7x (K = 7); serving plain, budget 64 / cap 64: TTFT p50 at N = 1 <= 15 ms
# with rows (44 ms in session 12 at the default budget), N = 8 aggregate >= 1.2x rows off, N = 64 TTFT worse.
#   run(command="bash benchmarks/gpu_s13_call4.sh", carry=[".tc", ".whl"], timeout_s=590)
source benchmarks/gpu_s5_env.sh
stamp "GPU: decode options bitwise, the small layers' 64x4x2 config included"
timeout 150 python3 -m pytest -q -m gpu tests/kernels/linear_fp8_block/test_decode_options.py \
    > "$R/options_tests.log" 2>&1; echo "exit $?"; tail -n 2 "$R/options_tests.log" | cut -c1-200
trace() {  # trace K ROWS SECONDS
    stamp "batch_trace N=8 K=$1, 64-token steps, prefill rows $2"
    (cd benchmarks && MXSERVE_PREFILL_ROWS=$2 timeout "$3" python3 batch_trace.py --concurrency 8 --k "$1" \
        --capture-at-start --max-num-batched-tokens 64 --prefill-cap 64 --out "$R/trace8_k$1_rows$2.json" \
        > "$R/trace8_k$1_rows$2.log" 2>&1); echo "exit $?"
    grep -v Warning "$R/trace8_k$1_rows$2.log" | tail -n 5 | cut -c1-300
}
trace 0 0 60; trace 0 1 60
for rows in 0 1; do
    stamp "serving sweep, plain, every Triton kernel, budget 64 / cap 64, prefill rows $rows"
    MXSERVE_PREFILL_ROWS=$rows SWEEP_TAG=rows$rows serve_sweep 100 off all-triton --max-num-batched-tokens 64 \
        --prefill-cap 64
done
trace 7 0 45; trace 7 1 45
gpu_s5_pack
