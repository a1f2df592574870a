#!/usr/bin/env bash
# Session 4, fifth H200 call (<= 8 min): the Triton RMS norm and the faster hc finish kernel
# (GPU gates, then the decode profile, e2e, projection and parity again) and the opt-in fast
# prefill tile of linear_fp8_block (benchmarks/gpu_prefill_fast.sh).
#   run(command="bash benchmarks/gpu_s4_last.sh", carry=[".tc", <the two transformers wheels>])
set -uo pipefail
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=$PWD/.triton_cache TRITON_STORE_BINARY_ONLY=1 PYTHONPATH=$PWD/src
OUT=${OUT:-/tmp/gpu_out}; R=$OUT/results; mkdir -p "$R" "$TRITON_CACHE_DIR"
cat .tc/triton_cache.tgz.* 2>/dev/null | tar -xzf - 2>/dev/null
if [ -f .tc/head.tgz ]; then tar -xzf .tc/head.tgz && echo "tree: HEAD $(cat .tc/head.rev) laid over the copy"; fi
if ! python3 -c "from transformers import DeepseekV4ForCausalLM" 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
        > "$R/pip.log" 2>&1 && export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
ALL=linear=triton,moe=triton,attention=triton,hc=triton
stamp() { echo; echo "=== $1 ($(date -u +%H:%M:%S))"; }

stamp "A: GPU gates"
timeout -s INT 120 python3 -m pytest -q -p no:cacheprovider -n 4 -m gpu tests/kernels/rms_norm tests/kernels/hyper_connection \
    tests/kernels/linear_fp8_block/test_prefill_fast.py tests/engine/test_cuda_graphs.py > "$R/gpu_tests.log" 2>&1
grep -E "^(FAILED|ERROR)|passed|failed|rror" "$R/gpu_tests.log" | tail -n 12

stamp "B: decode-step kernel profile (Flash b1, default model)"
timeout -s INT 100 python3 benchmarks/profile_decode.py --what flash default --kernels $ALL --top 12 \
    --out "$R/profile.json" > "$R/profile.log" 2>&1
grep -E "^\[|all kernels|_hc_|_rms" "$R/profile.log"

stamp "C: default model vs transformers generate"
timeout -s INT 60 python3 benchmarks/e2e_vs_transformers.py --kernels $ALL --out "$R/e2e.json" > "$R/e2e.log" 2>&1
tail -n 3 "$R/e2e.log"

stamp "D: Flash layers (projection)"
timeout -s INT 80 python3 -m mxserve.cli.main bench layers --config flash --layers 2 --kernels "$ALL" \
    --batches 1 --contexts 4096,65536 --prefill-tokens 0 --time-budget 30 --out "$R/layers.json" > "$R/layers.log" 2>&1
grep -E "^(decode|PROJECTION)" "$R/layers.log" | cut -c1-300 | head -n 6

stamp "E: greedy parity (exact numerics)"
timeout -s INT 45 python3 benchmarks/model_parity.py --prompts 8 --num-new 256 --kernels $ALL --numerics exact \
    --out "$R/parity_exact.json" > "$R/parity_exact.log" 2>&1
echo "exact: $(grep -o '"all_equal".*"every_divergence_a_near_tie": [a-z]*' "$R/parity_exact.log")"

stamp "F: linear prefill, fast tile (M = 2048)"
OUT=$R bash benchmarks/gpu_prefill_fast.sh > "$R/prefill_fast.log" 2>&1
tail -n 14 "$R/prefill_fast/log.txt" 2>/dev/null || tail -n 14 "$R/prefill_fast.log"

tar -C "$OUT" -czf "$OUT/results.tgz" results && rm -rf "$R"
ls -la "$OUT"
