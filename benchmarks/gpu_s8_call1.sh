#!/usr/bin/env bash
# Session 8 call 1: the evidence to make MXSERVE_MOE_MMA_ORDER the default, and where the rank top-k
# beats select (row counts, k = 512 Flash and k = 64 default model).
# Predictions: A-C pass / all equal or near ties (as call 5 of session 7 at 128 tokens); D: faithful
# divergence profile on ~ off (first divergences within the same spread, session 5: tokens 1-28);
# E: b1 decode step ~ -5%, b64 ~ -10..15% with MMA on (MoE is ~8-15% of the default model's step,
# MoE op 0.78x at 1 token, 0.69x at 64); F: rank faster than select up to 8 rows at both C, slower
# from 32 rows; at k = 64 the same crossover.
#   run(command="bash benchmarks/gpu_s8_call1.sh", carry=[".tc"])
[ -f .tc/head.tgz ] && tar -xzf .tc/head.tgz && echo "src/ and tests/ at HEAD $(cat .tc/head.rev 2>/dev/null)"
source benchmarks/gpu_s5_env.sh
ALL=linear=triton,moe=triton,attention=triton,hc=triton
stamp "A+B (background, MMA on): MoE GPU tests, graphs == eager | C: Flash parity 256 tokens, MMA on"
(export MXSERVE_MOE_MMA_ORDER=1
 timeout -s INT 110 python3 -m pytest -q -p no:cacheprovider -m gpu tests/kernels/moe > "$R/moe_gpu_tests.log" 2>&1
 echo "moe gpu tests exit $?" >> "$R/ab.status"
 timeout -s INT 80 python3 -m pytest -q -p no:cacheprovider \
    "tests/engine/test_cuda_graphs.py::test_gpu_default_model_graphs_equal_eager_all_triton" > "$R/gates.log" 2>&1
 echo "graphs==eager exit $?" >> "$R/ab.status") &
BG=$!
for num in exact faithful; do
    MXSERVE_MOE_MMA_ORDER=1 timeout -s INT 125 python3 benchmarks/flash_parity.py --layers 4 --prompts 4 --num-new 256 \
        --numerics $num --out "$R/flash_parity_${num}_mma.json" > "$R/flash_parity_${num}_mma.log" 2>&1
    echo "flash parity $num exit $?"; tail -n 4 "$R/flash_parity_${num}_mma.log" | cut -c1-200
done
wait $BG; cat "$R/ab.status"; tail -n 1 "$R/moe_gpu_tests.log" | cut -c1-200; tail -n 1 "$R/gates.log" | cut -c1-200
stamp "D: default model faithful parity (8 x 256), MMA on | off, in parallel"
for mma in 1 0; do
    MXSERVE_MOE_MMA_ORDER=$mma timeout -s INT 110 python3 benchmarks/model_parity.py --prompts 8 --num-new 256 \
        --numerics faithful --out "$R/model_parity_faithful_mma$mma.json" > "$R/model_parity_faithful_mma$mma.log" 2>&1 &
done
wait
for mma in 1 0; do python3 - "$R/model_parity_faithful_mma$mma.json" <<'PY'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
    print(sys.argv[1].rsplit("/", 1)[-1], "all_equal", d["all_equal"], "first divergences",
          [(r["first_divergence"], round(r["ref_gap_nats"], 3)) if not r["tokens_equal"] else "=" for r in d["rows"]])
except Exception as e:
    print(sys.argv[1], "unreadable", e)
PY
done
stamp "E: batch_split b1,b64, MMA on then off"
for mma in 1 0; do
    (cd benchmarks && MXSERVE_MOE_MMA_ORDER=$mma timeout -s INT 60 python3 batch_split.py --batches 1,64 \
        --decode-steps 48 --repeats 3 --out "$R/batch_split_mma$mma.json" > "$R/batch_split_mma$mma.log" 2>&1
     echo "mma=$mma exit $?"; grep -A3 "^batch" "$R/batch_split_mma$mma.log")
done
stamp "F: top-k rank vs select crossover"
timeout -s INT 55 python3 benchmarks/topk.py ab --k 512 --tied-select \
    --cases 1x16384,2x16384,4x16384,8x16384,16x16384,32x16384,4x1024,16x1024,32x1024 --out "$R/topk512" \
    > "$R/topk512.log" 2>&1; echo "exit $?"
timeout -s INT 35 python3 benchmarks/topk.py ab --k 64 --tied-select --cases 1x1024,8x1024,16x1024,64x1024 \
    --out "$R/topk64" > "$R/topk64.log" 2>&1; echo "exit $?"
python3 - "$R" <<'PY'
import json, sys, pathlib
for name in ("topk512", "topk64"):
    p = pathlib.Path(sys.argv[1]) / name / "ab.json"
    rows = json.loads(p.read_text()) if p.exists() else []
    bad = [r for r in rows if r["impl"] == "parity" and not r.get("identical_to_twin")]
    print(name, "parity failures:", len(bad))
    t = {}
    for r in rows:
        if "us_graph10" in r:
            t[(r["rows"], r["C"], r["inputs"], r["impl"])] = r["us_graph10"]
    for (rows_, c, kind) in sorted({k[:3] for k in t}):
        print(f"  {rows_:>3} x {c:>5} {kind:<6} rank {t.get((rows_, c, kind, 'rank'), '-'):>7} "
              f"select {t.get((rows_, c, kind, 'select'), '-'):>7} torch {t.get((rows_, c, kind, 'torch.topk'), '-'):>7}")
PY
stamp "call 1 done"
gpu_s5_pack
