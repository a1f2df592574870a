#!/usr/bin/env bash
# Session 8, linear64: MXSERVE_LINEAR_DECODE_MAX_M=64 (the FP8 block / bf16 linears at 17..64 rows as
# ONE decode launch: fused split-sum + fused act quant) against the default (16: act_quant + prefill
# GEMM + _sum_groups_kernel). <= 90 s on one H200.
# A: linear64_bench.py — bits on == off at M 17/33/64 (default-model linears + Flash 4096x4096,
#    1536x4096; bf16 out), CUDA-graph time per call on vs off, and the default step's linear sum;
# B: the GPU test (on == off eagerly x10 and under graph replay, counters clean);
# C: the default model at 64 requests, device profile, switch off then on.
# Prediction (before the run): 0 mismatches; default-model linears at M=64 ~0.55-0.7x time per call
#   (one launch instead of 2-3); step device time 1.55 -> ~1.37 ms, launches 488 -> ~345
#   (_sum_groups_kernel 78 -> 0, _act_quant_fp8_kernel 67 -> ~8, _blockdot_kernel 89 -> 89 and
#   ~+10-30 us); tok/s about unchanged (the 64-request step is host-bound, 3.7 ms wall).
#   run(command="bash benchmarks/gpu_s8_linear64.sh", carry=[".tc"])
source benchmarks/gpu_s5_env.sh
ALL=linear=triton,moe=triton,attention=triton,hc=triton
left() { echo $(( 82 - ($(date +%s) - T0) )); }

stamp "A: on vs off per linear (bits, graph time)"
timeout -s INT 38 python3 benchmarks/linear64_bench.py --out "$R/linear64.json" > "$R/linear64.log" 2>&1
echo "exit $?"; grep -E "M=64 |equal=False|calls:|mismatches|Error" "$R/linear64.log" | cut -c1-150

stamp "B: GPU test (eager x10, graph replay)"
timeout -s INT 14 python3 -m pytest -q -p no:cacheprovider tests/kernels/linear_fp8_block/test_decode_max_m.py \
    -m gpu > "$R/gpu_test.log" 2>&1
echo "exit $?"; grep -E "^(FAILED|ERROR)|passed|failed" "$R/gpu_test.log" | tail -n 4 | cut -c1-250

for sw in off on; do
    stamp "C: default model, 64 requests, switch $sw"
    budget=$(left); [ "$sw" = off ] && budget=$(( budget / 2 ))
    [ "$budget" -lt 8 ] && { echo "skipped: ${budget}s left"; continue; }
    if [ "$sw" = on ]; then export MXSERVE_LINEAR_DECODE_MAX_M=64; else unset MXSERVE_LINEAR_DECODE_MAX_M; fi
    timeout -s INT "$budget" python3 benchmarks/profile_decode.py --what default --default-batch 64 \
        --new-tokens 192 --kernels $ALL --top 16 --out "$R/profile_b64_$sw.json" > "$R/profile_b64_$sw.log" 2>&1
    echo "exit $? (budget ${budget}s)"; grep -E "^\[default\]|_blockdot|_sum_groups|_act_quant" "$R/profile_b64_$sw.log" \
        | cut -c1-150
done
unset MXSERVE_LINEAR_DECODE_MAX_M

gpu_s5_pack > /dev/null 2>&1 || true  # results.tgz + the Triton cache back in $OUT (quietly)
stamp "summary"
mkdir -p /tmp/linear64 && tar -xzf "$OUT/results.tgz" -C /tmp/linear64 2>/dev/null
python3 - /tmp/linear64/results <<'EOF'
import json, sys
from pathlib import Path
r = Path(sys.argv[1])
print(f"{'what':<44} {'off':>10} {'on':>10} {'on/off':>7}")
try:
    b = json.loads((r / "linear64.json").read_text())
    for m in (17, 33, 64):
        sel = [x for x in b["rows"] if x["m"] == m and x["count"]]
        off, on = sum(x["count"] * x["off_us"] for x in sel), sum(x["count"] * x["on_us"] for x in sel)
        print(f"{f'default linears/step M={m} (us, graph)':<44} {off:10.1f} {on:10.1f} {on / off:7.2f}")
    for x in b["rows"]:
        if x["name"].startswith("flash"):
            label = f"{x['name']} M={x['m']} (us/call)"
            print(f"{label:<44} {x['off_us']:10.2f} {x['on_us']:10.2f} {x['on_us'] / x['off_us']:7.2f}")
    print(f"{'bit mismatches on vs off':<44} {b['mismatches']:>10} of {len(b['rows'])}")
except Exception as e:  # noqa: BLE001
    print("bench: no result", e)
prof = {}
for sw in ("off", "on"):
    try:
        prof[sw] = json.loads((r / f"profile_b64_{sw}.json").read_text())["default"]
    except Exception:  # noqa: BLE001
        prof[sw] = None
if all(prof.values()):
    def k(p, name):
        return sum(x["launches_per_step"] for x in p["kernels"] if x["kernel"].startswith(name) and x["on_device"])
    for label, f in (("step device ms (b64)", lambda p: p["device_ms"]),
                     ("step device launches", lambda p: p["device_launches"]),
                     ("tok/s (b64, host-bound)", lambda p: p["tok_s"]),
                     ("_sum_groups_kernel launches/step", lambda p: k(p, "_sum_groups")),
                     ("_act_quant_fp8_kernel launches/step", lambda p: k(p, "_act_quant")),
                     ("_blockdot_kernel launches/step", lambda p: k(p, "_blockdot"))):
        a, c = f(prof["off"]), f(prof["on"])
        print(f"{label:<44} {a:10.3f} {c:10.3f} {c / a if a else float('nan'):7.2f}")
else:
    print("profile:", {s: bool(p) for s, p in prof.items()})
EOF
