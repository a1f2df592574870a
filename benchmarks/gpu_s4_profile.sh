#!/usr/bin/env bash
# Session 4, second H200 call (~5 min): where the decode step's device time goes (profile_decode.py,
# Flash 2 layers at batch 1 and 8, the default model at batch 1), and which op moves the default
# model's greedy tokens off the reference (model_parity.py with one op back on the reference each).
#   run(command="bash benchmarks/gpu_s4_profile.sh", carry=[".tc"])   (.tc: the last call's Triton cache)
set -uo pipefail
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=$PWD/.triton_cache TRITON_STORE_BINARY_ONLY=1 PYTHONPATH=$PWD/src
OUT=${OUT:-/tmp/gpu_out}; R=$OUT/results; mkdir -p "$R" "$TRITON_CACHE_DIR"
cat .tc/triton_cache.tgz.* 2>/dev/null | tar -xzf - 2>/dev/null
ALL=linear=triton,moe=triton,attention=triton
stamp() { echo; echo "=== $1 ($(date -u +%H:%M:%S))"; }

stamp "P1: Flash decode b1 + default model"
timeout -s INT 150 python3 benchmarks/profile_decode.py --what flash default --kernels $ALL --batch 1 \
    --out "$R/profile_b1.json" > "$R/profile_b1.log" 2>&1
grep -v "Warning\|warn(" "$R/profile_b1.log" | head -c 9000
stamp "P2: Flash decode b8"
timeout -s INT 80 python3 benchmarks/profile_decode.py --what flash --kernels $ALL --batch 8 --top 15 \
    --out "$R/profile_b8.json" > "$R/profile_b8.log" 2>&1
grep -v "Warning\|warn(" "$R/profile_b8.log" | tail -n 20

stamp "Q: parity bisect (one op on the reference)"
for k in linear=reference,moe=triton,attention=triton linear=triton,moe=reference,attention=triton \
         linear=triton,moe=triton,attention=reference; do
    timeout -s INT 60 python3 benchmarks/model_parity.py --prompts 8 --num-new 256 --kernels $k \
        --out "$R/parity_${k//[=,]/_}.json" > "$R/parity_${k//[=,]/_}.log" 2>&1
    echo "$k: $(grep -o '"all_equal".*"every_divergence_a_near_tie": [a-z]*' "$R/parity_${k//[=,]/_}.log")"
    grep -E "^[0-9] " "$R/parity_${k//[=,]/_}.log" | cut -c1-110
done
tar -C "$OUT" -czf "$OUT/results.tgz" results && rm -rf "$R"
tar -czf - .triton_cache | split -b 15m - "$OUT/triton_cache.tgz."
ls -la "$OUT"
