#!/usr/bin/env bash
# Session 7 call 5 (short): model-level evidence for MXSERVE_MOE_MMA_ORDER=1 (opt-in): the default
# model's graphs == eager GPU gate, and issue 11's random Flash-model greedy parity against the
# reference kernels (exact numerics; 4 layers, 4 prompts, 128 tokens: shortened from 256 for time).
# Prediction: the gate passes; 3-4 of 4 prompts equal or a first divergence as a near tie < 0.1 nat
# (session 6 with the old order: 3 equal, 1 near tie at token 177).
#   run(command="bash benchmarks/gpu_s7_call5.sh", carry=[".tc"])
[ -f .tc/head.tgz ] && tar -xzf .tc/head.tgz && echo "src/ and tests/ at HEAD $(cat .tc/head.rev 2>/dev/null)"
source benchmarks/gpu_s5_env.sh
export MXSERVE_MOE_MMA_ORDER=1
stamp "A: graphs == eager, default model, MMA order on"
timeout -s INT 60 python3 -m pytest -q -p no:cacheprovider \
    "tests/engine/test_cuda_graphs.py::test_gpu_default_model_graphs_equal_eager_all_triton" > "$R/gates.log" 2>&1
echo "exit $?"; tail -n 1 "$R/gates.log" | cut -c1-200
stamp "B: Flash 4-layer greedy parity, exact, MMA order on"
timeout -s INT 150 python3 benchmarks/flash_parity.py --layers 4 --prompts 4 --num-new 128 --numerics exact \
    --out "$R/flash_parity_exact_mma.json" > "$R/flash_parity_exact_mma.log" 2>&1
echo "exit $?"; tail -n 6 "$R/flash_parity_exact_mma.log" | cut -c1-300
stamp "call 5 done"
tar -C "$OUT" -czf "$OUT/results.tgz" results && rm -rf "$R"
