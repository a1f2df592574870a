#!/usr/bin/env bash
# Session 5, second H200 call (<= 9.5 min): the whole decode step after this session's changes
# (per-step slot maps, one-launch state write, reordered attention chunk, one host read per step,
# and the kernel winners of call 1): GPU gates, the decode-step kernel profile (Flash 2 layers +
# head, default model), the default model vs transformers generate, the Flash projection, and
# whole-model greedy parity in exact numerics.
#   run(command="bash benchmarks/gpu_s5_call2.sh", carry=[".tc", ".whl"])
source benchmarks/gpu_s5_env.sh
ALL=${KERNELS:-linear=triton,moe=triton,attention=triton,hc=triton}

stamp "A: GPU gates (attention ops, decode graphs, kernels changed this session)"
timeout -s INT 130 python3 -m pytest -q -p no:cacheprovider -n 6 tests/kernels/attention_ops tests/kernels/sparse_attention \
    tests/kernels/topk tests/engine/test_cuda_graphs.py tests/model/test_decode_path.py \
    tests/kernels/linear_fp8_block/test_decode_options.py tests/kernels/moe/test_gpu.py > "$R/gates.log" 2>&1
grep -E "^(FAILED|ERROR)|passed|failed" "$R/gates.log" | tail -n 12

stamp "B: decode-step kernel profile (Flash b1, default model)"
timeout -s INT 100 python3 benchmarks/profile_decode.py --what flash default --kernels $ALL --top 14 \
    --out "$R/profile.json" > "$R/profile.log" 2>&1
grep -E "^\[|all kernels|launches|replay|tok/s" "$R/profile.log" | cut -c1-160 | head -n 40

stamp "C: default model vs transformers generate"
timeout -s INT 75 python3 benchmarks/e2e_vs_transformers.py --kernels $ALL --out "$R/e2e.json" > "$R/e2e.log" 2>&1
tail -n 4 "$R/e2e.log"

stamp "D: Flash layers (projection)"
timeout -s INT 90 python3 -m mxserve.cli.main bench layers --config flash --layers 2 --kernels "$ALL" \
    --batches 1 --contexts 4096,65536 --prefill-tokens 0 --time-budget 30 --out "$R/layers.json" > "$R/layers.log" 2>&1
grep -E "^(decode|PROJECTION)" "$R/layers.log" | cut -c1-300 | head -n 6

stamp "E: greedy parity (exact numerics)"
timeout -s INT 60 python3 benchmarks/model_parity.py --prompts 8 --num-new 256 --kernels $ALL --numerics exact \
    --out "$R/parity_exact.json" > "$R/parity_exact.log" 2>&1
echo "exact: $(grep -o '"all_equal".*"every_divergence_a_near_tie": [a-z]*' "$R/parity_exact.log")"

stamp "F: sparse attention launch parameters (benchmarks/attention_sweep.py)"
timeout -s INT 80 python3 benchmarks/attention_sweep.py --deadline 55 --out "$R/attn_sweep.json" > "$R/attn_sweep.log" 2>&1
echo "exit $?"; grep -E "^b[0-9]" "$R/attn_sweep.log"

stamp "done"
gpu_s5_pack
