#!/usr/bin/env bash
# Session 14 call 4: the serving sweep with the engine loop in its own process (`mxserve serve
# --engine-process`, opt-in) against the threaded server, interleaved twice; plain decoding, every
# Triton kernel, 128-token text prompts, 128 tokens out, N = 1, 8, 64. Then, time permitting, the
# process mode with prefill rows on (buckets to 256: session 13's best serving setting).
# On the 2-core CPU box the split was not faster (no free core for the second process: N = 64 18.4k vs
# 19.2k tok/s with a stubbed forward). This host has 16 cores.
# Prediction: N = 64 aggregate 7.4k (thread, session 12-13) -> 10-14k (process: the engine loop no
# longer waits for the HTTP thread's GIL); N = 8 +5-20%; N = 1 per stream 0-8% slower (a pipe hop a
# token: ~0.1 ms on the CPU box).
#   run(command="bash benchmarks/gpu_s14_call4.sh", carry=[".tc", ".whl"])
source benchmarks/gpu_s5_env.sh
for round in 1 2; do
    stamp "thread, round $round"
    SWEEP_TAG=thread_$round serve_sweep 105 off all-triton
    stamp "process, round $round"
    SWEEP_TAG=process_$round serve_sweep 105 off all-triton --server-arg=--engine-process
done
if [ $(( $(date +%s) - T0 )) -lt 420 ]; then
    stamp "process + prefill rows (buckets to 256)"
    MXSERVE_PREFILL_ROWS=1 MXSERVE_DECODE_MAX_ROWS=256 SWEEP_TAG=process_rows serve_sweep 105 off all-triton \
        --server-arg=--engine-process
fi
stamp "call 4 done"
gpu_s5_pack
