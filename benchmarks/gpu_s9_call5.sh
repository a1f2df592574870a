#!/usr/bin/env bash
# Session 9 call 5: the draft lookahead (step_graphs docstring). Call 4: K=3 at 0.96x plain, step wall
# 2.16 ms for 1.56 ms of device time; the post graph and the next draft (0.07 + 0.40 ms) waited for
# the host's read. With every request greedy they are now queued behind the read. Prediction: step
# wall ~1.75 ms → K=3 ~1.1-1.2x plain; K=3 without the lookahead stays ~0.96x (same call).
# (Written in session 9, not run: the session's device time ran out. The lookahead is off by default
# (MXSERVE_SPEC_LOOKAHEAD=1 turns it on); spec_decode.py sets it per engine.)
#   run(command="bash benchmarks/gpu_s9_call5.sh", carry=[".tc"])
source benchmarks/gpu_s5_env.sh
stamp "probe + profile"
timeout 60 python3 benchmarks/spec_probe.py --profile 2>&1 | grep -v -i warn | tail -n 16 | cut -c1-400
[ "${PIPESTATUS[0]}" = 0 ] || { gpu_s5_pack; exit 1; }
stamp "GPU tests: graphed speculation (lookahead on)"
spec_gpu_tests 50
stamp "spec_decode benchmark, interleaved"
spec_bench 80 --ks 3 5 7 --no-lookahead-ks 3 --eager-ks
gpu_s5_pack
