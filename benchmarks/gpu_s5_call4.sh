#!/usr/bin/env bash
# Session 5, fourth H200 call (<= 5 min): the few-head sparse-attention launch parameters measured
# in place (the default model's attention shape alone, its decode profile, e2e) with the GPU gates
# of the sparse-attention folder and the decode graphs, and exact-numerics greedy parity again.
#   run(command="bash benchmarks/gpu_s5_call4.sh", carry=[".tc", ".whl"])
source benchmarks/gpu_s5_env.sh
ALL=${KERNELS:-linear=triton,moe=triton,attention=triton,hc=triton}

stamp "A: GPU gates (sparse attention folder whole, decode graphs, decode path)"
timeout -s INT 90 python3 -m pytest -q -p no:cacheprovider -n 6 tests/kernels/sparse_attention \
    tests/engine/test_cuda_graphs.py tests/kernels/attention_ops/test_gpu_model_attention.py > "$R/gates.log" 2>&1
grep -E "^(FAILED|ERROR)|passed|failed" "$R/gates.log" | tail -n 8

stamp "B: the default model's attention shape alone (4 heads, top-64), launcher defaults"
timeout -s INT 40 python3 benchmarks/attention_sweep.py --heads 4 --topk 64 --variants default --deadline 25 \
    --out "$R/attn_default_shape.json" > "$R/attn_default_shape.log" 2>&1
grep -E "^b[0-9]" "$R/attn_default_shape.log"

stamp "C: decode-step kernel profile (default model)"
timeout -s INT 60 python3 benchmarks/profile_decode.py --what default --kernels $ALL --top 12 \
    --out "$R/profile.json" > "$R/profile.log" 2>&1
grep -E "^\[|all kernels|_sparse_attention" "$R/profile.log" | cut -c1-160 | head -n 8

stamp "D: default model vs transformers generate"
timeout -s INT 75 python3 benchmarks/e2e_vs_transformers.py --kernels $ALL --out "$R/e2e.json" > "$R/e2e.log" 2>&1
tail -n 3 "$R/e2e.log"

stamp "E: greedy parity (exact and faithful numerics)"
timeout -s INT 45 python3 benchmarks/model_parity.py --prompts 8 --num-new 256 --kernels $ALL --numerics exact \
    --out "$R/parity_exact.json" > "$R/parity_exact.log" 2>&1
echo "exact: $(grep -o '"all_equal".*"every_divergence_a_near_tie": [a-z]*' "$R/parity_exact.log")"
timeout -s INT 45 python3 benchmarks/model_parity.py --prompts 8 --num-new 256 --kernels $ALL --numerics faithful \
    --out "$R/parity_faithful.json" > "$R/parity_faithful.log" 2>&1
echo "faithful: $(grep -o '"all_equal".*"every_divergence_a_near_tie": [a-z]*' "$R/parity_faithful.log")"

stamp "done"
tar -C "$OUT" -czf "$OUT/results.tgz" results && rm -rf "$R"
