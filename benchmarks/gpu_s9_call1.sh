#!/usr/bin/env bash
# Session 9 call 1: the graphed speculative step (engine/speculative/step_graphs.py) on the H200.
# Gates first (GPU tests: graphed speculation == plain greedy == the eager step's acceptances; the
# decode graphs == eager after the decode_forward refactor), then benchmarks/spec_decode.py.
# Prediction (written before the run): plain single stream ~600-750 tok/s (session 7: 743 at 128
# tokens); the graphed K=3 step ~3 graph replays + ~0.5 ms host ≈ 2.0-2.5 ms per step at ~1.8
# accepted+1 tokens → ~0.9-1.2x plain; K=7 similar acceptance (1.8), heavier verify → ~0.8-1.0x;
# the eager K=3 step ~0.1x (session 3).
#   run(command="bash benchmarks/gpu_s9_call1.sh", carry=[".tc"])
source benchmarks/gpu_s5_env.sh
stamp "probe"
timeout 120 python3 benchmarks/spec_probe.py 2>&1 | grep -v Warn | tail -n 5 | cut -c1-600
[ "${PIPESTATUS[0]}" = 0 ] || { gpu_s5_pack; exit 1; }
stamp "GPU tests: graphed speculation, decode graphs"
timeout 300 python3 -m pytest -q -x tests/speculative/test_step_graphs_gpu.py \
    "tests/engine/test_cuda_graphs.py::test_gpu_default_model_graphs_equal_eager_all_triton" \
    > "$R/gpu_tests.log" 2>&1; echo "exit $?"; tail -n 15 "$R/gpu_tests.log" | cut -c1-300
stamp "spec_decode benchmark"
timeout 280 python3 benchmarks/spec_decode.py --ks 3 5 7 --eager-ks 3 --prompts 4 --new-tokens 128 --repeats 2 \
    --out "$R/spec.json" > "$R/spec.log" 2>&1; echo "exit $?"; tail -n 12 "$R/spec.log" | cut -c1-300
gpu_s5_pack
