#!/usr/bin/env bash
# Session 13, third H200 call (issue 9). Call 2: more, shorter programs made the linear slower (the fused split-K
# sum and per-program costs), but the read kernel put the linear's access pattern (64 rows x 128 B at the row
# stride) at 51-66% of copy against 77-80% for contiguous runs. So: codes stored in 64 x 128 tiles, a program's
# K group one contiguous run (`tile_fp8_codes`, same arithmetic, same bits).
# Predictions: tiled wq_b / wo_b weight-only M = 1 from 14.4 / 17.4 us to ~11.5 / 12.5 (65-70% of copy); W8A8
# likewise from 13.0 / 14.7; small layers within 10%; every tiled result bit-equal to row-major; the GPU tests
# of the tiled launch pass.
#   run(command="bash benchmarks/gpu_s13_call3.sh", carry=[".tc", ".whl"], timeout_s=590)
source benchmarks/gpu_s5_env.sh
stamp "GPU: tiled codes give the row-major bits"
timeout 200 python3 -m pytest -q tests/kernels/linear_fp8_block/test_tiled_codes.py > "$R/tiled_tests.log" 2>&1
echo "exit $?"; tail -n 2 "$R/tiled_tests.log" | cut -c1-200
stamp "tiled A/B at every Flash dense shape, M = 1, 8, 16"
(cd benchmarks && timeout 400 python3 linear_tiled_ab.py --out "$R/tiled_ab.json" > "$R/tiled_ab.log" 2>&1)
echo "exit $?"; grep -v Warning "$R/tiled_ab.log" | tail -n 23 | cut -c1-300
gpu_s5_pack
