#!/usr/bin/env bash
# Session 7 call 2: the decode lookahead on the GPU (graphs == eager with it on; batch_split with it
# off and on), the prefill step's wall vs device time, then the moe and attn helpers' A/B scripts.
# Predictions: lookahead decode step b1 2.05 -> ~1.2-1.4 ms, b64 3.7 -> ~2.3-2.6 ms (host work
# overlapped with the device's next step; bounded below by max(host, device)); prefill of one
# 25-token prompt ~65 ms wall with a few ms of device time (host-bound).
#   run(command="bash benchmarks/gpu_s7_call2.sh", carry=[".tc"])
[ -f .tc/head.tgz ] && tar -xzf .tc/head.tgz && echo "src/ and tests/ at HEAD $(cat .tc/head.rev 2>/dev/null)"
source benchmarks/gpu_s5_env.sh
stamp "A: GPU gates: graphs == eager (lookahead on), the lookahead test, sparse attention halves on GPU"
timeout -s INT 110 python3 -m pytest -q -p no:cacheprovider tests/engine/test_decode_lookahead.py \
    "tests/engine/test_cuda_graphs.py::test_gpu_default_model_graphs_equal_eager_all_triton" \
    "tests/engine/test_cuda_graphs.py::test_gpu_decode_step_has_no_host_sync_all_triton" > "$R/gates.log" 2>&1
echo "exit $?"; grep -E "^(FAILED|ERROR)|passed|failed" "$R/gates.log" | tail -n 6 | cut -c1-250
stamp "B: batch_split, lookahead off then on"
for la in 0 1; do
    (cd benchmarks && MXSERVE_DECODE_LOOKAHEAD=$la timeout -s INT 75 python3 batch_split.py --batches 1,64 \
        --decode-steps 48 --repeats 3 --out "$R/batch_split_la$la.json" > "$R/batch_split_la$la.log" 2>&1
     echo "lookahead=$la exit $?"; grep -A3 "^batch" "$R/batch_split_la$la.log")
done
stamp "C: prefill step profile (default model)"
(cd benchmarks && timeout -s INT 70 python3 profile_prefill.py --batches 1,64 --repeats 5 --top 12 \
    --out "$R/profile_prefill.json" > "$R/profile_prefill.log" 2>&1; echo "exit $?")
grep -E "^\[prefill\]" -A14 "$R/profile_prefill.log" | cut -c1-140
grep -E "cumtime|prefill_walls|llm_engine.py.*step|model_runner|deepseek_v4.py.*forward|_layers|attention_forward|moe_forward|chunk_batch|ForwardBatch" \
    "$R/profile_prefill.log" | head -n 30 | cut -c1-160
for h in moe attn; do
    stamp "helper $h"
    timeout -s INT 100 bash "benchmarks/gpu_s7_$h.sh" 2>&1 | tail -n 28 | cut -c1-200
done
stamp "call 2 done"
gpu_s5_pack
