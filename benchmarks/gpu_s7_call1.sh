#!/usr/bin/env bash
# Session 7 call 1: session 6's CPU-only changes on the GPU, and where the time goes now.
# A: batched CSA indexer == per-chunk loop (GPU bit test) + the cache writers' NaN tests on CUDA;
# B: 64-prompt prefill step vs decode step (session 6 call 4: 135 ms, 3.19 ms; prediction with the
#    batched indexer: ~90 ms prefill);
# C: default model at 64 requests, device profile of a long generate (prefill amortised over 192 steps);
# D: Flash projection with the contexts in the other order (64K first): is session 6's 64K
#    anomaly (412 vs 279 us a CSA layer) an order effect?
#   run(command="bash benchmarks/gpu_s7_call1.sh", carry=[".tc"])
[ -f .tc/head.tgz ] && tar -xzf .tc/head.tgz && echo "src/ and tests/ at HEAD $(cat .tc/head.rev 2>/dev/null)"
source benchmarks/gpu_s5_env.sh
ALL=linear=triton,moe=triton,attention=triton,hc=triton
stamp "A: batched chunks == per-chunk loop (GPU), NaN cache writers on CUDA"
timeout -s INT 100 python3 -m pytest -q -p no:cacheprovider tests/model/test_chunk_batch.py \
    tests/kernels/attention_ops/test_nan_entries.py -m "gpu or not gpu" -k "gpu or nan" > "$R/gates.log" 2>&1
echo "exit $?"; grep -E "^(FAILED|ERROR)|passed|failed" "$R/gates.log" | tail -n 4 | cut -c1-250
stamp "B: prefill step vs decode step at 64 requests"
(cd benchmarks && timeout -s INT 80 python3 batch_split.py --batches 64 --decode-steps 32 --repeats 3 \
    --out "$R/batch_split.json" > "$R/batch_split.log" 2>&1; echo "exit $?"; tail -n 3 "$R/batch_split.log")
stamp "C: default model, 64 requests, device profile"
timeout -s INT 90 python3 benchmarks/profile_decode.py --what default --default-batch 64 --new-tokens 192 \
    --kernels $ALL --top 24 --out "$R/profile_b64.json" > "$R/profile_b64.log" 2>&1
echo "exit $?"; grep -vE "Warning|warn" "$R/profile_b64.log" | head -n 30 | cut -c1-150
stamp "D: Flash projection, 64K first"
timeout -s INT 120 python3 -m mxserve.cli.main bench layers --config flash --layers 2 --kernels "$ALL" \
    --batches 1 --contexts 65536,4096 --prefill-tokens 0 --time-budget 70 --out "$R/layers.json" > "$R/layers.log" 2>&1
echo "exit $?"; grep -E "^(decode|PROJECTION|  timing)" "$R/layers.log" | cut -c1-330 | head -n 8
stamp "call 1 done"
gpu_s5_pack
