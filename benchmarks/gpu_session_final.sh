#!/usr/bin/env bash
# Last H200 call of a session (<= 8 min): the DSpark draft's real acceptance (issue 13), the serving
# sweep without and with speculation (issues 12, 13; chunked-prefill scenario included), and beside
# them the all-Triton CUDA-graph tests (issue 11). Every engine here runs the Triton kernels.
#   run(command="bash benchmarks/gpu_session_final.sh", timeout_s=480, carry=[".tc", ".dsp", ".whl"])
# .dsp/: the default model's draft shard, index, config and manifest (the two target shards are
# copied in from src/mxserve/default_model here: they are byte-identical); .tc/head.tgz: HEAD's code.
set -uo pipefail
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=$PWD/.triton_cache TRITON_STORE_BINARY_ONLY=1
export MXSERVE_KERNEL_OVERRIDES=linear=triton,moe=triton,attention=triton
OUT=${OUT:-/tmp/gpu_out}; R=$OUT/results; mkdir -p "$R" "$TRITON_CACHE_DIR"
if [ -f .tc/head.tgz ]; then tar -xzf .tc/head.tgz && echo "tree: HEAD $(cat .tc/head.rev) laid over the copy"; fi
cat .tc/triton_cache.tgz.* 2>/dev/null | tar -xzf - 2>/dev/null
cp src/mxserve/default_model/model-0000*-of-00002.safetensors .dsp/
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .whl/serve/*.whl > "$R/pip.log" 2>&1 || { echo "pip failed"; tail -5 "$R/pip.log"; }
export PYTHONPATH=$PWD/src:/tmp/site
stamp() { echo; echo "=== $1 ($(date -u +%H:%M:%S))"; }

stamp "graphs tests (background)"
timeout -s INT 300 python3 -m pytest -q -p no:cacheprovider -m gpu tests/engine/test_cuda_graphs.py -k "all_triton or pool" \
    > "$R/graphs_tests.log" 2>&1 &
G=$!

stamp "DSpark acceptance, K = 3, 5, 7 vs off"
timeout -s INT 120 python3 tools/dspark/acceptance.py --model .dsp --ks 3,5,7 --prompts 8 --new-tokens 64 \
    --out "$R/accept.json" > "$R/accept.log" 2>&1
grep -E "^(off|K=)" "$R/accept.log" | cut -c1-400 || tail -5 "$R/accept.log"

stamp "serving sweep, no speculation"
timeout -s INT 140 python3 -m mxserve.cli.main bench serve --model .dsp --device cuda --concurrency 1,8,64 \
    --requests-per-client 1 --dataset text --prompt-len 128 --output-len 64 --scenario-reps 2 \
    --out "$R/serve/serve.json" > "$R/serve.log" 2>&1
tail -n 22 "$R/serve.log"

stamp "serving sweep, DSpark K = 3"
timeout -s INT 110 python3 -m mxserve.cli.main bench serve --model .dsp --device cuda --concurrency 1,8,64 \
    --requests-per-client 1 --dataset text --prompt-len 128 --output-len 64 --scenario-reps 0 \
    --server-arg=--speculative-config --server-arg='{"method": "dspark", "num_speculative_tokens": 3}' \
    --out "$R/serve_spec/serve.json" > "$R/serve_spec.log" 2>&1
tail -n 14 "$R/serve_spec.log"

stamp "graphs tests"
wait $G
grep -E "^(FAILED|ERROR)|passed|failed|^E  " "$R/graphs_tests.log" | cut -c1-300 | tail -n 14
tar -C "$OUT" -czf "$OUT/results.tgz" results && rm -rf "$R"
ls -la "$OUT"
