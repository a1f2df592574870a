#!/usr/bin/env bash
# Session 4, third H200 call (~6 min): the router rewrite (issue 10) and the single-launch FP8
# linear decode (issue 9), GPU gates first (in parallel: compile-bound), then timing alone.
#   run(command="bash benchmarks/gpu_s4_kernels.sh", carry=[".tc"])
set -uo pipefail
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=$PWD/.triton_cache TRITON_STORE_BINARY_ONLY=1 PYTHONPATH=$PWD/src
OUT=${OUT:-/tmp/gpu_out}; R=$OUT/results; mkdir -p "$R" "$TRITON_CACHE_DIR"
cat .tc/triton_cache.tgz.* 2>/dev/null | tar -xzf - 2>/dev/null
if [ -f .tc/head.tgz ]; then tar -xzf .tc/head.tgz && echo "tree: HEAD $(cat .tc/head.rev) laid over the copy (helpers' uncommitted edits travel too)"; fi
stamp() { echo; echo "=== $1 ($(date -u +%H:%M:%S))"; }

stamp "G: GPU gates (router, MoE, linear_fp8_block incl. fused split-K under graph replay)"
timeout -s INT 170 python3 -m pytest -q -p no:cacheprovider -n 4 -m gpu tests/kernels/moe tests/kernels/linear_fp8_block \
    > "$R/gpu_tests.log" 2>&1 &
P1=$!
timeout -s INT 170 python3 -m pytest -q -p no:cacheprovider tests/kernels/moe/test_router.py > "$R/router_tests.log" 2>&1 &
P2=$!
wait $P1 $P2
grep -E "^(FAILED|ERROR)|passed|failed|rror" "$R/gpu_tests.log" | tail -n 12
grep -E "^(FAILED|ERROR)|passed|failed" "$R/router_tests.log" | tail -n 4

stamp "T1: router + MoE split (graph replay)"
timeout -s INT 70 python3 benchmarks/moe.py --variants bf16-split --tokens 1 4 16 64 256 --skip parity \
    --out "$R/moe_router.json" > "$R/moe_router.log" 2>&1
grep -v '^{' "$R/moe_router.log" | tail -c 2200

stamp "T2: linear decode, fused vs two-launch split-K"
timeout -s INT 170 python3 benchmarks/kernels.py --shapes wo_b wq_b 'wq_a||wkv' head --ms 1 8 16 --split-sum both \
    --check-fused --skip fp8_wo_f32x smm_block --out "$R/linear" > "$R/linear.log" 2>&1
grep -v '^{' "$R/linear.log" | tail -c 5000

tar -C "$OUT" -czf "$OUT/results.tgz" results && rm -rf "$R"
tar -czf - .triton_cache | split -b 15m - "$OUT/triton_cache.tgz."
ls -la "$OUT"
