#!/usr/bin/env bash
# Next session's first H200 call (written in session 11, not run: the device budget was spent).
# Session 11 changed, on the CPU only: speculative drafts cut to fit the step graphs' 64-row bucket, plain
# decodes (0 drafts) on the graphed step, prefill chunks eager beside graphed decodes (6291ee3); bench
# serve's warm-up at every level with 16 tokens; spec_decode's decode-only rate; the plain runner's split
# of mixed steps (decodes replayed beside eager prefill chunks, 2nd commit after 6291ee3).
# Predictions:
# - the GPU tests pass, the new large-batch one included (24 requests, K = 7: drafts cut to 1);
# - spec_decode, shipped draft: K = 7 end to end 1.3-1.4x plain (session 11: 1.31-1.39x), decode only
#   1.5-1.8x (the prefill is a fixed eager cost on both sides);
# - serving sweep with K = 7: N = 1 per-stream >= 1.1x plain (ITL p99 no longer hundreds of ms: captured in
#   the warm-up); N = 8 per-stream >= 1.0x plain (was 0.30x); N = 64 finishes, aggregate 0.8-1.0x plain
#   (plain decodes on the verify graph: a decode plus the aux capture and the context commit);
# - plain serving, with mixed steps split: N = 64 aggregate above session 11's 2347.5 tok/s (1.2-2x: those
#   steps ran a 64-row eager decode, ~40 ms, per arrival), N = 1 unchanged (~178 aggregate).
#   run(command="bash benchmarks/gpu_s12_call1.sh", carry=[".tc", ".whl"], timeout_s=590)
source benchmarks/gpu_s5_env.sh
stamp "GPU tests: speculative step graphs (large batch included), CUDA graphs"
timeout 170 python3 -m pytest -q tests/speculative/test_step_graphs_gpu.py tests/engine/test_cuda_graphs.py \
    > "$R/gpu_tests.log" 2>&1; echo "exit $?"; tail -n 4 "$R/gpu_tests.log" | cut -c1-300
stamp "spec_decode: end to end and decode only"
spec_bench 120 --ks 3 7 --no-lookahead-ks 7 --eager-ks
for spec in off 7; do
    stamp "serving sweep, speculation $spec"; serve_sweep 130 "$spec" linear=triton,moe=triton,attention=triton
done
gpu_s5_pack
