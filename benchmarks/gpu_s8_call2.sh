#!/usr/bin/env bash
# Session 8 call 2: the three helpers' scripts (each in its own $OUT subfolder, results only), then the
# default model with the two new opt-in switches together, off vs on in one call:
# MXSERVE_LINEAR_DECODE_MAX_M=64 (linears at 17..64 rows as one launch) and
# MXSERVE_SPARSE_ATTENTION_FEW_HEADS=1 (few-heads attention kernel).
# Predictions: helpers' headers. Together: b64 decode step 1.79 -> ~1.35 ms (linear64 ~-0.18 ms, attn8
# ~-0.19 ms), launches 488 -> ~340; b1 step 1.00 -> ~0.93 ms (attention only).
#   run(command="bash benchmarks/gpu_s8_call2.sh", carry=[".tc"])
[ -f .tc/head.tgz ] && tar -xzf .tc/head.tgz && echo "src/ and tests/ at HEAD $(cat .tc/head.rev 2>/dev/null)"
MAIN_OUT=${OUT:-/tmp/gpu_out}
for h in linear64 attn8 prefillhost; do
    echo; echo "##### helper $h"
    mkdir -p "$MAIN_OUT/$h"
    OUT=$MAIN_OUT/$h timeout -s INT 100 bash benchmarks/gpu_s8_$h.sh 2>&1 | tail -n 30 | cut -c1-220
    rm -f "$MAIN_OUT/$h"/triton_cache.tgz.*
done
OUT=$MAIN_OUT
source benchmarks/gpu_s5_env.sh
ALL=linear=triton,moe=triton,attention=triton,hc=triton
stamp "D: default model, both switches off then on: profile b64, batch_split b1,b64"
for on in 0 1; do
    if [ $on = 1 ]; then export MXSERVE_LINEAR_DECODE_MAX_M=64 MXSERVE_SPARSE_ATTENTION_FEW_HEADS=1
    else unset MXSERVE_LINEAR_DECODE_MAX_M MXSERVE_SPARSE_ATTENTION_FEW_HEADS; fi
    timeout -s INT 60 python3 benchmarks/profile_decode.py --what default --default-batch 64 \
        --new-tokens 192 --kernels $ALL --top 14 --out "$R/profile_b64_on$on.json" > "$R/profile_b64_on$on.log" 2>&1
    echo "switches=$on profile exit $?"; grep -E "^\[default\]" -A16 "$R/profile_b64_on$on.log" | cut -c1-130
    (cd benchmarks && timeout -s INT 60 python3 batch_split.py --batches 1,64 --decode-steps 48 --repeats 3 \
        --out "$R/batch_split_on$on.json" > "$R/batch_split_on$on.log" 2>&1
     echo "switches=$on batch_split exit $?"; grep -A3 "^batch" "$R/batch_split_on$on.log")
done
stamp "call 2 done"
gpu_s5_pack
