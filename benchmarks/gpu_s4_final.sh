#!/usr/bin/env bash
# Session 4, last H200 call (<= 9.5 min): GPU gates of the new kernels (split-K sparse attention,
# fused mHC, slot map) and of CUDA-graph decode with them, then timing: attention kernels, the
# decode-step kernel profile, the default model vs transformers generate, the Flash projection,
# and the default model's greedy parity (exact and faithful numerics).
#   run(command="bash benchmarks/gpu_s4_final.sh", carry=[".tc", <the two transformers wheels>])
set -uo pipefail
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=$PWD/.triton_cache TRITON_STORE_BINARY_ONLY=1 PYTHONPATH=$PWD/src
OUT=${OUT:-/tmp/gpu_out}; R=$OUT/results; mkdir -p "$R" "$TRITON_CACHE_DIR"
cat .tc/triton_cache.tgz.* 2>/dev/null | tar -xzf - 2>/dev/null
if [ -f .tc/head.tgz ]; then tar -xzf .tc/head.tgz && echo "tree: HEAD $(cat .tc/head.rev) laid over the copy"; fi
if ! python3 -c "from transformers import DeepseekV4ForCausalLM" 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
        > "$R/pip.log" 2>&1 && export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
ALL=${ALL:-linear=triton,moe=triton,attention=triton,hc=triton}
stamp() { echo; echo "=== $1 ($(date -u +%H:%M:%S))"; }

stamp "A: GPU gates (in parallel)"
timeout -s INT 170 python3 -m pytest -q -p no:cacheprovider -n 4 -m gpu tests/kernels/sparse_attention \
    tests/kernels/attention_ops tests/kernels/hyper_connection tests/engine/test_cuda_graphs.py > "$R/gpu_tests.log" 2>&1 &
P1=$!
timeout -s INT 170 python3 benchmarks/attention.py --skip model bench --out "$R/attn_parity.json" > "$R/attn_parity.log" 2>&1 &
P2=$!
wait $P1 $P2
grep -E "^(FAILED|ERROR)|passed|failed|rror" "$R/gpu_tests.log" | tail -n 12
grep -iE "sparse|error|fail|nan" "$R/attn_parity.log" | head -n 12

stamp "B: attention kernels (graph replay)"
timeout -s INT 60 python3 benchmarks/attention.py --skip parity model --out "$R/attn.json" > "$R/attn.log" 2>&1
grep -E "attention_|layer_sum" "$R/attn.log" | head -n 20

stamp "C: decode-step kernel profile (Flash b1, default model)"
timeout -s INT 110 python3 benchmarks/profile_decode.py --what flash default --kernels $ALL --top 16 \
    --out "$R/profile.json" > "$R/profile.log" 2>&1
grep -E "^\[|all kernels" "$R/profile.log"

stamp "D: default model vs transformers generate"
timeout -s INT 60 python3 benchmarks/e2e_vs_transformers.py --kernels $ALL --out "$R/e2e.json" > "$R/e2e.log" 2>&1
tail -n 3 "$R/e2e.log"

stamp "E: Flash layers (projection)"
timeout -s INT 110 python3 -m mxserve.cli.main bench layers --config flash --layers 2 --kernels "$ALL" \
    --batches 1,8 --contexts 4096,65536 --prefill-tokens 0 --time-budget 50 --out "$R/layers.json" > "$R/layers.log" 2>&1
grep -E "^(decode|prefill|PROJECTION|  held)" "$R/layers.log" | cut -c1-300 | head -n 12

stamp "F: greedy parity vs the reference (exact, then faithful numerics)"
for n in exact faithful; do
    timeout -s INT 45 python3 benchmarks/model_parity.py --prompts 8 --num-new 256 --kernels $ALL --numerics $n \
        --out "$R/parity_$n.json" > "$R/parity_$n.log" 2>&1
    echo "$n: $(grep -o '"all_equal".*"every_divergence_a_near_tie": [a-z]*' "$R/parity_$n.log")"
    grep -E "^[0-9] " "$R/parity_$n.log" | cut -c1-110
done
tar -C "$OUT" -czf "$OUT/results.tgz" results && rm -rf "$R"
tar -czf - .triton_cache | split -b 15m - "$OUT/triton_cache.tgz."
ls -la "$OUT"
