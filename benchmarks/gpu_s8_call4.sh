#!/usr/bin/env bash
# Session 8 call 4: device-only A/Bs of the default model's decode graph (batch_split's new
# graph_device_ms: 5 rounds of 20 back-to-back replays, CUDA events), because the step walls of
# batch_split moved 1.47-2.19 ms between processes of one config (call 3). Configs, interleaved x2:
# base (this session's defaults) | MXSERVE_HC_OLD_KERNELS=1 (session-6 hc/rms-norm launches, no PDL)
# | MXSERVE_MOE_MMA_ORDER=1 (call 1 kept it off for 256-wide experts on a wall measurement)
# | MXSERVE_LINEAR_DECODE_MAX_M=16 (the linears' one-launch rule off).
# Predictions (b64 device ms): base ~1.45; hc old -0.05..+0.05; MMA on +0.1..0.3 (call 1's walls
# said +0.47); linear 16: +0.15..0.2 (call 2's kernel sums: 1.78 vs 1.59). b1: all within 0.03 of base.
#   run(command="bash benchmarks/gpu_s8_call4.sh", carry=[".tc"])
source benchmarks/gpu_s5_env.sh
for round in 1 2; do
    for cfg in base MXSERVE_HC_OLD_KERNELS=1 MXSERVE_MOE_MMA_ORDER=1 MXSERVE_LINEAR_DECODE_MAX_M=16; do
        name=${cfg%%=*}; [ "$cfg" = base ] && env_set="" || env_set=$cfg
        (cd benchmarks && env $env_set timeout -s INT 50 python3 batch_split.py --batches 1,64 --decode-steps 16 \
            --repeats 1 --out "$R/ab_${name}_$round.json" > "$R/ab_${name}_$round.log" 2>&1
         echo "$cfg round $round exit $?")
    done
done
python3 - "$R" <<'PY'
import json, sys, pathlib, statistics
r = pathlib.Path(sys.argv[1])
print(f"{'config':<32} {'b1 device ms':>22} {'b64 device ms':>22}")
for name in ("base", "MXSERVE_HC_OLD_KERNELS", "MXSERVE_MOE_MMA_ORDER", "MXSERVE_LINEAR_DECODE_MAX_M"):
    vals = {1: [], 64: []}
    for p in sorted(r.glob(f"ab_{name}_*.json")):
        for row in json.loads(p.read_text())["rows"]:
            if row.get("graph_device_ms") is not None:
                vals[row["batch"]].append(row["graph_device_ms"])
    cells = [" / ".join(f"{v:.3f}" for v in vals[b]) or "-" for b in (1, 64)]
    print(f"{name:<32} {cells[0]:>22} {cells[1]:>22}")
PY
gpu_s5_pack
