#!/usr/bin/env bash
# Session 11 call 2. Call 1 (gpu_s11_call1.sh) found why batch generation from BOS ran at ~1.5k tok/s:
# every step ran eager, because an engine whose first forward is a decode step probed that first call,
# whose one-time lazy work syncs (moe/router.py's cached scalar at 512, moe/experts.py's scale-range read
# at 4096). GraphCapturer now makes one plain call before the probe.
# Predictions: the CUDA-graph and speculative GPU tests pass (the new first-forward test included);
# gen_probe: no eager steps, greedy >= 15k tok/s at 64 requests (call 1: 1.5k), sampled within 1.5x of
# greedy (vocab 4096: the sort is small).
#   run(command="bash benchmarks/gpu_s11_call2.sh", carry=[".tc"])
source benchmarks/gpu_s5_env.sh
stamp "GPU tests: CUDA graphs, speculative step graphs"
timeout 200 python3 -m pytest -q tests/engine/test_cuda_graphs.py tests/speculative/test_step_graphs_gpu.py \
    > "$R/gpu_tests.log" 2>&1; echo "exit $?"; tail -n 4 "$R/gpu_tests.log" | cut -c1-300
stamp "generation throughput by sampling mode and max_model_len"
timeout 150 python3 benchmarks/gen_probe.py --out "$R/gen.json" 2>&1 | grep -v -i warn | tail -n 8 | cut -c1-300
gpu_s5_pack
