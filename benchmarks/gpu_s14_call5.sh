#!/usr/bin/env bash
# Session 14 call 5: the engine process with the idle burst window (engine_core.BURST_GAP_S = 2 ms,
# cap 10 ms) against the threaded server; plain, every Triton kernel, the call-4 workload.
# Call 4 (no window): N = 8 TTFT p50 135 ms in the process mode against 68-71 ms threaded (the first
# request's prefill started alone); N = 64 aggregate 9151 / 8365 against 6609 / 5536 tok/s.
# Prediction: N = 8 TTFT p50 back to ~70 ms and aggregate >= the threaded server's; N = 1 TTFT +2 ms;
# N = 64 unchanged (~8.4-9.2k).
#   run(command="bash benchmarks/gpu_s14_call5.sh", carry=[".tc", ".whl"])
source benchmarks/gpu_s5_env.sh
stamp "process (burst window), round 1"
SWEEP_TAG=process_burst_1 serve_sweep 105 off all-triton --server-arg=--engine-process
stamp "thread"
SWEEP_TAG=thread_3 serve_sweep 105 off all-triton
stamp "process (burst window), round 2"
SWEEP_TAG=process_burst_2 serve_sweep 105 off all-triton --server-arg=--engine-process
stamp "call 5 done"
gpu_s5_pack
