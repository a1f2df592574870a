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
# CPU launch count (tests/model/test_decode_launches.py, aten + Triton, kernels as on the H200):
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
#    Flash step again with the off switches set (maps map by map, torch SwiGLU) in the same process.
# Raw: $R/glue_tests.log, $R/glue_profile.json / .log. Prints a table last.
#
# Prediction (written before any GPU run):
# - A: every test passes (equal logits and caches; graphs replay; no sync).
# - Flash 2 layers (CSA, HCA) + head, b1, ctx 4K: the glue-off variant has ~73 device launches more
#   than "as built" (maps ~65, SwiGLU 8) and ~100-150 us more kernel time (tiny kernels, ~1.5-2 us
#   each); graph replay ~0.10-0.2 ms faster as built (session 5 call 3: 1.65 ms). All-rows count
#   (sessions 4-5's metric, each aten launch about twice): 466 -> ~250; device launches ~150-190.
# - default model b1: device kernel time per token 1.21 -> ~0.95-1.0 ms (~165 launches fewer with the
#   out_dtype epilogue: maps 66, SwiGLU 32, MoE add/cast 16, RoPE 8, embedding 1, linears' casts ~43).
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
