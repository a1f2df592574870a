#!/usr/bin/env bash
# Session 5, third H200 call (<= 9.5 min): every GPU-marked test of the tree plus the attention-op,
# sparse-attention and bf16-linear folders whole (their unmarked tests also run on CUDA); then the
# decode profile and e2e again (bf16 linear fused split sum, per-pool decode tables), the Flash
# projection with the marginal-layer method, the default model's attention shape in isolation, and
# the MoE prefill at 4096 tokens (issue 10, not measured since session 3).
#   run(command="bash benchmarks/gpu_s5_call3.sh", carry=[".tc", ".whl"])
source benchmarks/gpu_s5_env.sh
ALL=${KERNELS:-linear=triton,moe=triton,attention=triton,hc=triton}

stamp "A: GPU gates (-m gpu everywhere + three folders whole)"
timeout -s INT 160 python3 -m pytest -q -p no:cacheprovider -n 8 -m "gpu" tests > "$R/gates_gpu.log" 2>&1
grep -E "^(FAILED|ERROR)|passed|failed" "$R/gates_gpu.log" | tail -n 10
timeout -s INT 70 python3 -m pytest -q -p no:cacheprovider -n 8 -m "not gpu" tests/kernels/attention_ops \
    tests/kernels/sparse_attention tests/kernels/linear_bf16 > "$R/gates_cuda.log" 2>&1
grep -E "^(FAILED|ERROR)|passed|failed" "$R/gates_cuda.log" | tail -n 10

stamp "B: decode-step kernel profile (Flash b1, default model)"
timeout -s INT 90 python3 benchmarks/profile_decode.py --what flash default --kernels $ALL --top 14 \
    --out "$R/profile.json" > "$R/profile.log" 2>&1
grep -E "^\[|all kernels" "$R/profile.log" | cut -c1-160 | head -n 8

stamp "C: default model vs transformers generate"
timeout -s INT 75 python3 benchmarks/e2e_vs_transformers.py --kernels $ALL --out "$R/e2e.json" > "$R/e2e.log" 2>&1
tail -n 3 "$R/e2e.log"

stamp "D: Flash layers (projection, marginal layers)"
timeout -s INT 110 python3 -m mxserve.cli.main bench layers --config flash --layers 2 --kernels "$ALL" \
    --batches 1 --contexts 4096,65536 --prefill-tokens 0 --time-budget 60 --out "$R/layers.json" > "$R/layers.log" 2>&1
grep -E "^(decode|PROJECTION|  timing)" "$R/layers.log" | cut -c1-330 | head -n 8

stamp "E: the default model's attention shape alone (4 heads, top-64)"
timeout -s INT 40 python3 benchmarks/attention_sweep.py --heads 4 --topk 64 --variants default --deadline 25 \
    --out "$R/attn_default_shape.json" > "$R/attn_default_shape.log" 2>&1
grep -E "^b[0-9]" "$R/attn_default_shape.log"

stamp "F: MoE prefill, 4096 tokens (issue 10)"
timeout -s INT 75 python3 benchmarks/moe.py --tokens 4096 --variants bf16 --no-twin --baselines grouped \
    --skip invariance --deadline 50 --out "$R/moe_prefill.json" > "$R/moe_prefill.log" 2>&1
echo "exit $?"; tail -n 8 "$R/moe_prefill.log" | cut -c1-220

stamp "done"
gpu_s5_pack
