#!/usr/bin/env bash
# Session 7, helper "hc" (<= 90 s on one H200): decode latency of the hyper-connection kernels and
# the block RMS norm (issue 12's per-layer time).   run(command="bash benchmarks/gpu_s7_hc.sh")
# What changed (CPU interpreter tests pass; nothing of it has run on a GPU yet). Found in the sm_90
# SASS of the device's Triton 3.6 (the local 3.9 compiles differently, which is how call 5's "one
# fp64 division a thread" never happened on the H200):
#   1. comb with one element a thread (`_comb_lanes`): 3.6 gave each thread a whole column of the
#      4x4 comb, so each Sinkhorn half-step ran 4 fp64 divisions back to back (156 divisions, each
#      MUFU.RCP64H + 8 dependent DFMAs + a slow-path branch); now 1 per half-step (39), the row/col
#      sums written out in the orders 3.6 used (same fp64 ops, same order: same bits at Flash);
#   2. L1 prefetches (`prefetch.global.L1`) at the top of the mix, finish and hc_post programs and
#      the RMS norm: 3.6 issued the mix kernel's 16 K-steps' loads one step at a time, after the rho
#      chain (16 memory round trips in a row), the norm's loop one block at a time;
#   3. early start (PDL): mix, finish, hc_post and the RMS norm are programmatic dependent launches; sumsq,
#      mix, finish and the norm signal at their start, so each launch's start-up overlaps the previous
#      kernel (reads/stores of the predecessor's outputs only after griddepcontrol.wait);
#   4. MXSERVE_HC_SIDE_STREAM=1 (off by default): hc_pre's post/comb programs on a second stream
#      beside the block, joined by hc_post (a graph branch + join edge).
#   MXSERVE_HC_OLD_KERNELS=1 launches the kernels as before (A/B in one process); the old variant's
#   SASS is instruction-for-instruction the HEAD kernels' (Triton 3.6, both model shapes).
# A. GPU bit checks: new == old (hc_pre/hc_post(+addend)/hc_head at Flash, hc_pre at the default
#    shape; T 1/8/67), at Flash also the fp64 mixes, post and comb before rounding (the proof that the
#    same fp64 ops run in the same order), Flash == CUDA twins, side stream == one stream (eager and
#    graph replay), the comb sums' orders on sm_90, the RMS norm == twin (prefetch on).
#    IF new != old FAILS: keep MXSERVE_HC_OLD_KERNELS=1 and send me the log.
# B. benchmarks/hc_latency.py: µs per call under graph replay, 48 calls a graph on their own weights
#    (L2-cold fn), Flash shapes, T = 1 and 8; "layer - block" = hc_pre + norm + hc_post around a
#    ~25 us stand-in block, minus the block alone.
#
# Prediction (written before the run). Model: fp64 division ~115 cycles (MUFU.RCP64H + 8 dependent
# DFMA + branch), shuffle ~25, DADD ~8, 1.98 GHz; old Sinkhorn 39 x (4 div + sums) ~ 10 us, new
# 39 x (1 div + 1-2 shuffle levels + 4-5 DADD) ~ 3.8 us; session-6 profile: finish ~13, mix 4.3, post 3.3,
# sumsq 1.2, rms 3.7 us a call; graph replay adds ~0.7 us a launch.
#   A: all pass, the fp64 comparisons included (the twin check is "in practice": a 1-ulp mix flip has
#      probability ~1e-4 here).
#   B, T=1 (us a call)    old      new              why
#      hc_pre              ~20     ~11 (8-14)       Sinkhorn 156 -> 39 serial divisions (-6), mix
#                                                   prefetch (-1.5), 2 early starts (-1)
#      hc_pre 1 iter       ~10.5   ~7.5             (hc_pre - this) / 19: old ~0.52, new ~0.19 an iteration
#      hc_post             ~4.5    ~3.2             prefetch, early start
#      hc_head             ~8      ~5.5             prefetch, 2 early starts
#      rms_norm            ~4.5    ~2.5             prefetch; back-to-back norms overlap (early start)
#      layer - block       ~30     ~18; new+side ~14 (10-18): post/comb hidden beside the block
#   B, T=8: each row within ~15% of T=1 (same chains; the mix runs 2 token blocks).
#   If prefetch.global.L1 turned out to be ignored by the H200, hc_post/hc_head/rms_norm stay at
#   "old" and hc_pre gains only the Sinkhorn part (~6 us).
# Raw: $R/hc_tests.log, $R/hc_latency.json / .log. Prints a table last.
source benchmarks/gpu_s5_env.sh

stamp "A: GPU bit checks (new == old, == twins, side stream, orders; RMS norm == twin)"
timeout -s INT 50 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/hyper_connection/test_hc_gpu.py \
    tests/kernels/rms_norm/test_rms_norm_triton.py > "$R/hc_tests.log" 2>&1
echo "exit $?"; grep -E "passed|failed|Error|assert" "$R/hc_tests.log" | tail -n 8 | cut -c1-300

stamp "B: hc latency, old vs new (graph replay, Flash shapes)"
timeout -s INT 36 python3 benchmarks/hc_latency.py --tokens 1 8 --out "$R/hc_latency.json" > "$R/hc_latency.log" 2>&1
echo "exit $?"; grep -E "Error|error" "$R/hc_latency.log" | head -n 5 | cut -c1-300

stamp "table (us per call; layer - block = one mHC site's in-step cost)"
cat "$R/hc_latency.log" | grep -vE "Warning|warn" | head -n 20
