#!/usr/bin/env bash
# Session 6, helper "glue" (<= 150 s on one H200): fewer torch glue launches in the decode step.
#   run(command="bash benchmarks/gpu_s6_glue.sh", carry=[".tc", ".whl"])
# What changed (CPU interpreter tests pass; none run on a GPU yet):
#   1. the step's slot maps (window write/read, 3 compressor sites, 2 candidate sets) in ONE Triton
#      launch (`step_slot_maps`) instead of ~65 int64 ops + slot-map launches a step (integers: exact);
#   2. the MoE's shared-expert add and bf16 cast inside hc_post's launch (2 launches a layer fewer);
#   3. the shared expert's clamped SwiGLU + cast in one launch (5 -> 1 a layer; libdevice expf,
#      div.rn, no FMA, no FTZ: meant to be torch's CUDA bits exactly; off: MXSERVE_TORCH_SHARED_SWIGLU=1);
#   4. the inverse RoPE rounds the fp32 attention output itself (1 launch an attention layer fewer);
#   5. the embedding gathered straight into the hc streams (1 launch a step fewer).
# CPU launch count (tests/model/test_decode_launches.py, aten + Triton, kernels as on the H200; it
# cannot see act_quant launches, which the CPU's weight-only FP8 path does not make):
#   default model 478 -> 313 a token (of which ~43 are another helper's linear out_dtype epilogue);
#   the tiny CSA+HCA step 181 -> 89.
# A. GPU bit checks first: tests/model/test_decode_glue_gpu.py (the default model's decode step with
#    the fusions vs the ops they replace: logits and every cache byte equal; step maps == twin at 64
#    rows x 2048 candidates), the SwiGLU kernel over every bf16 gate, the RoPE rounding, then the
#    CUDA-graph gates (graphs == eager, no host sync in the step).
#    IF test_shared_swiglu.py::test_gpu_bitwise FAILS: set MXSERVE_TORCH_SHARED_SWIGLU=1 (or make it
#    the default) — the rest is independent of it.
# B. benchmarks/profile_decode.py --what flash default --ab-glue: device launches and kernel time per
#    step (device rows only; the sessions-4/5 "all rows" sum is printed too), graph replay, and the
#    Flash step again with the off switches set in the same process: MXSERVE_PER_MAP_SLOTS=1 (the maps
#    map by map, one Triton slot map each: session 5's path) and MXSERVE_TORCH_SHARED_SWIGLU=1.
#
# Already measured (session 6 call 3, this script's first version: maps in one launch, MoE add/cast
# in hc_post, embedding; its A/B used MXSERVE_TORCH_PAGED_SLOTS=1, i.e. every slot map as ~13 torch
# ops, an unfair "before"): A 4/4 passed (bit-identical logits + caches, step maps == twin, graphs).
# Flash 2L b1 ctx 4K: 117 device launches, 0.870 ms kernels, graph replay 1.125 ms (session 5 call
# 3: 466 all-rows launches, 1.06 ms, 1.65 ms replay) vs the torch-twin maps 351 / 1.131 / 1.90 ms
# (~1.1 us kernel and ~3.3 us replay per extra launch). Default model b1: 386 launches and 1.00 ms
# of kernels a token (session 5 call 4: 1.21 ms).
# Raw: $R/glue_tests.log, $R/glue_profile.json / .log. Prints a table last.
#
# Prediction for this version (written before its GPU run):
# - A: every test passes, the SwiGLU over every bf16 gate included (the riskiest: libdevice expf
#   without FTZ must be CUDA torch's expf; if not, set MXSERVE_TORCH_SHARED_SWIGLU=1).
# - Flash 2L b1 ctx 4K as built: ~105 device launches (117 - SwiGLU 8 + 2 - RoPE 2 - 4), ~0.85 ms of
#   kernels, graph replay ~1.08 ms. The glue-off variant (session 5's maps, torch SwiGLU): ~+70
#   launches, ~+60-80 us kernels, ~+0.2 ms replay (~3 us a launch in replay, as call 3 measured).
# - default model b1: ~0.93-0.97 ms of kernels a token (1.00 in call 3; SwiGLU 32 and RoPE 8 launches
#   fewer, ~1.1 us each).
source benchmarks/gpu_s5_env.sh
ALL=${KERNELS:-linear=triton,moe=triton,attention=triton,hc=triton}

stamp "A: GPU bit checks (decode-step fusions vs the ops they replace; CUDA-graph gates)"
timeout -s INT 70 python3 -m pytest -q -m gpu -p no:cacheprovider tests/model/test_decode_glue_gpu.py \
    tests/kernels/moe/test_shared_swiglu.py \
    "tests/engine/test_cuda_graphs.py::test_gpu_decode_step_has_no_host_sync_all_triton" \
    "tests/engine/test_cuda_graphs.py::test_gpu_default_model_graphs_equal_eager_all_triton[5-8]" \
    > "$R/glue_tests.log" 2>&1
echo "exit $?"; grep -E "passed|failed|Error" "$R/glue_tests.log" | tail -n 6 | cut -c1-300
# the RoPE kernels' bit tests run on CUDA when it is there (not marked gpu): the new rounding among them
timeout -s INT 20 python3 -m pytest -q -p no:cacheprovider tests/kernels/attention_ops/test_fused_writers.py -k rope \
    > "$R/glue_rope_tests.log" 2>&1
echo "exit $?"; tail -n 2 "$R/glue_rope_tests.log" | cut -c1-300

stamp "B: decode-step profile (Flash b1 ctx 4K with the glue A/B; default model b1)"
timeout -s INT 75 python3 benchmarks/profile_decode.py --what flash default --ab-glue --kernels $ALL --top 10 \
    --steps 5 --out "$R/glue_profile.json" > "$R/glue_profile.log" 2>&1
echo "exit $?"; grep -E "^\[|device rows|Error" "$R/glue_profile.log" | cut -c1-200 | head -n 12

stamp "table"
python3 - "$R/glue_profile.json" <<'PY'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as e:  # the profile did not finish: the log above says why
    sys.exit(f"no profile JSON: {e}")
print(f"{'step':<44} {'dev launches':>12} {'dev ms':>8} {'all rows':>9} {'graph ms':>9}")
rows = []
if "flash" in d:
    rows.append(("flash 2L b1 ctx4K, as built", d["flash"]))
    if "ab_glue_off" in d["flash"]:
        rows.append(("flash 2L b1 ctx4K, glue fusions off", d["flash"]["ab_glue_off"]))
if "default" in d:
    rows.append(("default model b1 (per token)", d["default"]))
for label, m in rows:
    g = m.get("graph_step_ms")
    print(f"{label:<44} {m['device_launches']:12.1f} {m['device_ms']:8.3f} {m['all_rows_launches']:9.1f} "
          f"{g if g is None else round(g, 3)!s:>9}")
PY
stamp "done"
