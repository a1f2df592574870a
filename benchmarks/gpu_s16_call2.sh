#!/usr/bin/env bash
# Session 16 call 2 (after call 1's gates passed): decode branches on issue 12's projection and issue 11's
# end to end. (A) the Flash projection, branches off then on, same process settings; (B) the default model
# against transformers with branches on (session 14 call 3, branches off: b1 45.2x, b64 26.3x).
# Prediction (before the run): projection 79.6 -> ~90-100 tok/s at 4K (the indexer chain and shared expert
# leave the critical path of each layer); e2e b1 45x -> ~50x, b64 ~27x (the 64-row step is MoE-bound).
#   run(command="bash benchmarks/gpu_s16_call2.sh", carry=[".whl", ".tc"])
source benchmarks/gpu_s5_env.sh
ALL=linear=triton,moe=triton,attention=triton,hc=triton
stamp "0: ncu on the MoE decode at 1 and 64 tokens (issue 10: 47.5 us = ~40% of copy on ~78 MB of hit experts)"
# prediction: gate/up and down at 1 token show DRAM throughput 40-50% with long-scoreboard stalls and <= 25%
# achieved occupancy (few programs a SM hold the bytes in flight); at 64 tokens ~55-60%
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
(cd benchmarks && timeout 90 "$NCU" --clock-control none --profile-from-start off --section SpeedOfLight \
    --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats --section WarpStateStats \
    python3 ncu_moe_probe.py > "$R/ncu_moe.txt" 2>&1); echo "exit $?"
grep -E "^  [_a-zA-Z].*\(|Duration|DRAM Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Grid Size|Block Size|Warp Cycles Per Issued|Stall Long" \
    "$R/ncu_moe.txt" | cut -c1-140 | head -n 70
for b in 0 1; do
    stamp "A: Flash projection, MXSERVE_DECODE_BRANCHES=$b"
    MXSERVE_DECODE_BRANCHES=$b timeout -s INT 130 python3 -m mxserve.cli.main bench layers --config flash --layers 2 \
        --kernels "$ALL" --batches 1 --contexts 4096,65536 --prefill-tokens 0 --time-budget 70 \
        --out "$R/layers_b$b.json" > "$R/layers_b$b.log" 2>&1
    echo "exit $?"; grep -E "^(PROJECTION|  timing)" "$R/layers_b$b.log" | cut -c1-300 | head -n 6
done
stamp "B: e2e vs transformers, branches on, 3 timed calls"
MXSERVE_DECODE_BRANCHES=1 timeout -s INT 140 python3 benchmarks/e2e_vs_transformers.py --kernels $ALL --step-times \
    --repeats 3 --out "$R/e2e.json" > "$R/e2e.log" 2>&1; echo "exit $?"; tail -n 3 "$R/e2e.log" | cut -c1-200
stamp "call 2 done"
gpu_s5_pack
