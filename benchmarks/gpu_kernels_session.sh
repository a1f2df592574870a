#!/usr/bin/env bash
# The kernel issues' H200 evidence in one device call (<= 10 min), most important first; each
# section has its own time limit, so one that hangs compiling cannot starve the next.
#   run(command="bash benchmarks/gpu_kernels_session.sh", timeout_s=600)
# Returns (<= 8 files): k9.tgz (issue 9: pytest, kernels.jsonl, bench.log), moe.json + moe.log
# (issue 10), attn.json + attn.log (issue 11), gpu_tests.log (graphs, forced-Triton engine, MoE GPU
# parity). Limits in seconds: LIMIT_9 (default 250), LIMIT_MOE (150), LIMIT_ATTN (150), LIMIT_TESTS (40).
set -uo pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu_out}; mkdir -p "$OUT/k9"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.used --format=csv,noheader || true

section() { echo; echo "=== $1 ($(date -u +%H:%M:%S))"; }

section "issue 9: linear kernels (parity, invariance, roofline)"
timeout -s INT "${LIMIT_9:-250}" env OUT="$OUT/k9" bash benchmarks/issue9_gpu.sh > "$OUT/k9/run.log" 2>&1
tail -c 3000 "$OUT/k9/run.log"
tar -C "$OUT" -czf "$OUT/k9.tgz" k9 && rm -rf "$OUT/k9"

section "issue 10: MoE"
timeout -s INT "${LIMIT_MOE:-150}" python3 benchmarks/moe.py --out "$OUT/moe.json" > "$OUT/moe.log" 2>&1
tail -c 3000 "$OUT/moe.log"

section "issue 11: sparse MLA attention"
timeout -s INT "${LIMIT_ATTN:-150}" python3 benchmarks/attention.py --out "$OUT/attn.json" > "$OUT/attn.log" 2>&1
tail -c 3000 "$OUT/attn.log"

section "GPU tests: CUDA graphs, forced-Triton engine, MoE parity"
timeout -s INT "${LIMIT_TESTS:-40}" python3 -m pytest -q -p no:cacheprovider tests/engine/test_cuda_graphs.py \
    tests/engine/test_kernel_overrides.py tests/kernels/moe/test_gpu.py > "$OUT/gpu_tests.log" 2>&1
tail -c 1500 "$OUT/gpu_tests.log"
ls -la "$OUT"
