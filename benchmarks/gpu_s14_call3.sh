#!/usr/bin/env bash
# Session 14 call 3: (A) the MoE MMA-order decode's launch configuration at 64 tokens (issue 10: <= 1 ms;
# call 2: 1.122 ms = 2.37 TB/s on 199 experts' 2.66 GB, 56% of copy), every config the same bits (the K
# order per output element does not depend on the tile rows or the pipeline depth; the parity section
# checks each against "bf16" and token 0 alone == in the batch); (B) the Flash projection (issue 12)
# and (C) the default model end to end against transformers (issue 11) with sessions 13-14's kernels.
# Predictions: (A) deeper pipelines (s6, s8) keep more bytes in flight a program: 64 tokens 1.12 ->
# 1.0-1.05 ms, 1 token unchanged or slower; n128 halves the programs: slower at 1 token. (B) ~75-80
# tok/s (session 8: 74.3 / 81.4; this session's early starts are worth ~2% a step). (C) b1 ~40-45x,
# b64 ~26x (neither the prefill nor the 64-row step moved in call 1).
#   run(command="bash benchmarks/gpu_s14_call3.sh", carry=[".tc"])
source benchmarks/gpu_s5_env.sh
ALL=linear=triton,moe=triton,attention=triton,hc=triton
stamp "A: MoE split-K (MMA order) configs"
timeout -s INT 150 python3 benchmarks/moe.py --variants bf16-stream-splitk --splitk-configs n64s4g1d1r80 \
    n64s6g1d1r80 n64s8g1d1r80 n64s3g1d1r80 n64s6g1d1 n128s4g1d1r80 --tokens 1 16 64 --no-twin --baselines none \
    --skip invariance extras exact --deadline 120 --out "$R/moe_cfg.json" > "$R/moe_cfg.log" 2>&1; echo "exit $?"
python3 - "$R/moe_cfg.log" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if line.startswith('{"kind": "time"'):
        r = json.loads(line)
        cols = {k[7:-3]: round(v, 1) for k, v in r.items() if k.startswith("splitk:") and k.endswith("_us")}
        print(r["tokens"], r["routing"], cols)
    elif line.startswith('{"kind": "parity"'):
        r = json.loads(line)
        bad = [k for k, v in r.items() if k.endswith("_alone_equal") and not v] + [k for k, v in r.items()
               if k.endswith("_vs_bf16") and v > 1e-4]
        if bad:
            print("PARITY", r["tokens"], r["routing"], bad)
PY
stamp "B: Flash projection (device-only marginals)"
timeout -s INT 130 python3 -m mxserve.cli.main bench layers --config flash --layers 2 --kernels "$ALL" \
    --batches 1 --contexts 4096,65536 --prefill-tokens 0 --time-budget 70 --out "$R/layers.json" > "$R/layers.log" 2>&1
echo "exit $?"; grep -E "^(PROJECTION|  timing)" "$R/layers.log" | cut -c1-300 | head -n 6
stamp "C: e2e vs transformers, 3 timed calls"
timeout -s INT 140 python3 benchmarks/e2e_vs_transformers.py --kernels $ALL --step-times --repeats 3 --out "$R/e2e.json" \
    > "$R/e2e.log" 2>&1; echo "exit $?"; tail -n 3 "$R/e2e.log" | cut -c1-200
stamp "call 3 done"
gpu_s5_pack
