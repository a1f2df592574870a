#!/usr/bin/env bash
# Session 13, second H200 call (issue 9). Call 1 found: a read-only kernel streams 32 MB in 9.93 us (80% of copy)
# with 4096 programs of one 8 KB load each; t = 2.38 us + bytes / 4.40 TB/s over sizes >= 16 MB. The decode
# linear runs 512 programs of 8 K blocks each: wq_b 14.6 us, wo_b 17.5 (ncu: 46-57% DRAM throughput, 25%
# theoretical occupancy, 121 registers). ncu put the read kernel with the linear's grid (512 programs x 64 KB)
# at 11.0 us against the linear's 12.5: most of the gap is the grid's shape, not the MMA or the widening.
# Prediction: with the K grouping aimed at 2048-4096 programs, wq_b and wo_b weight-only M = 1 reach <= 11.5 us
# (>= 70% of copy); W8A8 likewise; the small layers move little (their grids are already split).
#   run(command="bash benchmarks/gpu_s13_call2.sh", carry=[".tc", ".whl"], timeout_s=590)
source benchmarks/gpu_s5_env.sh
stamp "the grid A/B at every Flash dense shape, M = 1, 8, 16"
(cd benchmarks && timeout 420 python3 linear_grid_ab.py --out "$R/grid_ab.json" > "$R/grid_ab.log" 2>&1)
echo "exit $?"; grep -v Warning "$R/grid_ab.log" | tail -n 24 | cut -c1-260
stamp "read ceiling: every config at 32 MB"
(cd benchmarks && timeout 120 python3 read_ceiling.py --no-linear --out "$R/read_ceiling.json" > "$R/read_ceiling.log" 2>&1)
echo "exit $?"; grep -A16 "^fit" "$R/read_ceiling.log"
python3 - "$R/read_ceiling.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["reads"]:
    if r["size_MB"] == 32:
        for c in sorted(r["all"], key=lambda c: c["s"])[:8] + [c for c in r["all"] if c["programs"] == 512]:
            print(f"32 MB: {c['s'] * 1e6:6.2f} us  block {c['block']:5d} warps {c['warps']} iters {c['iters']:2d} programs {c['programs']}")
PY
gpu_s5_pack
