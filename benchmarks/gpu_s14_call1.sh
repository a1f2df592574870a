#!/usr/bin/env bash
# Session 14 call 1: early start (programmatic dependent launch, waiting first: kernels/early_start.py)
# for the decode kernels that still launched plainly — head norm/RoPE, KV insert, compressor pool and
# state write, router, indexer scores, top-k, activation quantization, shared SwiGLU, slot maps,
# sparse attention (partial and combine), the MoE prep and the hc sums of squares.
# (A) gates: the new on/off bit test (every logit of 64 graph-replayed steps, 5 prompts, all kernels
#     Triton incl. hc), graphs == eager, and the GPU kernel tests of every touched kernel;
# (B) the default model's decode graph, device-only replays (batch_split graph_device_ms), b1 and b64,
#     MXSERVE_EARLY_START 1/0/1/0.
# Prediction (written before the run): ~140 of the default model's ~330 launches a step gain an
# early start; session 7's hc/RMS-norm early starts saved ~0.7 us a launch (0.055 ms over ~75), so
# b1 0.91 -> 0.80-0.84 ms, b64 1.40 -> 1.30-1.36 ms. Gates pass (the waits come first, so no race).
#   run(command="bash benchmarks/gpu_s14_call1.sh", carry=[".tc"])
source benchmarks/gpu_s5_env.sh
stamp "A: gates"
timeout -s INT 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_early_start.py \
    "tests/engine/test_cuda_graphs.py::test_gpu_default_model_graphs_equal_eager_all_triton" > "$R/gates_model.log" 2>&1
echo "model gates exit $?"; tail -n 2 "$R/gates_model.log" | cut -c1-200
timeout -s INT 200 python3 -m pytest -q -p no:cacheprovider -m gpu -x tests/kernels/sparse_attention tests/kernels/topk \
    tests/kernels/attention_ops tests/kernels/indexer tests/kernels/paged_slots tests/kernels/act_quant \
    tests/kernels/hyper_connection tests/kernels/rms_norm tests/kernels/moe/test_gpu.py > "$R/gates_kernels.log" 2>&1
echo "kernel gates exit $?"; tail -n 2 "$R/gates_kernels.log" | cut -c1-200
stamp "B: batch_split b1,b64, MXSERVE_EARLY_START 1/0/1/0"
i=0
for on in 1 0 1 0; do
    i=$((i + 1))
    (cd benchmarks && MXSERVE_EARLY_START=$on timeout -s INT 50 python3 batch_split.py --batches 1,64 \
        --decode-steps 16 --repeats 1 --out "$R/ab_early${on}_$i.json" > "$R/ab_early${on}_$i.log" 2>&1
     echo "early=$on run $i exit $?")
done
python3 - "$R" <<'PY'
import json, sys, pathlib
r = pathlib.Path(sys.argv[1])
print(f"{'early start':<14} {'b1 device ms':>22} {'b64 device ms':>22}")
for on in ("1", "0"):
    vals = {1: [], 64: []}
    for p in sorted(r.glob(f"ab_early{on}_*.json")):
        for row in json.loads(p.read_text())["rows"]:
            if row.get("graph_device_ms") is not None:
                vals[row["batch"]].append(row["graph_device_ms"])
    cells = [" / ".join(f"{v:.3f}" for v in vals[b]) or "-" for b in (1, 64)]
    print(f"{on:<14} {cells[0]:>22} {cells[1]:>22}")
PY
stamp "call 1 done"
gpu_s5_pack
