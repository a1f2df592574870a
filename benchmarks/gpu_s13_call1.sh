#!/usr/bin/env bash
# Next session's first H200 call (written in session 12, not run: the device budget was spent).
# Session 12 added, CPU-tested only: prefill chunks as decode rows of the graph (MXSERVE_PREFILL_ROWS=1, off by
# default): a step whose tokens fit a bucket replays the decode graph with one row per token instead of an
# eager forward (~40 ms host-bound on the H200 for any short prefill: session 12 batch_trace). On the CPU
# (default model, faithful numerics, reference kernels) the logits came out bit-identical to the eager prefill.
# Predictions:
# - the GPU tests pass, the prefill-rows gate included (greedy tokens equal the eager prefill's); if it fails,
#   the switch stays off and the failure is the finding;
# - batch_trace N = 8 plain, 64-token steps (budget 64, prefill cap 64): no eager step with rows on; wall
#   <= 0.6x rows off (the 2 x ~35 ms prefill steps become ~6 replays of ~3 ms);
# - serving, plain, every Triton kernel, budget 64 / cap 64: TTFT p50 at N = 1 <= 15 ms with rows (session 12
#   call 5: 44.1 ms, default budget); N = 8 aggregate >= 1.2x rows off; N = 64 TTFT worse than the default
#   budget's (63 decodes leave one prefill token per 64-token step).
#   run(command="bash benchmarks/gpu_s13_call1.sh", carry=[".tc", ".whl"], timeout_s=590)
source benchmarks/gpu_s5_env.sh
stamp "GPU tests: prefill rows, CUDA graphs, capture at start"
timeout 200 python3 -m pytest -q tests/engine/test_prefill_rows.py tests/engine/test_cuda_graphs.py \
    tests/engine/test_graph_capture_at_start.py > "$R/gpu_tests.log" 2>&1; echo "exit $?"
grep -E "passed|failed|FAILED|Error" "$R/gpu_tests.log" | tail -n 6 | cut -c1-300
for rows in 0 1; do
    stamp "batch_trace N=8 plain, 64-token steps, prefill rows $rows"
    (cd benchmarks && MXSERVE_PREFILL_ROWS=$rows timeout 60 python3 batch_trace.py --concurrency 8 --k 0 \
        --capture-at-start --max-num-batched-tokens 64 --prefill-cap 64 --out "$R/trace8_rows$rows.json" \
        > "$R/trace8_rows$rows.log" 2>&1); echo "exit $?"
    grep -v Warning "$R/trace8_rows$rows.log" | tail -n 6 | cut -c1-300
done
for rows in 0 1; do
    stamp "serving sweep, plain, every Triton kernel, budget 64 / cap 64, prefill rows $rows"
    MXSERVE_PREFILL_ROWS=$rows SWEEP_TAG=rows$rows serve_sweep 100 off all-triton --max-num-batched-tokens 64 \
        --prefill-cap 64
done
gpu_s5_pack
