#!/usr/bin/env bash
# Second stage of the default model on one H200: two fine-tunes of the packaged checkpoint side by
# side (residual dropout; with and without token-level unlikelihood), each converted to the release
# format and scored on 40 held-out prompts that are disjoint from the 20 acceptance prompts
# (samples.py --offset 0.5). The run with more non-degenerate continuations (then the lower
# held-out loss) comes back as a split tar of its bf16 save. Run from the repo root.
set -uo pipefail
DATA=${DATA:-.dm_data2}
BUDGET=${BUDGET:-300}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/transformers-5.24.0-py3-none-any.whl .whl/regex-*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
ROOT=$PWD
python3 -c "from mxserve.cli.main import main; main()" convert src/mxserve/default_model /tmp/init --to release --no-quantize || exit 1
cd tools/default_model
common=(--data $ROOT/$DATA --tokenizer $ROOT/$DATA/tok --init /tmp/init --time-budget-s $BUDGET --log-every 20
        --eval-every-s 15 --experts-impl grouped_mm --lr 8e-4 --warmup-steps 50 --residual-dropout 0.15)
python3 train.py "${common[@]}" --out /tmp/run_a > /tmp/run_a.log 2>&1 &
python3 train.py "${common[@]}" --out /tmp/run_b --unlikelihood-alpha 1.0 > /tmp/run_b.log 2>&1 &
wait
for r in a b; do
    tail -2 /tmp/run_$r.log | cut -c1-300; cp /tmp/run_$r.log /tmp/run_$r/
    python3 -c "from mxserve.cli.main import main; main()" convert /tmp/run_$r/hf /tmp/rel_$r --to release --quantize --max-shard-size 15MB > /dev/null &&
    OMP_NUM_THREADS=8 python3 samples.py --heldout $ROOT/$DATA/heldout.txt --model /tmp/rel_$r --count 40 --offset 0.5 \
        --out /tmp/run_$r/val_samples.json 2>&1 | tail -1 | tee /tmp/run_$r/val_tally.txt
done
best=$(python3 - <<'PY'
import json
score = {}
for r in "ab":
    try:
        samples = json.load(open(f"/tmp/run_{r}/val_samples.json"))
        good = sum(s["degenerate"] is None for s in samples)
        loss = json.load(open(f"/tmp/run_{r}/summary.json"))["heldout_loss_fp32_autocast"]
        score[r] = (-good, loss)
    except Exception as e:
        print(f"run {r}: {e}", file=__import__("sys").stderr)
print(min(score, key=score.get))
PY
)
echo "best run: $best"
tar -C /tmp -czf $OUT/logs.tgz run_a/loss.csv run_a/summary.json run_a/run_a.log run_a/val_samples.json \
    run_b/loss.csv run_b/summary.json run_b/run_b.log run_b/val_samples.json
tar -C /tmp/run_$best -cf - hf | split -b 15m - $OUT/hf.tar.part-
ls -la $OUT
