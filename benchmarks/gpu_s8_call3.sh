#!/usr/bin/env bash
# Session 8 call 3: (A) is session 7's hc/rms-norm change (L1 prefetch + programmatic dependent launch,
# measured at 1 row) slower at 64 rows? The profile's kernel sums went 44 -> 193 us (rms_norm) and
# 105 -> 176 us (hc_finish) a 64-row step between s7 call 1 and s8 call 2 — but a PDL kernel's span
# includes its wait, so only the step wall can tell. batch_split b64, MXSERVE_HC_OLD_KERNELS 0/1/0/1.
# (B) graphs == eager with this session's defaults; (C) e2e vs transformers, 3 timed calls;
# (D) the Flash projection with the MoE MMA order and the rank top-k now on by rule.
# Predictions: (A) old kernels 0.05-0.15 ms faster at 64 rows if the PDL waits cost SM slots, else
# equal; (B) passes; (C) b1 ~38x (unchanged: b1 paths barely changed), b64 15.5x -> ~19x (64-row step
# ~1.6 ms with the one-launch linears, prefill 45 -> ~35 ms); (D) 71 -> ~75 tok/s at 4K (MoE -14 us
# a layer, top-k -5 us a CSA layer).
#   run(command="bash benchmarks/gpu_s8_call3.sh", carry=[".tc", ".whl"])
[ -f .tc/head.tgz ] && tar -xzf .tc/head.tgz && echo "src/ and tests/ at HEAD $(cat .tc/head.rev 2>/dev/null)"
source benchmarks/gpu_s5_env.sh
ALL=linear=triton,moe=triton,attention=triton,hc=triton
stamp "B (background): graphs == eager, default model"
timeout -s INT 90 python3 -m pytest -q -p no:cacheprovider \
    "tests/engine/test_cuda_graphs.py::test_gpu_default_model_graphs_equal_eager_all_triton" > "$R/gates.log" 2>&1 &
BG=$!
stamp "A: batch_split b1,b64, hc old kernels 0/1/0/1"
wait $BG; echo "graphs==eager exit $?"; tail -n 1 "$R/gates.log" | cut -c1-200
i=0
for old in 0 1 0 1; do
    i=$((i + 1))
    (cd benchmarks && MXSERVE_HC_OLD_KERNELS=$old timeout -s INT 45 python3 batch_split.py --batches 1,64 \
        --decode-steps 48 --repeats 3 --out "$R/batch_split_hcold${old}_$i.json" > "$R/batch_split_hcold${old}_$i.log" 2>&1
     echo "hc_old=$old run $i exit $?"; grep -A3 "^batch" "$R/batch_split_hcold${old}_$i.log" | tail -n 2)
done
stamp "C: e2e vs transformers, 3 timed calls"
timeout -s INT 140 python3 benchmarks/e2e_vs_transformers.py --kernels $ALL --step-times --repeats 3 --out "$R/e2e.json" \
    > "$R/e2e.log" 2>&1; echo "exit $?"; tail -n 3 "$R/e2e.log" | cut -c1-200
python3 -c "
import json; d = json.load(open('$R/e2e.json'))
for r in d['rows']: print(r['batch'], 'walls', [round(w, 3) for w in r['mxserve_calls_s']], 'prefill', r['mxserve_steps']['prefill_steps_ms'])" 2>&1 | tail -n 3
stamp "D: Flash projection (device-only marginals)"
timeout -s INT 130 python3 -m mxserve.cli.main bench layers --config flash --layers 2 --kernels "$ALL" \
    --batches 1 --contexts 4096,65536 --prefill-tokens 0 --time-budget 70 --out "$R/layers.json" > "$R/layers.log" 2>&1
echo "exit $?"; grep -E "^(PROJECTION|  timing)" "$R/layers.log" | cut -c1-300 | head -n 6
stamp "call 3 done"
gpu_s5_pack
