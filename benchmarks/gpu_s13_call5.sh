#!/usr/bin/env bash
# Session 13, fifth H200 call: prefill rows with larger row buckets (MXSERVE_DECODE_MAX_ROWS=256). Call 4 measured
# prefill rows at a 64-token budget (the old largest bucket): N = 1 TTFT 56.6 -> 7.6 ms, N = 8 aggregate 1482 ->
# 4344 tok/s, N = 64 1022 -> 6132 — but session 12's default budget (2048 tokens, rows off) gave N = 64 7404, so a
# 64-token budget caps large batches. With buckets to 256 a 256-token budget keeps every step graphed.
# Predictions: the GPU gate passes at 256 rows (greedy == eager prefill); rows on, budget 256 / cap 256: N = 1 TTFT
# <= 10 ms, N = 8 aggregate >= 4300, N = 64 aggregate >= the default's in the same call, TTFT p50 below it;
# rows on at the default budget: N = 1 TTFT <= 10 ms (one 128-token prompt = one 128-row replay), N = 64 ~ default.
#   run(command="bash benchmarks/gpu_s13_call5.sh", carry=[".tc", ".whl"], timeout_s=590)
source benchmarks/gpu_s5_env.sh
stamp "GPU gate: prefill rows at 64 and 256 rows"
timeout 150 python3 -m pytest -q -m gpu tests/engine/test_prefill_rows.py > "$R/rows_gate.log" 2>&1
echo "exit $?"; tail -n 2 "$R/rows_gate.log" | cut -c1-200
stamp "serving, plain, every Triton kernel: the defaults (budget 2048, rows off)"
SWEEP_TAG=default serve_sweep 100 off all-triton
stamp "serving: rows on, buckets to 256, budget 256 / cap 256"
MXSERVE_PREFILL_ROWS=1 MXSERVE_DECODE_MAX_ROWS=256 SWEEP_TAG=rows256_b256 serve_sweep 100 off all-triton \
    --max-num-batched-tokens 256 --prefill-cap 256
stamp "serving: rows on, buckets to 256, the default budget"
MXSERVE_PREFILL_ROWS=1 MXSERVE_DECODE_MAX_ROWS=256 SWEEP_TAG=rows256_default serve_sweep 100 off all-triton
gpu_s5_pack
