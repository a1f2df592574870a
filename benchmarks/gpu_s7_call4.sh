#!/usr/bin/env bash
# Session 7 call 4: the MoE K-order switch (helper moe2), the top-k rank kernel (helper topk, if its
# script is there), the linear's fused split-K sum at 40-64 rows on the GPU, the 64-request decode
# step with it, and the e2e ratios with 3 timed calls (is call 3's 387 ms b64 prefill steady?).
# Predictions: fused-sum GPU test passes; 64-row decode step 1.69 -> ~1.55 ms (78 launches fewer);
# e2e b64 prefill: if steady at ~390 ms, profile_prefill at max_model_len 512 shows it too.
#   run(command="bash benchmarks/gpu_s7_call4.sh", carry=[".tc", ".whl"])
[ -f .tc/head.tgz ] && tar -xzf .tc/head.tgz && echo "src/ and tests/ at HEAD $(cat .tc/head.rev 2>/dev/null)"
source benchmarks/gpu_s5_env.sh
ALL=linear=triton,moe=triton,attention=triton,hc=triton
stamp "A: linear fused split-K sum at 40/64 rows (GPU)"
timeout -s INT 60 python3 -m pytest -q -p no:cacheprovider tests/kernels/linear_fp8_block/test_fused_split_k.py \
    -m "gpu or not gpu" > "$R/fused_sum.log" 2>&1; echo "exit $?"; tail -n 1 "$R/fused_sum.log" | cut -c1-200
stamp "B: batch_split at 64 requests (lookahead on, fused sum)"
(cd benchmarks && timeout -s INT 60 python3 batch_split.py --batches 64 --decode-steps 48 --repeats 3 \
    --out "$R/batch_split.json" > "$R/batch_split.log" 2>&1; echo "exit $?"; grep -A2 "^batch" "$R/batch_split.log")
stamp "C: prefill profile at max_model_len 512, 64 prompts"
(cd benchmarks && timeout -s INT 50 python3 profile_prefill.py --batches 64 --max-model-len 512 --repeats 3 --top 8 \
    --out "$R/profile_prefill_512.json" > "$R/profile_prefill_512.log" 2>&1; echo "exit $?")
grep -E "^\[prefill\]" -A10 "$R/profile_prefill_512.log" | cut -c1-140
stamp "D: e2e vs transformers, 3 timed calls"
timeout -s INT 140 python3 benchmarks/e2e_vs_transformers.py --kernels $ALL --step-times --repeats 3 --out "$R/e2e.json" \
    > "$R/e2e.log" 2>&1; echo "exit $?"; tail -n 3 "$R/e2e.log" | cut -c1-200
python3 -c "
import json; d = json.load(open('$R/e2e.json'))
for r in d['rows']: print(r['batch'], 'walls', [round(w, 3) for w in r['mxserve_calls_s']], 'prefill', r['mxserve_steps']['prefill_steps_ms'])" 2>&1 | tail -n 3
for h in moe2 topk; do
    if [ -f "benchmarks/gpu_s7_$h.sh" ]; then
        stamp "helper $h"
        timeout -s INT 100 bash "benchmarks/gpu_s7_$h.sh" 2>&1 | tail -n 26 | cut -c1-200
    fi
done
stamp "call 4 done"
gpu_s5_pack
