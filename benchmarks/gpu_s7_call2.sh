#!/usr/bin/env bash
# Session 7 call 2: the prefill step's wall vs device time, the Flash projection with device-only
# marginals, then each helper's A/B script that is present (moe, attn, hc, topk).
# Predictions: prefill of one 25-token prompt ~65 ms wall with a few ms of device time (host-bound);
# projection at 4K and 64K within ~10% of each other once the marginals are device replays
# (session 6: 279 us a CSA layer at 4K; call 1 of this session: 338-512 us depending on order).
#   run(command="bash benchmarks/gpu_s7_call2.sh", carry=[".tc"])
[ -f .tc/head.tgz ] && tar -xzf .tc/head.tgz && echo "src/ and tests/ at HEAD $(cat .tc/head.rev 2>/dev/null)"
source benchmarks/gpu_s5_env.sh
ALL=linear=triton,moe=triton,attention=triton,hc=triton
stamp "A: prefill step profile (default model)"
(cd benchmarks && timeout -s INT 80 python3 profile_prefill.py --batches 1,64 --repeats 5 --top 14 \
    --out "$R/profile_prefill.json" > "$R/profile_prefill.log" 2>&1; echo "exit $?")
grep -E "^\[prefill\]" -A17 "$R/profile_prefill.log" | cut -c1-140
stamp "B: Flash projection, device-only marginals"
timeout -s INT 120 python3 -m mxserve.cli.main bench layers --config flash --layers 2 --kernels "$ALL" \
    --batches 1 --contexts 4096,65536 --prefill-tokens 0 --time-budget 70 --out "$R/layers.json" > "$R/layers.log" 2>&1
echo "exit $?"; grep -E "^(PROJECTION|  timing)" "$R/layers.log" | cut -c1-330 | head -n 6
for h in moe attn hc topk; do
    if [ -f "benchmarks/gpu_s7_$h.sh" ]; then
        stamp "helper $h"
        timeout -s INT 100 bash "benchmarks/gpu_s7_$h.sh" 2>&1 | tail -n 30 | cut -c1-200
    fi
done
stamp "call 2 done"
gpu_s5_pack
