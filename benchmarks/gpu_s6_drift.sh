#!/usr/bin/env bash
# Session 6 call 2: why faithful numerics diverge at the first token on the random Flash model
# (call 1: 3 of 4 prompts at 0.15-0.25 nat; exact numerics passed). `numerics_drift.py` prints each
# layer's stream difference, kernels vs reference, next to a 1-ulp-input control. Prediction: the
# MoE routing of a random model flips on rounding noise, so the control is of the kernels' size in
# both numerics, and no single layer stands out.
#   run(command="bash benchmarks/gpu_s6_drift.sh", carry=[".tc", ".whl"])
source benchmarks/gpu_s5_env.sh
ALL=${KERNELS:-linear=triton,moe=triton,attention=triton,hc=triton}
for numerics in exact faithful; do
    stamp "drift, $numerics numerics"
    timeout -s INT 120 python3 benchmarks/numerics_drift.py --layers 4 --prompts 4 --kernels $ALL \
        --numerics $numerics --out "$R/drift_$numerics.json" 2>&1 | grep -v Warning | tail -n 9
done
stamp "done"
gpu_s5_pack
