#!/usr/bin/env bash
# Train the packaged default model's DSpark draft on one H200 (issue 13 deliverable 4), <= 5 min:
# ~200 s of target features + training, export in the 0731 layout (validate()d), then the real
# acceptance through LLM(speculative_config) for K in 3, 5, 7 vs plain greedy. Returns the trained
# checkpoint as a split tar (<= 15 MB parts) plus the log, summary.json and loss.csv.
# Run from the repo root. Data: the corpus (prepare_corpus.py output) in $DATA when that folder
# exists, otherwise windows the target writes itself ($SELF_WINDOWS of them, self_data.py):
#   run(command="bash tools/dspark/train_on_device.sh", carry=[".dm_data2/train.txt", ".dm_data2/heldout.txt"])
#   run(command="SELF_WINDOWS=2048 bash tools/dspark/train_on_device.sh")
# Unpack here: cat hf.tar.part-* | tar -xf -   (gives default_model_dspark/)
set -uo pipefail
DATA=${DATA:-.dm_data2}
if [ -d "$DATA" ]; then DATA_ARGS=(--data "$DATA"); else DATA_ARGS=(--self-windows "${SELF_WINDOWS:-2048}"); fi
BUDGET=${BUDGET:-200}  # seconds of features + training; the export and the real acceptance come after
# (session 3: BUDGET=170 gave 224 feature windows, 686 steps, acceptance 1.8 — the draft memorised its
# 57k training tokens; a longer run wants e.g. BUDGET=450 TIMEOUT=590 in a call of its own)
OUT=${OUT:-/tmp/dspark_out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader || true
timeout "${TIMEOUT:-290}" python3 tools/dspark/train_draft.py --model src/mxserve/default_model "${DATA_ARGS[@]}" \
    --out /tmp/dspark/default_model_dspark --time-budget-s "$BUDGET" --device cuda \
    --seq-len 256 --batch 16 --anchors 32 --feature-batch 32 --log-every 25 --eval-every-s 30 \
    --final-prompts "${FINAL_PROMPTS:-8}" --final-new-tokens 48 --final-ks 3,5,7 2>&1 | tee "$OUT/train.log"
echo "exit: ${PIPESTATUS[0]}"
cp /tmp/dspark/default_model_dspark-train/summary.json /tmp/dspark/default_model_dspark-train/loss.csv "$OUT/" 2>/dev/null
if [ -f /tmp/dspark/default_model_dspark/config.json ]; then
    tar -C /tmp/dspark -cf - default_model_dspark | split -b 15m - "$OUT/hf.tar.part-"
fi
ls -la "$OUT"
