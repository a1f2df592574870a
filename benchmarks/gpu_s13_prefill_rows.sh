#!/usr/bin/env bash
# The prefill-rows measurements (written in session 12 as the next first call; its GPU gates moved into gpu_s13_call1.sh).
# Session 12 added, CPU-tested only: prefill chunks as decode rows of the graph (MXSERVE_PREFILL_ROWS=1, off by
# default; in the speculative step too, as committed verify rows): a step whose tokens fit a bucket replays the
# decode graph with one row per token instead of an
# eager forward (~40 ms host-bound on the H200 for any short prefill: session 12 batch_trace). On the CPU
# (default model, faithful numerics, reference kernels) the logits came out bit-identical to the eager prefill.
# Predictions:
# - the GPU tests pass, the prefill-rows gate included (greedy tokens equal the eager prefill's); if it fails,
#   the switch stays off and the failure is the finding;
# - batch_trace N = 8 plain, 64-token steps (budget 64, prefill cap 64): no eager step with rows on; wall
#   <= 0.6x rows off (the 2 x ~35 ms prefill steps become ~6 replays of ~3 ms); with K = 7 the prefill
#   rows join the verify (session 12: 8 mixed eager steps, 0.31 s of a 0.62 s round): wall <= 0.7x rows off;
# - serving, plain, every Triton kernel, budget 64 / cap 64: TTFT p50 at N = 1 <= 15 ms with rows (session 12
#   call 5: 44.1 ms, default budget); N = 8 aggregate >= 1.2x rows off; N = 64 TTFT worse than the default
#   budget's (63 decodes leave one prefill token per 64-token step).
#   run(command="bash benchmarks/gpu_s13_prefill_rows.sh", carry=[".tc", ".whl"], timeout_s=590)
source benchmarks/gpu_s5_env.sh
stamp "GPU tests: prefill rows, CUDA graphs, capture at start"
timeout 240 python3 -m pytest -q tests/engine/test_prefill_rows.py tests/engine/test_cuda_graphs.py \
    tests/engine/test_graph_capture_at_start.py tests/speculative/test_step_graphs_gpu.py \
    > "$R/gpu_tests.log" 2>&1; echo "exit $?"
grep -E "passed|failed|FAILED|Error" "$R/gpu_tests.log" | tail -n 6 | cut -c1-300
for setting in "0 0" "0 1" "7 0" "7 1"; do
    set -- $setting; stamp "batch_trace N=8 K=$1, 64-token steps, prefill rows $2"
    (cd benchmarks && MXSERVE_PREFILL_ROWS=$2 timeout 60 python3 batch_trace.py --concurrency 8 --k "$1" \
        --capture-at-start --max-num-batched-tokens 64 --prefill-cap 64 --out "$R/trace8_k$1_rows$2.json" \
        > "$R/trace8_k$1_rows$2.log" 2>&1); echo "exit $?"
    grep -v Warning "$R/trace8_k$1_rows$2.log" | tail -n 6 | cut -c1-300
done
for rows in 0 1; do
    stamp "serving sweep, plain, every Triton kernel, budget 64 / cap 64, prefill rows $rows"
    MXSERVE_PREFILL_ROWS=$rows SWEEP_TAG=rows$rows serve_sweep 100 off all-triton --max-num-batched-tokens 64 \
        --prefill-cap 64
done
gpu_s5_pack
