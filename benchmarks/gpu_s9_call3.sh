#!/usr/bin/env bash
# Session 9 call 3: call 2 measured the graphed K=3 step at 0.79x plain (667 vs 846 tok/s; device per
# replay: draft 0.39, verify 1.38, post 0.36 ms). The rollback's torch byte moves (~270 launches,
# snapshot in the verify graph, restore in the post graph) are now Triton copies, one launch per
# cache and direction (`SlotRows`, kernels/cache/_slot_rows_kernel.py). Prediction: verify ~1.15,
# post ~0.2 ms → ~1.75 ms device, ~2.0 ms per step → ~0.95-1.0x plain at K=3.
#   run(command="bash benchmarks/gpu_s9_call3.sh", carry=[".tc"])
source benchmarks/gpu_s5_env.sh
stamp "probe + profile"
timeout 150 python3 benchmarks/spec_probe.py --profile 2>&1 | grep -v -i warn | tail -n 16 | cut -c1-400
[ "${PIPESTATUS[0]}" = 0 ] || { gpu_s5_pack; exit 1; }
stamp "GPU tests: graphed speculation"
timeout 200 python3 -m pytest -q -x tests/speculative/test_step_graphs_gpu.py tests/kernels/cache/test_slot_rows.py > "$R/gpu_tests.log" 2>&1
echo "exit $?"; tail -n 3 "$R/gpu_tests.log" | cut -c1-300
stamp "spec_decode benchmark"
timeout 200 python3 benchmarks/spec_decode.py --ks 3 5 7 --eager-ks --prompts 4 --new-tokens 128 --repeats 2 \
    --out "$R/spec.json" > "$R/spec.log" 2>&1; echo "exit $?"; tail -n 6 "$R/spec.log" | cut -c1-300
gpu_s5_pack
