#!/usr/bin/env bash
# Next session's second H200 call (written in session 11): a third self-distillation round for the shipped
# DSpark draft, now with a decaying learning rate. Round 2 (session 11 call 6: constant lr 1e-3, 2048 fresh
# windows, 175 s) left the held-out proxy flat (2.85 -> 2.87) and moved acceptance only 3.78 -> 3.89 at
# K = 7: a constant lr that suits a fresh start may be too high to refine a trained draft.
# This round: more windows (up to 6144, 100 s of generation), lr 5e-4 with cosine decay to 10% over 280 s.
# Prediction: the held-out proxy rises by >= 0.1 over its step-0 value; acceptance at K = 7 >= 4.1 (ship
# only if it beats 3.89 in this call's spec_decode); K = 7 >= 1.4x plain end to end.
#   run(command="bash benchmarks/gpu_s12_call2.sh", carry=[".tc"], timeout_s=590)
source benchmarks/gpu_s5_env.sh
stamp "train round 3 on fresh self data, cosine lr"
train_self_draft 450 --self-windows 6144 --seed 23 --time-budget-s 280 --self-gen-s 100 \
    --feature-share 0.15 --lr 5e-4 --lr-schedule cosine || { gpu_s5_pack; exit 1; }
stamp "ship into the device's packaged model"
ship_self_draft
stamp "spec_decode with the round-3 draft, interleaved"
spec_bench 100 --ks 3 7 --eager-ks
gpu_s5_pack
