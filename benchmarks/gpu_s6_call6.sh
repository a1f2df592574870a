#!/usr/bin/env bash
# Session 6 call 6 (not run: no device time left; for the next session): the batched chunk path
# with the CSA indexer batched too: its GPU bit test against the per-chunk loop, the cache writers'
# NaN tests on CUDA (tests/kernels/attention_ops/test_nan_entries.py), then the 64-prompt prefill step
# (call 4: 135 ms with the indexer per chunk; prediction ~90 ms).
#   run(command="bash benchmarks/gpu_s6_call6.sh", carry=[".tc"])
[ -f .tc/head.tgz ] && tar -xzf .tc/head.tgz && echo "src/ and tests/ at HEAD $(cat .tc/head.rev 2>/dev/null)"
source benchmarks/gpu_s5_env.sh
stamp "A: batched chunks == per-chunk loop (GPU, default model, every Triton kernel)"
timeout -s INT 75 python3 -m pytest -q -p no:cacheprovider tests/model/test_chunk_batch.py \
    tests/kernels/attention_ops/test_nan_entries.py -m "gpu or not gpu" -k "gpu or nan" > "$R/gates.log" 2>&1
echo "exit $?"; grep -E "^(FAILED|ERROR)|passed|failed" "$R/gates.log" | tail -n 4 | cut -c1-250
stamp "B: prefill step vs decode step at 64 requests"
(cd benchmarks && timeout -s INT 70 python3 batch_split.py --batches 64 --decode-steps 32 --repeats 3 \
    --out "$R/batch_split.json" > "$R/batch_split.log" 2>&1; echo "exit $?"; tail -n 2 "$R/batch_split.log")
stamp "call 6 done"
tar -C "$OUT" -czf "$OUT/results.tgz" results && rm -rf "$R"
