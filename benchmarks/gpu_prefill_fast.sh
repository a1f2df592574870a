#!/usr/bin/env bash
# Issue 9, the opt-in fast prefill tile of linear_fp8_block: one device call, < 90 s with a cold
# Triton cache (4 kernel compiles + the activation quantizer). Times fast_wo / fast_w8a8 next to
# bf16 cuBLAS and block-scaled _scaled_mm at M = 2048 on the 7 Flash dense shapes (head last),
# with the tile's parity vs the fp64 twin and its rows-independent-of-M check.
#   OUT=DIR bash benchmarks/gpu_prefill_fast.sh
set -u
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=$PWD/.triton_cache PYTHONPATH=$PWD/src
R=${OUT:-bench-out}/prefill_fast
mkdir -p "$R"
timeout -s INT -k 5 80 python3 benchmarks/kernels.py --ms 2048 --prefill-fast \
    --skip fp8_wo fp8_w8a8 smm_row deq_mm --out "$R" > "$R/log.txt" 2>&1
echo "rc=$?"
tail -n 14 "$R/log.txt"
