#!/usr/bin/env bash
# Session 13, last H200 call: the engine's GPU tests after this session's bucket plumbing (decode buckets from
# MXSERVE_DECODE_MAX_ROWS, the decision's buckets, capture up to the step budget) and the small layers' new tile.
# Prediction: all pass (the defaults capture and replay exactly the buckets they did).
#   run(command="bash benchmarks/gpu_s13_call6.sh", carry=[".tc", ".whl"], timeout_s=330)
source benchmarks/gpu_s5_env.sh
stamp "GPU tests: CUDA graphs, capture at start, the speculative step graphs"
timeout 270 python3 -m pytest -q -m gpu tests/engine/test_cuda_graphs.py tests/engine/test_graph_capture_at_start.py \
    tests/speculative/test_step_graphs_gpu.py > "$R/engine_gpu_tests.log" 2>&1; echo "exit $?"
grep -E "passed|failed|FAILED|Error" "$R/engine_gpu_tests.log" | tail -n 8 | cut -c1-300
gpu_s5_pack
