#!/usr/bin/env bash
# Session 14 call 2: issue 10 and 11's kernel targets re-measured with the early starts of call 1, and
# the MoE expert kernels' own early start (stream_splitk.CONFIG "pdl", off by default) A/B.
# (A) the GPU kernel tests of every touched kernel (call 1 stopped at a test bug, fixed since);
# (B) top-k rank vs torch.topk, k = 512, 1-8 rows x 16384 (target >= 10x; session 8: 6.9-7.9x);
# (C) sparse attention per layer, Flash shapes, 4K, b1/b8/b64 (target <= 15 us at b <= 8; session 7:
#     22.1-24.4 us);
# (D) the MoE at 1/4/16/64 tokens: "bf16" (the default: the MMA order at Flash shapes) and the split-K
#     variant with early starts off/on (target 1 token <= 30 us, 64 tokens <= 1 ms; session 8: 47.8 us,
#     1.15 ms).
# Predictions: (B) the bound -> rank pair now overlaps its second launch: 10.0 -> 9.0-9.5 us at one row
# (~8.3-8.8x), still short of 10x; (C) partial -> combine overlap: -0.5..-1 us, still > 15 us; (D) the
# prep -> gate/up -> down chain with early starts: -1..-3 us at 1 token, 1-2% at 64 tokens.
#   run(command="bash benchmarks/gpu_s14_call2.sh", carry=[".tc"])
source benchmarks/gpu_s5_env.sh
stamp "A: kernel gates"
timeout -s INT 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/kernels/sparse_attention tests/kernels/topk \
    tests/kernels/attention_ops tests/kernels/indexer tests/kernels/paged_slots tests/kernels/act_quant \
    tests/kernels/hyper_connection tests/kernels/rms_norm tests/kernels/moe/test_gpu.py > "$R/gates_kernels.log" 2>&1
echo "kernel gates exit $?"; grep -E "^(FAILED|ERROR)" "$R/gates_kernels.log" | head -n 5 | cut -c1-200
tail -n 1 "$R/gates_kernels.log" | cut -c1-200
stamp "B: top-k, k = 512"
timeout -s INT 55 python3 benchmarks/topk.py ab --k 512 --cases 1x16384,2x16384,4x16384,8x16384,4x1024 \
    --out "$R/topk512" > "$R/topk512.log" 2>&1; echo "exit $?"
python3 benchmarks/topk.py ab-table --out "$R/topk512" 2>&1 | tail -n 14 | cut -c1-200
stamp "C: sparse attention, Flash shapes, 4K"
timeout -s INT 60 python3 benchmarks/attention.py --ab pieces --contexts 4096 --batches 1 8 64 --out "$R/attn_ab.json" \
    > "$R/attn_ab.log" 2>&1; echo "exit $?"; sed -n '/^variant |/,/^total/p' "$R/attn_ab.log" | head -n 8 | cut -c1-250
stamp "D: MoE, Flash shapes"
timeout -s INT 170 python3 benchmarks/moe.py --variants bf16 bf16-stream-splitk --splitk-configs n64s4g1d1r80 \
    n64s4g1d1r80pdl --tokens 1 4 16 64 --no-twin --baselines none --skip invariance extras exact --deadline 140 \
    --out "$R/moe.json" > "$R/moe.log" 2>&1; echo "exit $?"
sed -n '/^MoE layer/,/section errors/p' "$R/moe.log" | head -n 16 | cut -c1-250
stamp "call 2 done"
gpu_s5_pack
