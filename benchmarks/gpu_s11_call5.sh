#!/usr/bin/env bash
# Session 11 call 5: where a K = 7 speculative step spends its time with call 3's draft (spec_probe --k=7),
# with and without the draft lookahead. Run right after call 4 (no prediction written: a measurement
# for planning the step-cost work).
#   run(command="bash benchmarks/gpu_s11_call5.sh", carry=[".tc"], timeout_s=230)
source benchmarks/gpu_s5_env.sh
stamp "K=7 profile"
timeout 100 python3 benchmarks/spec_probe.py --profile --busy --k=7 2>&1 | grep -v -i warn | tee "$R/probe_k7.log" \
    | tail -n 18 | cut -c1-300
stamp "K=7 lookahead"
timeout 100 python3 benchmarks/spec_probe.py --profile --busy --k=7 --lookahead 2>&1 | grep -v -i warn \
    | tee "$R/probe_k7_ahead.log" | tail -n 18 | cut -c1-300
gpu_s5_pack
