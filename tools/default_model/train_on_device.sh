#!/usr/bin/env bash
# Two default-model trainings side by side on one H200 (no dropout / residual dropout), then the one
# with the lower best held-out loss comes back as a split tar of its bf16 save (the device tool
# returns at most 8 files of 16 MiB). Run from the repo root with the corpus in $DATA
# (prepare_corpus.py + train_tokenizer.py output, tokenizer in $DATA/tok) and the transformers
# wheel in .whl/.
set -uo pipefail
DATA=${DATA:-.dm_data2}
BUDGET=${BUDGET:-300}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/transformers-5.24.0-py3-none-any.whl .whl/regex-*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
cd tools/default_model
common=(--data ../../$DATA --tokenizer ../../$DATA/tok --time-budget-s $BUDGET --log-every 20
        --eval-every-s 15 --experts-impl grouped_mm)
python3 train.py "${common[@]}" --out /tmp/run_a > /tmp/run_a.log 2>&1 &
python3 train.py "${common[@]}" --out /tmp/run_b --residual-dropout 0.15 > /tmp/run_b.log 2>&1 &
wait
for r in a b; do tail -3 /tmp/run_$r.log; cp /tmp/run_$r.log /tmp/run_$r/ 2>/dev/null; done
best=$(python3 - <<'PY'
import json
scores = {}
for r in "ab":
    try:
        scores[r] = json.load(open(f"/tmp/run_{r}/summary.json"))["heldout_loss_fp32_autocast"]
    except Exception as e:
        print(f"run {r}: {e}", file=__import__("sys").stderr)
print(min(scores, key=scores.get))
PY
)
echo "best run: $best"
tar -C /tmp -czf $OUT/logs.tgz run_a/loss.csv run_a/summary.json run_a/run_a.log run_b/loss.csv run_b/summary.json run_b/run_b.log
tar -C /tmp/run_$best -cf - hf | split -b 15m - $OUT/hf.tar.part-
ls -la $OUT
