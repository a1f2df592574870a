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
