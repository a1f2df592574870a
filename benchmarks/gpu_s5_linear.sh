#!/usr/bin/env bash
# Issue 9, session 5: the FP8 block-scaled linear's decode tile on the H200 (DecodeOptions A/B).
#
#   OUT=<dir> bash benchmarks/gpu_s5_linear.sh      # from the repo root; <= ~150 s wall
#
# Phase A (in parallel, no timing; fills the shared Triton cache):
#   A1  the F2FP (cvt e4m3x2 -> f16x2) throughput microbenchmark, then the GPU test of the options
#       (tests/kernels/linear_fp8_block/test_decode_options.py: bitwise vs the pre-option launch,
#       PDL under CUDA-graph replay);
#   A2  benchmarks/kernels.py --decode-ab --ab-checks-only: every variant vs today's default
#       (autotuned) bit for bit at the Flash shapes, M = 1, 8, 16 (compiles every variant);
#   A3  the existing GPU tests of the fused split-K (now on the mask-free default).
# Phase B (alone on the GPU): benchmarks/kernels.py --decode-ab: the same checks again, then graph-
#   replay timing of every bit-identical variant in two rounds of opposite order, next to bf16
#   cuBLAS, _scaled_mm rowwise, W8A8 (GEMM only) and the GEMV (M = 1), copy bandwidth in the run.
# Raw rows: $OUT/linear/. The table (<= 25 lines) is printed last.
set -u
: "${OUT:?set OUT to an output directory}"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
L="$OUT/linear"
mkdir -p "$L"
SHAPES=(head wo_b wq_b 'wq_a||wkv' shared_w13 shared_w2 idx_wq_b)  # most important first: a timeout cuts the tail
start=$(date +%s)

cat > "$L/cvt_rate.py" <<'EOF'
"""F2FP throughput: a dependent chain of cvt.rn.f16x2.e4m3x2 per thread, 64 warps per SM."""
import json

import torch
import triton
import triton.language as tl

CHAIN = 32  # dependent cvts per asm block (one F2FP.F16.E4M3.UNPACK_B each: Triton 3.6, sm_90)
CVT_ASM = tl.constexpr("{ .reg .b16 lo, hi; .reg .b32 v; mov.b32 v, $1; "
                       + "mov.b32 {lo, hi}, v; cvt.rn.f16x2.e4m3x2 v, lo; " * CHAIN + "mov.b32 $0, v; }")


@triton.jit
def _chain(x_ptr, o_ptr, REPS: tl.constexpr):
    offs = tl.program_id(0) * 1024 + tl.arange(0, 1024)
    v = tl.load(x_ptr + offs)
    for _ in range(REPS):
        v = tl.inline_asm_elementwise(CVT_ASM, "=r,r", [v], dtype=tl.int32, is_pure=True, pack=1)
    tl.store(o_ptr + offs, v)


sms = torch.cuda.get_device_properties(0).multi_processor_count
programs, reps = sms * 16, 64  # 16 programs x 4 warps = 64 warps per SM (18 registers)
x = torch.randint(0, 1 << 30, (programs * 1024,), dtype=torch.int32, device="cuda")
o = torch.empty_like(x)
run = lambda: _chain[(programs,)](x, o, REPS=reps, num_warps=4)  # noqa: E731
run()
torch.cuda.synchronize()
a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
a.record()
for _ in range(5):
    run()
b.record()
b.synchronize()
t = a.elapsed_time(b) / 5 * 1e-3
rate = programs * 4 * reps * CHAIN / sms / (t * 1e6)  # F2FP warp instructions per SM per us
row = {"kind": "cvt_rate", "s": t, "f2fp_warp_instr_per_sm_per_us": rate,
       "cycles_per_f2fp_per_smsp_at_1980mhz": 4 * 1980 / rate,
       # a decode tile converting only its weights (2 bytes per lane per F2FP, 64 per warp instruction)
       "weight_only_cvt_cap_TBps": rate * 1e6 * sms * 64 / 1e12}
try:
    row["sm_clock_mhz_now"] = torch.cuda.clock_rate(0)
except Exception as e:  # NVML missing: the 1980 MHz figure stands
    row["clock_error"] = type(e).__name__
print(json.dumps(row))
EOF

# ---- phase A: correctness and compiles, in parallel ------------------------------------------
( timeout -s INT 25 python3 "$L/cvt_rate.py" > "$L/cvt_rate.jsonl" 2> "$L/cvt_rate.err";
  timeout -s INT 70 python3 -m pytest -q -m gpu tests/kernels/linear_fp8_block/test_decode_options.py \
      > "$L/pytest_options.log" 2>&1; echo "rc=$?" >> "$L/pytest_options.log" ) &
pa1=$!
( timeout -s INT 90 python3 benchmarks/kernels.py --decode-ab --ab-checks-only --shapes "${SHAPES[@]}" \
      --ms 1 8 16 --out "$L/checks" > "$L/checks.log" 2>&1; echo "rc=$?" >> "$L/checks.log" ) &
pa2=$!
( timeout -s INT 90 python3 -m pytest -q -m gpu tests/kernels/linear_fp8_block/test_fused_split_k.py \
      > "$L/pytest_fused.log" 2>&1; echo "rc=$?" >> "$L/pytest_fused.log" ) &
pa3=$!
wait $pa1 $pa2 $pa3
echo "phase A: $(( $(date +%s) - start )) s"
echo "cvt rate: $(cat "$L/cvt_rate.jsonl" 2>/dev/null | head -c 400)"
echo "pytest options: $(grep -E 'passed|failed|error|rc=' "$L/pytest_options.log" | tr '\n' ' ' | tail -c 300)"
echo "pytest fused:   $(grep -E 'passed|failed|error|rc=' "$L/pytest_fused.log" | tr '\n' ' ' | tail -c 300)"
echo "checks: $(grep -E '^bit checks|rc=' "$L/checks.log" | tr '\n' ' ' | tail -c 600)"

# ---- phase B: timing, alone on the GPU -------------------------------------------------------
left=$(( 145 - ($(date +%s) - start) ))
[ "$left" -lt 20 ] && left=20
timeout -s INT "$left" python3 benchmarks/kernels.py --decode-ab --shapes "${SHAPES[@]}" --ms 1 8 16 \
    --out "$L/timing" > "$L/timing.log" 2>&1
echo "phase B rc=$? total $(( $(date +%s) - start )) s (raw rows: $L/timing/kernels.jsonl, every variant: $L/timing/variants.md)"
cat "$L/timing/table.md" 2>/dev/null || tail -n 25 "$L/timing.log"
