#!/usr/bin/env bash
# Session 7 call 3: the hc helper's kernels (gates + A/B), the lookahead A/B again in the other
# order (on first) with the decode-batch row memo, the Flash projection with device-only marginals
# and the new hc kernels, then e2e vs transformers generate (the issue-11 headline ratios).
# Predictions: lookahead b1 ~1.0 ms/step, b64 ~2.3 ms (row memo: -0.1..0.3 ms); projection at 4K and
# 64K within ~10% of each other, ~85-95 tok/s; e2e b1 ~55-65x, b64 ~20x (transformers ~13 / ~1,100 tok/s).
#   run(command="bash benchmarks/gpu_s7_call3.sh", carry=[".tc", ".whl"])
[ -f .tc/head.tgz ] && tar -xzf .tc/head.tgz && echo "src/ and tests/ at HEAD $(cat .tc/head.rev 2>/dev/null)"
source benchmarks/gpu_s5_env.sh
ALL=linear=triton,moe=triton,attention=triton,hc=triton
stamp "helper hc"
timeout -s INT 100 bash benchmarks/gpu_s7_hc.sh 2>&1 | tail -n 24 | cut -c1-200
stamp "B: batch_split, lookahead on then off"
for la in 1 0; do
    (cd benchmarks && MXSERVE_DECODE_LOOKAHEAD=$la timeout -s INT 75 python3 batch_split.py --batches 1,64 \
        --decode-steps 48 --repeats 3 --out "$R/batch_split_la$la.json" > "$R/batch_split_la$la.log" 2>&1
     echo "lookahead=$la exit $?"; grep -A3 "^batch" "$R/batch_split_la$la.log")
done
stamp "C: Flash projection, device-only marginals"
timeout -s INT 120 python3 -m mxserve.cli.main bench layers --config flash --layers 2 --kernels "$ALL" \
    --batches 1 --contexts 4096,65536 --prefill-tokens 0 --time-budget 70 --out "$R/layers.json" > "$R/layers.log" 2>&1
echo "exit $?"; grep -E "^(decode|PROJECTION|  timing)" "$R/layers.log" | cut -c1-400 | head -n 8
stamp "D: e2e vs transformers generate"
timeout -s INT 110 python3 benchmarks/e2e_vs_transformers.py --kernels $ALL --step-times --out "$R/e2e.json" \
    > "$R/e2e.log" 2>&1; echo "exit $?"; tail -n 5 "$R/e2e.log" | cut -c1-200
stamp "call 3 done"
gpu_s5_pack
