#!/usr/bin/env bash
# Next session's first H200 call (written in session 10, not run: session 10's device time ran out).
# Two open questions of session 10 (docs/benchmarks.md, session 10):
# 1. Why the draft trainer's data pass generated at ~1.1k tok/s when greedy 64-stream decode runs at ~35k.
#    Prediction: sampled ≈ greedy within 2x at max_model_len 512; if 4096 or sampling is the 30x, the
#    eager-steps column names why.
# 2. Why the draft lookahead gave no speed-up. Prediction (if the GPU is the limit): busy ≥ 85% of the
#    wall with and without the lookahead, ~2.1 ms/step; if the host is, busy ≤ 70% without it.
#   run(command="bash benchmarks/gpu_s11_call1.sh", carry=[".tc"])
source benchmarks/gpu_s5_env.sh
stamp "generation throughput by sampling mode and max_model_len"
timeout 200 python3 benchmarks/gen_probe.py --out "$R/gen.json" 2>&1 | grep -v -i warn | tail -n 8 | cut -c1-300
stamp "speculative step profile, K = 3, no lookahead"
timeout 90 python3 benchmarks/spec_probe.py --profile --busy 2>&1 | grep -v -i warn | tee "$R/probe.log" | tail -n 18 | cut -c1-300
stamp "speculative step profile, K = 3, lookahead"
timeout 90 python3 benchmarks/spec_probe.py --profile --busy --lookahead 2>&1 | grep -v -i warn \
    | tee "$R/probe_ahead.log" | tail -n 18 | cut -c1-300
gpu_s5_pack
