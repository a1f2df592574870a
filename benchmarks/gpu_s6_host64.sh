#!/usr/bin/env bash
# Issue 11, 64 requests: the engine's host path per decode step after the host64 changes
# (numpy-filled decode tables, block-manager and runner shortcuts, one tokenizer call per token).
#   run(command="bash benchmarks/gpu_s6_host64.sh", carry=[".tc", ".whl"])     (~120 s)
#
# A (check first): the real default model, every Triton kernel, 64 requests x 16 greedy tokens
#   through the decode graphs (pinned, numpy-filled host buffers) == enforce_eager, token for token.
# B: benchmarks/host_step.py on CUDA: the real engine with a stand-in model whose logits cost one
#   gather, 64 requests: host ms per decode step by component, and the host reads of tensor
#   values per step (each one waits for the GPU; expected: 1).
# C: benchmarks/e2e_vs_transformers.py at batch 64 only, 128 new tokens, with per-step wall
#   times (the prefill step apart from the decode steps) and transformers in the same run.
#
# CPU (benchmarks/host_step.py, CPU time, same loaded 2-core box, before = 33de83c): the 64-row host
# step without the model went 4.0 -> 2.0 ms (5.6 -> 2.6 ms under heavier load), after subtracting
# ~1 ms of logits math that is device work on CUDA; 9 -> 1 host-to-device copies and 1 host read a
# step.
# Session 6 call 3 (benchmarks/batch_split.py) put the 64-row decode step at 2.83 ms end to end
# and the 64-prompt prefill step at 1334 ms: the ~20 ms "per step" of the e2e rate was mostly the
# prefill (since cut by the varlen attention commit a8fe98d, not measured yet).
# Prediction:
#   A: EQUAL.
#   B: host step with the stand-in ~0.7-1.2 ms on the H200's host (this box ~2 ms), 1 host read a step.
#   C: decode step ~2.0-2.5 ms (call 3: 2.83 ms); prefill step 300-1300 ms (the varlen change);
#      mxserve b64 ~5000-12000 tok/s against transformers ~800-1000 tok/s: ~6-14x (target 50x: missed).
source benchmarks/gpu_s5_env.sh
ALL=${KERNELS:-linear=triton,moe=triton,attention=triton,hc=triton}

stamp "A+B: graphs == eager at 64 requests (the check), then the host step with a stand-in model"
timeout -s INT 75 python3 benchmarks/host_step.py --device cuda --batch 64 --new-tokens 64 --count-reads \
    --check --check-tokens 16 --check-kernels $ALL --out "$R/host64_host_step.json" > "$R/host64_host_step.log" 2>&1
echo "exit $?"; grep -vE "^\s*$|RoPE scaling" "$R/host64_host_step.log" | tail -n 16 | cut -c1-200

stamp "C: e2e at 64 requests, 128 new tokens, per-step times"
timeout -s INT 100 python3 benchmarks/e2e_vs_transformers.py --batches 64 --new-tokens 128 --step-times \
    --kernels $ALL --out "$R/host64_e2e_b64.json" > "$R/host64_e2e_b64.log" 2>&1
echo "exit $?"; grep -vE "RoPE scaling" "$R/host64_e2e_b64.log" | tail -n 3 | cut -c1-200

stamp "done"
