#!/usr/bin/env bash
# The kernel issues' (9, 10, 11) H200 evidence in one device call (<= 10 min), in two phases:
#   A. correctness, in parallel (Triton compiles are CPU-bound and the machine has 16 cores):
#      the GPU pytest set (-n 6), linear parity + invariance, MoE parity + invariance, attention
#      parity + model parity. This also fills the Triton cache, so phase B compiles (almost) nothing.
#   B. timing, one benchmark at a time (nothing else on the GPU): linear, MoE, attention.
#   run(command="bash benchmarks/gpu_kernels_session.sh", carry=[".triton_cache"], timeout_s=600)
# Returns results.tgz (every log and JSON) and triton_cache.tgz.* (the compiled kernels, binary only:
# unpack into .triton_cache/ here and carry it next call to skip the compiles). Phase limits in
# seconds: LIMIT_A (170), LIMIT_9 (150), LIMIT_MOE (110), LIMIT_ATTN (90).
set -uo pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
export TRITON_CACHE_DIR=$PWD/.triton_cache TRITON_STORE_BINARY_ONLY=1
OUT=${OUT:-/tmp/gpu_out}; R=$OUT/results; mkdir -p "$R" "$TRITON_CACHE_DIR"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.used --format=csv,noheader || true
echo "triton cache entries carried: $(ls "$TRITON_CACHE_DIR" | wc -l)"
stamp() { echo; echo "=== $1 ($(date -u +%H:%M:%S))"; }

stamp "A: correctness in parallel"
LA=${LIMIT_A:-170}
timeout -s INT "$LA" python3 -m pytest -q -p no:cacheprovider -n 6 -m gpu tests/kernels tests/formats \
    tests/engine/test_cuda_graphs.py tests/engine/test_sampler.py > "$R/gpu_tests.log" 2>&1 &
timeout -s INT "$LA" python3 -m pytest -q -p no:cacheprovider tests/engine/test_kernel_overrides.py \
    > "$R/kernel_overrides.log" 2>&1 &
timeout -s INT "$LA" python3 benchmarks/kernels.py --check --no-bench --grouped --out "$R/k9_check" \
    > "$R/k9_check.log" 2>&1 &
timeout -s INT "$LA" python3 benchmarks/moe.py --skip timing --out "$R/moe_check.json" > "$R/moe_check.log" 2>&1 &
timeout -s INT "$LA" python3 benchmarks/attention.py --skip bench --out "$R/attn_check.json" > "$R/attn_check.log" 2>&1 &
wait
for f in gpu_tests kernel_overrides; do echo "--- $f"; tail -n 4 "$R/$f.log"; done
echo "--- k9 check"; grep -E "^parity|^invariance|error" "$R/k9_check.log" | tail -c 1500
echo "--- moe check"; grep -E '"kind": "(parity|invariance)"|rror' "$R/moe_check.log" | tail -c 1500
echo "--- attention check"; grep -E "^parity|^model|ERRORS" -A2 "$R/attn_check.log" | tail -c 2000
echo "triton cache entries now: $(ls "$TRITON_CACHE_DIR" | wc -l)"

stamp "B1: linear timing (issue 9)"
timeout -s INT "${LIMIT_9:-150}" python3 benchmarks/kernels.py --grouped --ms 1 2 4 8 16 64 256 2048 \
    --out "$R/k9" > "$R/k9.log" 2>&1
grep -v '^{' "$R/k9.log" | tail -c 6000

stamp "B2: MoE timing (issue 10)"
timeout -s INT "${LIMIT_MOE:-110}" python3 benchmarks/moe.py --skip parity invariance --deadline 90 \
    --out "$R/moe.json" > "$R/moe.log" 2>&1
grep -v '^{' "$R/moe.log" | tail -c 3000

stamp "B3: attention timing (issue 11)"
timeout -s INT "${LIMIT_ATTN:-90}" python3 benchmarks/attention.py --skip parity model --out "$R/attn.json" \
    > "$R/attn.log" 2>&1
tail -c 3500 "$R/attn.log"

stamp "pack"
tar -C "$OUT" -czf "$OUT/results.tgz" results && rm -rf "$R"
tar -czf - .triton_cache | split -b 15m - "$OUT/triton_cache.tgz."
ls -la "$OUT"
