#!/usr/bin/env bash
# Session 10 call 3: the serving sweep (issue 12's `mxserve bench serve`) without and with DSpark
# speculation (issue 13 asks for both), the retrained draft, the graphed speculative step.
# Session 3 (eager speculative step): K = 3 gave 9.9 tok/s at N = 1 vs 102.8 plain; N = 64 never finished.
# Prediction: N = 1 spec ~1.1-1.3x plain (as spec_decode.py's single-stream ratio); N = 8 ~1.0x; N = 64
# below plain (the verify triples the rows of a batch that is no longer bandwidth-bound), but finishes.
#   run(command="bash benchmarks/gpu_s10_call3.sh", carry=[".tc", ".whl"])
source benchmarks/gpu_s5_env.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site_serve \
    .whl/serve/*.whl > "$R/pip_serve.log" 2>&1 || { echo "pip failed"; tail -5 "$R/pip_serve.log"; }
export PYTHONPATH=$PYTHONPATH:/tmp/site_serve MXSERVE_KERNEL_OVERRIDES=linear=triton,moe=triton,attention=triton
K=${K:-3}
stamp "serving sweep, no speculation"
timeout -s INT 150 python3 -m mxserve.cli.main bench serve --device cuda --concurrency 1,8,64 \
    --requests-per-client 2 --dataset text --prompt-len 128 --output-len 128 --scenario-reps 0 \
    --out "$R/serve/serve.json" > "$R/serve.log" 2>&1; echo "exit $?"
tail -n 12 "$R/serve.log" | cut -c1-200
stamp "serving sweep, DSpark K = $K"
timeout -s INT 150 python3 -m mxserve.cli.main bench serve --device cuda --concurrency 1,8,64 \
    --requests-per-client 2 --dataset text --prompt-len 128 --output-len 128 --scenario-reps 0 \
    --server-arg=--speculative-config --server-arg="{\"method\": \"dspark\", \"num_speculative_tokens\": $K}" \
    --out "$R/serve_spec/serve.json" > "$R/serve_spec.log" 2>&1; echo "exit $?"
tail -n 12 "$R/serve_spec.log" | cut -c1-200
gpu_s5_pack
