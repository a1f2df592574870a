#!/usr/bin/env bash
# Session 11 call 6: a second round of self-distillation, continuing from the draft call 3 shipped
# (2816 self windows, 251 s of training: acceptance 2.90 / 3.47 / 3.78 at K = 3 / 5 / 7, K = 7 1.39x plain).
# Fresh windows (another seed), 180 s more training. The held-out proxy was still rising at the end of
# round 1 (2.50 at step 628, 2.69 at 1574). Prediction: proxy 2.75-2.85, real acceptance at K = 7 3.9-4.1,
# K = 7 1.40-1.50x plain. Ship only if K = 7's acceptance beats 3.78.
#   run(command="bash benchmarks/gpu_s11_call6.sh", carry=[".tc"], timeout_s=370)
source benchmarks/gpu_s5_env.sh
stamp "train round 2 on fresh self data"
train_self_draft 300 --self-windows 4096 --seed 11 --time-budget-s 180 --self-gen-s 45 --feature-share 0.2 || { gpu_s5_pack; exit 1; }
stamp "ship into the device's packaged model"
ship_self_draft
stamp "spec_decode benchmark with the round-2 draft, interleaved"
spec_bench 90 --ks 3 7
gpu_s5_pack
