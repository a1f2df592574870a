#!/usr/bin/env bash
# The first H200 call of the next session (<= 10 min): everything built in session 3 that no GPU has
# run yet, correctness first (in parallel: compile-bound), then timing alone on the GPU.
#   git archive HEAD -- src benchmarks tests tools pyproject.toml ':!src/mxserve/default_model' | gzip > .tc/head.tgz
#   git rev-parse --short HEAD > .tc/head.rev      (and the last call's triton_cache.tgz.* in .tc/)
#   run(command="bash benchmarks/gpu_next_session.sh", timeout_s=600, carry=[".tc",
#       ".whl/transformers-5.24.0-py3-none-any.whl",
#       ".whl/regex-2026.1.15-cp312-cp312-manylinux2014_x86_64.manylinux_2_17_x86_64.manylinux_2_28_x86_64.whl"])
# (name the two wheels, not .whl/: the tree is 37 MB with the draft, .tc ~12 MB, and a call carries
# 64 MiB in all). They are installed only if the image's transformers has no DeepSeek-V4.
# Returns results.tgz and the Triton cache again.
set -uo pipefail
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=$PWD/.triton_cache TRITON_STORE_BINARY_ONLY=1
OUT=${OUT:-/tmp/gpu_out}; R=$OUT/results; mkdir -p "$R" "$TRITON_CACHE_DIR"
if [ -f .tc/head.tgz ]; then tar -xzf .tc/head.tgz && echo "tree: HEAD $(cat .tc/head.rev) laid over the copy"; fi
cat .tc/triton_cache.tgz.* 2>/dev/null | tar -xzf - 2>/dev/null
export PYTHONPATH=$PWD/src
if ! python3 -c "from transformers import DeepseekV4ForCausalLM" 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
        > "$R/pip.log" 2>&1 && export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
ALL=linear=triton,moe=triton,attention=triton
stamp() { echo; echo "=== $1 ($(date -u +%H:%M:%S))"; }

stamp "A: GPU tests + whole-model parity, in parallel"
timeout -s INT 200 python3 -m pytest -q -p no:cacheprovider -n 4 -m gpu tests/kernels/moe tests/kernels/attention_ops \
    tests/engine/test_cuda_graphs.py tests/speculative tests/kernels/act_quant > "$R/gpu_tests.log" 2>&1 &
P1=$!
timeout -s INT 200 python3 benchmarks/model_parity.py --prompts 8 --num-new 256 --out "$R/model_parity.json" \
    > "$R/model_parity.log" 2>&1 &
P2=$!
wait $P1 $P2
grep -E "^(FAILED|ERROR)|passed|failed" "$R/gpu_tests.log" | tail -n 12
tail -n 10 "$R/model_parity.log"

stamp "B1: MoE, fused vs split decode"
timeout -s INT 80 python3 benchmarks/moe.py --variants bf16 bf16-split --tokens 1 4 16 64 256 --skip invariance \
    --out "$R/moe_split.json" > "$R/moe_split.log" 2>&1
grep -v '^{' "$R/moe_split.log" | tail -c 2500

stamp "B2: attention kernels (graph replay)"
timeout -s INT 80 python3 benchmarks/attention.py --skip parity model --out "$R/attn.json" > "$R/attn.log" 2>&1
grep -v '^{' "$R/attn.log" | tail -c 3000

stamp "B4: Flash layers (projection)"
timeout -s INT 140 python3 -m mxserve.cli.main bench layers --config flash --layers 2 --kernels "$ALL" \
    --time-budget 90 --out "$R/layers.json" > "$R/layers.log" 2>&1
tail -n 30 "$R/layers.log"

stamp "B3: default model vs transformers generate"
timeout -s INT 50 python3 benchmarks/e2e_vs_transformers.py --out "$R/e2e.json" > "$R/e2e.log" 2>&1
tail -n 6 "$R/e2e.log"

tar -C "$OUT" -czf "$OUT/results.tgz" results && rm -rf "$R"
tar -czf - .triton_cache | split -b 15m - "$OUT/triton_cache.tgz."
ls -la "$OUT"
