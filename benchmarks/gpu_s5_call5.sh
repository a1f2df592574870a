#!/usr/bin/env bash
# Session 5, fifth H200 call (<= 3 min): the W8A8 decode launches (faithful numerics' linear path)
# under the decode options the weight-only A/B chose from (PDL, the 128 x 8-warp tile), bit checks included.
#   run(command="bash benchmarks/gpu_s5_call5.sh", carry=[".tc"])
source benchmarks/gpu_s5_env.sh
stamp "W8A8 decode A/B (benchmarks/w8a8_decode_ab.py)"
timeout -s INT 150 python3 benchmarks/w8a8_decode_ab.py --out "$R/w8a8_ab.json" > "$R/w8a8_ab.log" 2>&1
echo "exit $?"; tail -n 16 "$R/w8a8_ab.log"
tar -C "$OUT" -czf "$OUT/results.tgz" results && rm -rf "$R"
