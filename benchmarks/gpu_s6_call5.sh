#!/usr/bin/env bash
# Session 6 call 5: after the NaN-keeping bf16 rounding, the GPU bit tests that failed in call 4
# (shared SwiGLU over every bf16 gate, NaNs included) and the rounding test on CUDA, the decode glue
# bit checks again, then the MoE prefill confirmation run (its changes after call 3: block tiers,
# the 16-token prep kernel, the exact-numerics row cap).
#   run(command="bash benchmarks/gpu_s6_call5.sh", carry=[".tc", ".whl"])
[ -f .tc/head.tgz ] && tar -xzf .tc/head.tgz && echo "src/ and tests/ at HEAD $(cat .tc/head.rev 2>/dev/null)"
source benchmarks/gpu_s5_env.sh
stamp "A: GPU bit tests"
timeout -s INT 120 python3 -m pytest -q -p no:cacheprovider tests/kernels/moe/test_shared_swiglu.py \
    tests/kernels/attention_ops/test_round_bf16.py tests/model/test_decode_glue_gpu.py -m "gpu or not gpu" \
    > "$R/gates.log" 2>&1
echo "exit $?"; grep -E "^(FAILED|ERROR)|passed|failed" "$R/gates.log" | tail -n 6 | cut -c1-250
stamp "B: MoE prefill confirmation"
bash benchmarks/gpu_s6_moeprefill.sh 2>&1 | grep -v "^Triton cache restored" | tail -n 40
stamp "call 5 done"
gpu_s5_pack
