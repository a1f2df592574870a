#!/usr/bin/env bash
# Session 6 call 4: the gates and the headline numbers after every change of the session.
# A: GPU bit checks (decode glue fusions incl. the shared SwiGLU and RoPE rounding, batched chunk
#    attention vs the per-chunk loop, MoE prefill tile, CUDA-graph gates);
# B: the default model's prefill step vs decode step at 1 and 64 requests (call 3: 64-prompt
#    prefill 1334 ms, decode step 2.83 ms; prediction with the batched chunks: prefill ~150 ms
#    (100-300), decode step ~2.3 ms);
# C: e2e vs transformers generate at 1 and 64 (prediction b64: ~12-20k tok/s, ~15-20x);
# D: the Flash projection (session 5: 65.6 tok/s; prediction ~80-90);
# E: the decode profile with the glue A/B.
#   run(command="bash benchmarks/gpu_s6_call4.sh", carry=[".tc", ".whl"])
[ -f .tc/head.tgz ] && tar -xzf .tc/head.tgz && echo "src/ and tests/ at HEAD $(cat .tc/head.rev 2>/dev/null)"
source benchmarks/gpu_s5_env.sh
ALL=${KERNELS:-linear=triton,moe=triton,attention=triton,hc=triton}

stamp "A: GPU bit checks"
timeout -s INT 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/model/test_decode_glue_gpu.py \
    tests/kernels/moe/test_shared_swiglu.py tests/model/test_chunk_batch.py \
    "tests/engine/test_cuda_graphs.py::test_gpu_decode_step_has_no_host_sync_all_triton" \
    "tests/engine/test_cuda_graphs.py::test_gpu_default_model_graphs_equal_eager_all_triton[5-8]" \
    tests/kernels/moe/test_gpu.py -k "not (parity_and_invariance and not 300)" > "$R/gates.log" 2>&1
echo "exit $?"; grep -E "^(FAILED|ERROR)|passed|failed" "$R/gates.log" | tail -n 8 | cut -c1-250
timeout -s INT 25 python3 -m pytest -q -p no:cacheprovider tests/kernels/attention_ops/test_fused_writers.py -k rope \
    > "$R/rope.log" 2>&1; echo "rope exit $?: $(tail -n 1 "$R/rope.log" | cut -c1-200)"

stamp "B: prefill step vs decode step (default model)"
(cd benchmarks && timeout -s INT 90 python3 batch_split.py --batches 1,64 --decode-steps 64 --repeats 2 \
    --out "$R/batch_split.json" > "$R/batch_split.log" 2>&1; echo "exit $?"; tail -n 3 "$R/batch_split.log")

stamp "C: e2e vs transformers generate"
timeout -s INT 100 python3 benchmarks/e2e_vs_transformers.py --kernels $ALL --step-times --out "$R/e2e.json" \
    > "$R/e2e.log" 2>&1; echo "exit $?"; tail -n 4 "$R/e2e.log" | cut -c1-200

stamp "D: Flash projection (bench layers, marginal)"
timeout -s INT 110 python3 -m mxserve.cli.main bench layers --config flash --layers 2 --kernels "$ALL" \
    --batches 1 --contexts 4096,65536 --prefill-tokens 0 --time-budget 60 --out "$R/layers.json" > "$R/layers.log" 2>&1
echo "exit $?"; grep -E "^(decode|PROJECTION|  timing)" "$R/layers.log" | cut -c1-330 | head -n 8

stamp "E: decode profile with the glue A/B"
timeout -s INT 75 python3 benchmarks/profile_decode.py --what flash default --ab-glue --kernels $ALL --top 10 \
    --steps 5 --out "$R/profile.json" > "$R/profile.log" 2>&1
echo "exit $?"; grep -E "^\[" "$R/profile.log" | cut -c1-220 | head -n 6
stamp "call 4 done"
gpu_s5_pack
