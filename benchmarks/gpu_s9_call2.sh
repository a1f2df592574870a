#!/usr/bin/env bash
# Session 9 call 2: the graphed speculative step after call 1's profile (draft 1.41, verify 1.96,
# post 2.80 ms of device time per replay at K=3: 0.32x plain). Changes: the draft's q/kv/out and
# context writes through the target's fused ops (q_norm_rope, kv_insert, rope); the rollback's
# address math once per pool (`SlotRows`). Prediction: draft ~1.0, verify ~1.4, post ~0.6 ms →
# ~3 ms per step at 1.94 tokens → ~650 tok/s ≈ 0.8x plain (acceptance unchanged within noise).
#   run(command="bash benchmarks/gpu_s9_call2.sh", carry=[".tc"])
source benchmarks/gpu_s5_env.sh
stamp "probe + profile"
timeout 150 python3 benchmarks/spec_probe.py --profile 2>&1 | grep -v -i warn | tail -n 16 | cut -c1-400
[ "${PIPESTATUS[0]}" = 0 ] || { gpu_s5_pack; exit 1; }
stamp "GPU tests: graphed speculation"
timeout 200 python3 -m pytest -q -x tests/speculative/test_step_graphs_gpu.py > "$R/gpu_tests.log" 2>&1
echo "exit $?"; tail -n 3 "$R/gpu_tests.log" | cut -c1-300
stamp "spec_decode benchmark"
timeout 200 python3 benchmarks/spec_decode.py --ks 3 5 7 --eager-ks --prompts 4 --new-tokens 128 --repeats 2 \
    --out "$R/spec.json" > "$R/spec.log" 2>&1; echo "exit $?"; tail -n 6 "$R/spec.log" | cut -c1-300
gpu_s5_pack
