# Sourced by the session-5 H200 call scripts: one Triton cache for every step (restored from .tc,
# returned by gpu_s5_pack), transformers >= 5.24 from .whl when the image's is older, raw rows in
# $R, and `stamp` for section headers. Carry [".tc", ".whl"] with the call.
set -uo pipefail
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=$PWD/.triton_cache TRITON_STORE_BINARY_ONLY=1 PYTHONPATH=$PWD/src
OUT=${OUT:-/tmp/gpu_out}; R=$OUT/results; mkdir -p "$R" "$TRITON_CACHE_DIR"
cat .tc/triton_cache.tgz.* 2>/dev/null | tar -xzf - 2>/dev/null && echo "Triton cache restored: $(ls "$TRITON_CACHE_DIR" | wc -l) entries"
if ! python3 -c "from transformers import DeepseekV4ForCausalLM" 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
        > "$R/pip.log" 2>&1 && export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
T0=$(date +%s)
stamp() { echo; echo "=== $1 (+$(( $(date +%s) - T0 )) s)"; }

# Everything back in at most 8 files: the results as one archive, the Triton cache in 15 MB pieces.
gpu_s5_pack() {
    tar -C "$OUT" -czf "$OUT/results.tgz" results && rm -rf "$R"
    tar -czf - .triton_cache | split -b 15m -d -a 1 - "$OUT/triton_cache.tgz."
    ls -la "$OUT"
}

# The speculative step's GPU gates and its interleaved benchmark (the session 9-10 call scripts):
#   spec_gpu_tests SECONDS;  spec_bench SECONDS [spec_decode.py options]
spec_gpu_tests() {
    timeout "$1" python3 -m pytest -q -x tests/speculative/test_step_graphs_gpu.py > "$R/gpu_tests.log" 2>&1
    echo "exit $?"; tail -n 3 "$R/gpu_tests.log" | cut -c1-300
}
spec_bench() {
    local limit=$1; shift
    timeout "$limit" python3 benchmarks/spec_decode.py --prompts 4 --new-tokens 128 --repeats 3 "$@" \
        --out "$R/spec.json" > "$R/spec.log" 2>&1
    echo "exit $?"; tail -n 6 "$R/spec.log" | cut -c1-300
}

# The DSpark draft's self-distillation rounds (session 10-12 call scripts):
#   train_self_draft SECONDS [train_draft.py options]  — continues the packaged draft; 1 when no checkpoint came out
#   ship_self_draft  — puts it into the device's packaged model and returns it as $OUT/shipped_draft.tgz
DRAFT_OUT=/tmp/dspark/default_model_dspark
train_self_draft() {
    local limit=$1; shift
    timeout "$limit" python3 tools/dspark/train_draft.py --model src/mxserve/default_model --out "$DRAFT_OUT" \
        --device cuda --seq-len 256 --batch 16 --anchors 32 --feature-batch 32 --log-every 100 --eval-every-s 40 \
        --init-from-draft --final-prompts 0 "$@" > "$R/train.log" 2>&1
    echo "exit $?"; grep -E "self data:.*held|features:|eval step|loss .* over" "$R/train.log" | cut -c1-200 | tail -n 14
    cp "$DRAFT_OUT-train/summary.json" "$DRAFT_OUT-train/loss.csv" "$R/" 2>/dev/null
    [ -f "$DRAFT_OUT/config.json" ] || { tail -n 20 "$R/train.log"; return 1; }
}
ship_self_draft() {
    python3 tools/dspark/ship_draft.py "$DRAFT_OUT" src/mxserve/default_model 2>&1 | tail -n 1 | cut -c1-200
    tar -C src/mxserve/default_model -czf "$OUT/shipped_draft.tgz" model-dspark-draft.safetensors \
        model.safetensors.index.json config.json mxserve-manifest.json
}

# The serving sweep (bench serve, text prompts, 128 in / 128 out, N = 1, 8, 64; session 11-12 call scripts):
#   serve_sweep SECONDS SPEC [KERNELS [bench serve options...]]  — SPEC: off or K (DSpark drafts); KERNELS:
#   MXSERVE_KERNEL_OVERRIDES for the server (default all-triton; sessions 10-12 before call 5 ran
#   linear=triton,moe=triton,attention=triton); results under serve_${SWEEP_TAG:-SPEC}
serve_sweep() {
    local limit=$1 spec=$2 kernels=${3:-all-triton}; shift $(( $# < 3 ? $# : 3 ))
    local tag=${SWEEP_TAG:-$spec}
    [ -d /tmp/site_serve ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site_serve .whl/serve/*.whl > "$R/pip_serve.log" 2>&1 || { echo "pip failed"; tail -5 "$R/pip_serve.log"; }
    local extra=(); [ "$spec" = off ] || extra=(--server-arg=--speculative-config
        --server-arg="{\"method\": \"dspark\", \"num_speculative_tokens\": $spec}")
    PYTHONPATH=$PYTHONPATH:/tmp/site_serve MXSERVE_KERNEL_OVERRIDES=$kernels timeout -s INT "$limit" \
        python3 -m mxserve.cli.main bench serve --device cuda --concurrency 1,8,64 --requests-per-client 2 \
        --dataset text --prompt-len 128 --output-len 128 --scenario-reps 0 "${extra[@]}" "$@" \
        --out "$R/serve_$tag/serve.json" > "$R/serve_$tag.log" 2>&1; echo "exit $?"
    grep -E "^text" "$R/serve_$tag.log" | cut -c1-200
    grep -E "CUDA graphs: captured .* in|unavailable" "$R/serve_$tag/serve.server.log" | cut -c1-250
}
