#!/usr/bin/env bash
# Session 16 call 1 (the session 15 call, never run: no device started): decode branches (MXSERVE_DECODE_BRANCHES=1, model/decode_branches.py): a decode step's
# window KV + compressor, CSA indexer and shared expert on side CUDA lanes beside the main path.
# (A) gates: side lanes (ordering, per-lane split-K counters, capture), the default model's branched eager step
#     == one stream (logits and every cache byte); B and C compare every replayed config's logits too;
# (B) device ms of the replayed decode step, default model b1/b64 (ctx 512), configs interleaved in one process;
# (C) the same for 2 Flash layers (CSA, HCA) + head at b1, ctx 4096.
# Prediction (before the run): bits equal everywhere (same launches on the same inputs). Default model b1
# 0.89 -> 0.72-0.80 ms (its CSA indexer chains and shared experts leave the critical path), b64 1.39 ->
# 1.15-1.30; Flash 2 layers + head b1 ~0.81 -> 0.68-0.74 ms (the indexer chain ~40 us of a CSA layer and
# the shared expert ~20 us of each layer overlap the main path); the hc side stream adds ~5 us a site.
# Session 17 added MXSERVE_HC_FUSED=1 (hc_pre + block norm and hc_head + final norm in 2 launches, not 4;
# default model only: 313 -> 279 launches a step): its gate (tests/model/test_hc_fused_gpu.py) and the
# "hc fused" / "branches + hc fused" configs in B. Prediction: bits equal; default b1 0.89 -> 0.82-0.86 ms
# alone (34 launches at ~1-2 us each once the fused programs' longer chains are paid), b64 1.39 -> 1.34-1.37.
#   run(command="bash benchmarks/gpu_s16_call1.sh", carry=[".whl"])
source benchmarks/gpu_s5_env.sh
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader; python3 -c "import torch, triton; print(torch.__version__, triton.__version__)"
stamp "A: gates"
timeout -s INT 190 python3 -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_side_streams.py \
    tests/model/test_decode_branches_gpu.py tests/model/test_hc_fused_gpu.py tests/bench/test_device_ops.py \
    tests/bench/test_layers_gpu.py > "$R/gates.log" 2>&1
echo "gates exit $?"; grep -E "passed|failed|Error|assert" "$R/gates.log" | tail -n 8 | cut -c1-300
stamp "B: default model, branches A/B"
(cd benchmarks && timeout -s INT 170 python3 branches_ab.py --what default --batches 1,64 --rounds 2 \
    --configs "one stream,branches,branches + hc side,hc fused,branches + hc fused" \
    --out "$R/ab_default.json" > "$R/ab_default.log" 2>&1; echo "exit $?"; grep -E "device ms" "$R/ab_default.log")
if [ -z "${SKIP_FLASH:-}" ]; then  # SKIP_FLASH=1: A and B only (~6.5 min), when little device time is left
stamp "C: Flash 2 layers + head, branches A/B"
(cd benchmarks && timeout -s INT 150 python3 branches_ab.py --what flash --batches 1,8 --rounds 2 \
    --out "$R/ab_flash.json" > "$R/ab_flash.log" 2>&1; echo "exit $?"; grep -E "device ms" "$R/ab_flash.log")
tail -n 3 "$R/ab_flash.log" | cut -c1-300
fi
stamp "call 1 done"
gpu_s5_pack
