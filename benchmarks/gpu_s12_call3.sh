#!/usr/bin/env bash
# Session 12, third H200 call: CUDA graphs captured before traffic (LLMEngine.capture_graphs; `mxserve
# serve` does it at start-up unless --lazy-graph-capture), and where the serving sweep's N = 8 time goes
# with DSpark K = 7 (call 1: 111 tok/s per stream vs 180 plain, ITL p99 291 ms; the server log showed 20
# captures during the run).
# Predictions:
# - the GPU tests pass (the capture now runs on all-padding buffers for plain decode graphs too);
# - batch_trace N = 8, K = 7, lazy: a few "+capture" steps of 100-300 ms each in the timed round and
#   ~1 s of eager prefill/mixed steps; with capture at start: no "+capture" step, aggregate >= 1.3x lazy;
# - serving sweep (capture at start): K = 7 N = 8 per-stream >= 1.0x plain (was 0.62x), ITL p99 < 30 ms;
#   N = 64 unchanged (~0.8x plain: every step is 0-draft decodes on the verify graph);
# - spec_decode with the round-3 draft: acceptance 3.1 / ~3.7 / 4.2 at K = 3 / 5 / 7; decode-only >= 1.8x
#   at K = 5 and 7.
#   run(command="bash benchmarks/gpu_s12_call3.sh", carry=[".tc", ".whl"], timeout_s=590)
source benchmarks/gpu_s5_env.sh
stamp "GPU tests: capture at start, CUDA graphs, speculative step graphs"
timeout 200 python3 -m pytest -q tests/engine/test_graph_capture_at_start.py tests/engine/test_cuda_graphs.py \
    tests/speculative/test_step_graphs_gpu.py > "$R/gpu_tests.log" 2>&1; echo "exit $?"
grep -E "passed|failed|FAILED|Error" "$R/gpu_tests.log" | tail -n 6 | cut -c1-300
cd benchmarks
for setting in "7 lazy" "7 start" "0 start"; do
    set -- $setting; stamp "batch_trace N=8 K=$1 capture $2"
    extra=(); [ "$2" = start ] && extra=(--capture-at-start)
    timeout 90 python3 batch_trace.py --concurrency 8 --k "$1" "${extra[@]}" --out "$R/trace_k$1_$2.json" \
        > "$R/trace_k$1_$2.log" 2>&1; echo "exit $?"; grep -v Warning "$R/trace_k$1_$2.log" | tail -n 9 | cut -c1-400
done
cd ..
for spec in off 7; do
    stamp "serving sweep (graphs captured at start), speculation $spec"; serve_sweep 130 "$spec" linear=triton,moe=triton,attention=triton
done
stamp "spec_decode K = 3, 5, 7 (round-3 draft)"
spec_bench 130 --ks 3 5 7
gpu_s5_pack
