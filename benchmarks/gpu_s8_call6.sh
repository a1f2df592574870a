#!/usr/bin/env bash
# Session 8 call 6 (short): call 5's e2e b64 ratio (16.1x; decode step median 2.86 ms, min 1.51) was
# far below call 3's (26.0x) on another host. Two e2e runs in one call, the shipped MoE MMA order on,
# then off, on the Triton cache call 5 left. Prediction: both ~22-27x at b64, on >= off.
#   run(command="bash benchmarks/gpu_s8_call6.sh", carry=[".tc", ".whl"])
source benchmarks/gpu_s5_env.sh
ALL=linear=triton,moe=triton,attention=triton,hc=triton
for mma in 1 0; do
    stamp "e2e vs transformers, MXSERVE_MOE_MMA_ORDER=$mma"
    MXSERVE_MOE_MMA_ORDER=$mma timeout -s INT 110 python3 benchmarks/e2e_vs_transformers.py --kernels $ALL --step-times \
        --repeats 3 --out "$R/e2e_mma$mma.json" > "$R/e2e_mma$mma.log" 2>&1; echo "exit $?"
    tail -n 3 "$R/e2e_mma$mma.log" | cut -c1-200
done
tar -C "$OUT" -czf "$OUT/results.tgz" results && rm -rf "$R"
