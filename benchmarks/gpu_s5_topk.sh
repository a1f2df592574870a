#!/usr/bin/env bash
# Session 5, the radix-select top-k on the H200 (issue 11): parity with the twin and the legacy
# kernel on the GPU, CUDA-graph capture/replay, then timing vs the legacy kernel and torch.topk,
# then launch-parameter variants while time remains. <= 120 s wall including Triton compiles.
#   OUT=<dir> bash benchmarks/gpu_s5_topk.sh        (run from the repo root; no install needed)
# Raw JSON under $OUT/topk/, logs next to them; the last lines printed are the summary table.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/topk_triton_cache}  # the caller's cache if set
OUT=${OUT:-/tmp/gpu_out}; R=$OUT/topk; mkdir -p "$R" "$TRITON_CACHE_DIR"
END=$((SECONDS + 112))  # leaves ~8 s for the table (imports torch) and the copy-back
left() { local t=$((END - SECONDS - $1)); [ "$t" -gt "$2" ] && t=$2; [ "$t" -lt 1 ] && t=1; echo "$t"; }
stamp() { echo "=== $1 (t=${SECONDS}s)"; }

stamp "1: parity on the GPU (4 shapes in parallel: compile-bound) + CUDA-graph replay tests"
T=$(left 45 60)
for ck in "1024 512" "1024 64" "16384 512" "16384 64"; do
    set -- $ck
    timeout -s INT "$T" python3 benchmarks/topk.py parity --c "$1" --k "$2" --out "$R" > "$R/parity_C$1_k$2.log" 2>&1 &
done
timeout -s INT "$T" python3 -m pytest -q -p no:cacheprovider tests/kernels/topk/test_topk_select_triton.py -k graph \
    > "$R/graph_tests.log" 2>&1 &
wait
grep -hE "Error|error|Traceback" "$R"/parity_*.log | head -n 5
grep -E "passed|failed|error" "$R/graph_tests.log" | tail -n 2

stamp "2: timing (select / legacy / torch.topk, graph replay)"
timeout -s INT "$(left 12 40)" python3 benchmarks/topk.py time --out "$R" > "$R/timing.log" 2>&1
grep -hE "Error|Traceback" "$R/timing.log" | head -n 3

stamp "3: launch variants of the select kernel (partial results kept if cut short)"
timeout -s INT "$(left 4 40)" python3 benchmarks/topk.py sweep --out "$R" > "$R/sweep.log" 2>&1
grep -hE "Error|Traceback" "$R/sweep.log" | head -n 3

stamp "summary"
python3 benchmarks/topk.py table --out "$R"
