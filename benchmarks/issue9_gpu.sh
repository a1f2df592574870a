#!/usr/bin/env bash
# Issue 9 on one H200, in one device call (~4 min incl. Triton compiles; run from the repo root):
#   bash benchmarks/issue9_gpu.sh      ($OUT: where kernels.jsonl, table.md, pytest.txt land)
# 1) the GPU tests of the linear kernels (parity at Flash shapes, batch invariance M = 1, 7, 64, 257),
# 2) parity + invariance at every benchmark shape and the roofline table (M = 1, 8, 16, 2048).
set -o pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-bench-out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
timeout -s INT 110 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/linear_fp8_block \
  tests/kernels/linear_int8 tests/kernels/linear_bf16 tests/kernels/grouped_linear > "$OUT/pytest.txt" 2>&1
tail -c 2500 "$OUT/pytest.txt"
timeout -s INT 170 python3 benchmarks/kernels.py --check --grouped --ms 1 8 16 2048 --out "$OUT" > "$OUT/bench.log" 2>&1
grep -v '^{' "$OUT/bench.log" | tail -c 8000
