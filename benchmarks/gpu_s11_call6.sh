#!/usr/bin/env bash
# Session 11 call 6: a second round of self-distillation, continuing from the draft call 3 shipped
# (2816 self windows, 251 s of training: acceptance 2.90 / 3.47 / 3.78 at K = 3 / 5 / 7, K = 7 1.39x plain).
# Fresh windows (another seed), 180 s more training. The held-out proxy was still rising at the end of
# round 1 (2.50 at step 628, 2.69 at 1574). Prediction: proxy 2.75-2.85, real acceptance at K = 7 3.9-4.1,
# K = 7 1.40-1.50x plain. Ship only if K = 7's acceptance beats 3.78.
#   run(command="bash benchmarks/gpu_s11_call6.sh", carry=[".tc"], timeout_s=370)
source benchmarks/gpu_s5_env.sh
stamp "train round 2 on fresh self data"
timeout 300 python3 tools/dspark/train_draft.py --model src/mxserve/default_model --self-windows 4096 --seed 11 \
    --out /tmp/dspark/default_model_dspark --time-budget-s 180 --self-gen-s 45 --device cuda \
    --seq-len 256 --batch 16 --anchors 32 --feature-batch 32 --log-every 100 --eval-every-s 40 \
    --feature-share 0.2 --init-from-draft --final-prompts 0 > "$R/train.log" 2>&1
echo "exit $?"; grep -E "self data:.*held|features:|eval step|loss .* over" "$R/train.log" | cut -c1-200 | tail -n 10
cp /tmp/dspark/default_model_dspark-train/summary.json /tmp/dspark/default_model_dspark-train/loss.csv "$R/" 2>/dev/null
[ -f /tmp/dspark/default_model_dspark/config.json ] || { tail -n 20 "$R/train.log"; gpu_s5_pack; exit 1; }
stamp "ship into the device's packaged model"
python3 tools/dspark/ship_draft.py /tmp/dspark/default_model_dspark src/mxserve/default_model 2>&1 | tail -n 1 | cut -c1-200
tar -C src/mxserve/default_model -czf "$OUT/shipped_draft.tgz" model-dspark-draft.safetensors \
    model.safetensors.index.json config.json mxserve-manifest.json
stamp "spec_decode benchmark with the round-2 draft, interleaved"
spec_bench 90 --ks 3 7
gpu_s5_pack
