#!/usr/bin/env bash
# Session 4, last H200 call (~3 min): every GPU-marked test of the final tree, in parallel.
#   run(command="bash benchmarks/gpu_s4_gates.sh", carry=[".tc", <the two transformers wheels>])
set -uo pipefail
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=$PWD/.triton_cache TRITON_STORE_BINARY_ONLY=1 PYTHONPATH=$PWD/src
cat .tc/triton_cache.tgz.* 2>/dev/null | tar -xzf - 2>/dev/null
if [ -f .tc/head.tgz ]; then tar -xzf .tc/head.tgz && echo "tree: HEAD $(cat .tc/head.rev) laid over the copy"; fi
if ! python3 -c "from transformers import DeepseekV4ForCausalLM" 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
        > /dev/null 2>&1 && export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
timeout -s INT ${LIMIT:-170} python3 -m pytest -q -p no:cacheprovider -n 8 -m gpu tests 2>&1 | tee "${OUT:-/tmp}/gpu_tests.log" \
    | grep -E "^(FAILED|ERROR)|passed|failed"
