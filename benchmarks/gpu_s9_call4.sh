#!/usr/bin/env bash
# Session 9 call 4: the final speculative measurement. Call 3 (device per replay at K=3: draft 0.40,
# verify 1.10, post 0.07 ms) gave 0.92x / 1.07x / 1.05x plain at K = 3 / 5 / 7, but its plain run
# drifted (712 tok/s vs 846 in call 2) and K=3 < K=5 is inside the noise. spec_decode.py now keeps
# every engine alive and interleaves the settings over 5 rounds. Prediction: K=1..7 all within
# 0.9-1.1x of plain (acceptance ~1.5 at K=1, ~1.95 at K>=3; the verify's bucket grows with K).
#   run(command="bash benchmarks/gpu_s9_call4.sh", carry=[".tc"])
source benchmarks/gpu_s5_env.sh
stamp "spec_decode benchmark, interleaved"
timeout 300 python3 benchmarks/spec_decode.py --ks 1 2 3 5 7 --eager-ks --prompts 4 --new-tokens 128 --repeats 5 \
    --out "$R/spec.json" > "$R/spec.log" 2>&1; echo "exit $?"; tail -n 8 "$R/spec.log" | cut -c1-300
gpu_s5_pack
