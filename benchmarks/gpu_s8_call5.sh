#!/usr/bin/env bash
# Session 8 call 5 (final): the shipped defaults (MoE MMA order on everywhere, one-launch small
# linears, shared prefill maps, rank top-k for few rows): graphs == eager and the default model's
# exact-numerics greedy parity (issue 11), then e2e vs transformers and batch_split with device replays.
# Predictions: gates pass; parity 8/8 equal or near ties (session 5: 8/8 equal, old order);
# e2e b1 ~43x, b64 ~26-27x; b64 graph device time ~1.38 ms (call 4's MMA-on row).
#   run(command="bash benchmarks/gpu_s8_call5.sh", carry=[".tc", ".whl"])
source benchmarks/gpu_s5_env.sh
ALL=linear=triton,moe=triton,attention=triton,hc=triton
stamp "A: graphs == eager (default model) | B: default model exact greedy parity 8 x 256"
timeout -s INT 90 python3 -m pytest -q -p no:cacheprovider \
    "tests/engine/test_cuda_graphs.py::test_gpu_default_model_graphs_equal_eager_all_triton" > "$R/gates.log" 2>&1 &
BG=$!
timeout -s INT 100 python3 benchmarks/model_parity.py --prompts 8 --num-new 256 --numerics exact \
    --out "$R/model_parity_exact.json" > "$R/model_parity_exact.log" 2>&1; echo "parity exit $?"
wait $BG; echo "graphs==eager exit $?"; tail -n 1 "$R/gates.log" | cut -c1-200
python3 - "$R/model_parity_exact.json" <<'PY'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
    print("exact parity all_equal", d["all_equal"], "near ties only", d["every_divergence_a_near_tie"],
          [(r["first_divergence"], round(r["ref_gap_nats"], 3)) if not r["tokens_equal"] else "=" for r in d["rows"]])
except Exception as e:
    print("parity unreadable", e)
PY
stamp "C: e2e vs transformers, 3 timed calls"
timeout -s INT 140 python3 benchmarks/e2e_vs_transformers.py --kernels $ALL --step-times --repeats 3 --out "$R/e2e.json" \
    > "$R/e2e.log" 2>&1; echo "exit $?"; tail -n 3 "$R/e2e.log" | cut -c1-200
stamp "D: batch_split with device replays"
(cd benchmarks && timeout -s INT 60 python3 batch_split.py --batches 1,64 --decode-steps 48 --repeats 3 \
    --out "$R/batch_split.json" > "$R/batch_split.log" 2>&1; echo "exit $?"; grep -A3 "^batch" "$R/batch_split.log")
stamp "call 5 done"
gpu_s5_pack
