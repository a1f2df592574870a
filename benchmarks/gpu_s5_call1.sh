#!/usr/bin/env bash
# Session 5, first H200 call (<= 9.5 min): the helpers' kernel A/B scripts (linear decode options,
# MoE stream decode, top-k), then this session's attention-side changes: GPU gates of the one-launch
# compressor state write and the reordered sparse-attention chunk, and benchmarks/attention.py timing.
#   run(command="bash benchmarks/gpu_s5_call1.sh", carry=[".tc", ".whl"])
source benchmarks/gpu_s5_env.sh

stamp "A: linear decode options (benchmarks/gpu_s5_linear.sh)"
OUT=$R bash benchmarks/gpu_s5_linear.sh 2>&1 | tail -n 32

stamp "B: MoE stream decode (benchmarks/gpu_s5_moe.sh)"
OUT=$R bash benchmarks/gpu_s5_moe.sh 2>&1 | tail -n 24

stamp "C: top-k (benchmarks/gpu_s5_topk.sh)"
OUT=$R bash benchmarks/gpu_s5_topk.sh 2>&1 | tail -n 24

stamp "D: attention-side GPU gates"
timeout -s INT 100 python3 -m pytest -q -p no:cacheprovider -n 4 tests/kernels/attention_ops/test_state_write.py \
    tests/kernels/attention_ops/test_compressor_chunks.py tests/kernels/sparse_attention \
    tests/kernels/attention_ops/test_gpu_model_attention.py tests/engine/test_cuda_graphs.py > "$R/gates.log" 2>&1
grep -E "^(FAILED|ERROR)|passed|failed" "$R/gates.log" | tail -n 12

stamp "E: sparse attention timing (benchmarks/attention.py)"
timeout -s INT 90 python3 benchmarks/attention.py --skip model --out "$R/attention.json" > "$R/attention.log" 2>&1
echo "exit $?"; grep -E "^parity:|^\| (attention_|topk|layer_sum)|ERRORS|^total" "$R/attention.log" | cut -c1-200 | head -n 30

stamp "done"
gpu_s5_pack
