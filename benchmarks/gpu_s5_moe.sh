#!/usr/bin/env bash
# Session 5, issue 10 (<= 150 s on one H200): the MoE streaming decode, variant "bf16-stream".
#   OUT=<dir> bash benchmarks/gpu_s5_moe.sh          (from the repo root; python3 with torch + triton 3.6)
# A: GPU tests of the MoE kernels touched (stream vs fused bits, split vs fused bits, fused vs twin).
# B: benchmarks/moe.py at Flash shapes (256 experts, top-6), tokens 1/64/16/4, real and worst routing:
#    bit checks of every stream config and of the split decode against the fused kernel, CUDA-graph
#    timing of the current split decode and the stream configs (TB/s on the hit experts' bytes, %
#    of the copy bandwidth measured in the same run), per-kernel device times, the bf16 grouped
#    matmul at 1 token. Raw JSON and logs under $OUT/moe/; a short table printed last.
set -uo pipefail
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=$PWD/.triton_cache PYTHONPATH=$PWD/src
OUT=${OUT:-/tmp/gpu_out}; R=$OUT/moe; mkdir -p "$R" "$TRITON_CACHE_DIR"
T0=$(date +%s)
stamp() { echo "=== $1 (+$(( $(date +%s) - T0 )) s)"; }

stamp "A: GPU tests"
timeout -s INT 55 python3 -m pytest -q -p no:cacheprovider -n 4 -m gpu tests/kernels/moe/test_gpu.py \
    -k "decode_variant or stream or (parity_and_invariance and bf16)" > "$R/gpu_tests.log" 2>&1
echo "pytest exit $?"; grep -E "^(FAILED|ERROR)|passed|failed" "$R/gpu_tests.log" | tail -n 8

stamp "B: benchmark"
timeout -s INT 85 python3 benchmarks/moe.py --variants bf16-split bf16-stream --tokens 1 64 16 4 \
    --stream-configs n64s4 n64s6 n128s4 n64s4pdl --no-twin --baselines grouped --baseline-max-tokens 1 \
    --kernel-times 1 64 --skip invariance --deadline 60 --out "$R/moe_stream.json" > "$R/bench.log" 2>&1
echo "benchmark exit $?"; grep -E "Traceback|Error" "$R/bench.log" | head -n 5
stamp "done"

python3 - "$R/moe_stream.json" "$R/gpu_tests.log" <<'EOF'
import json, re, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as exc:
    sys.exit(f"no benchmark JSON: {exc!r}")
tests = [l.strip() for l in open(sys.argv[2]) if re.search(r"passed|failed", l)]
rows, bw = d["rows"], d["copy_bandwidth"]
par = [r for r in rows if r.get("kind") == "parity"]
bad = [f"{r['tokens']}/{r['routing']}:{k[:-len('_bit_identical_to_bf16')]}" for r in par for k, v in r.items()
       if k.endswith("_bit_identical_to_bf16") and not v]
bad += [f"{r['tokens']}/{r['routing']}:{k}" for r in par for k in r if k.endswith("_error")]
nchk = sum(k.endswith("_bit_identical_to_bf16") for r in par for k in r)
print(f"\nMoE decode, H200, copy {bw / 1e12:.2f} TB/s; tests: {tests[-1] if tests else 'no summary'}")
print(f"bit checks vs fused bf16: {nchk - len([b for b in bad if not b.endswith('_error')])}/{nchk} equal"
      + (f"; NOT: {', '.join(bad[:6])}" if bad else ""))
times = [r for r in rows if r.get("kind") == "time"]
cfgs = sorted({k[7:-3] for r in times for k in r if k.startswith("stream:") and k.endswith("_us")})
print(f"{'tok':>4} {'route':>5} {'MB':>5} {'split':>7} " + " ".join(f"{c:>9}" for c in cfgs)
      + f" {'best':>7} {'TB/s':>5} {'%copy':>5} {'x split':>7}")
for r in sorted(times, key=lambda r: (r["tokens"], r["routing"])):
    st = {c: r.get(f"stream:{c}_us") for c in cfgs}
    best = min((v for v in st.values() if v), default=None)
    sp = r.get("bf16-split_us")
    cells = " ".join(f"{v:9.1f}" if v else f"{'err':>9}" for v in st.values())
    tail = (f" {best:7.1f} {r['hit_bytes'] / best / 1e6:5.2f} {100 * r['hit_bytes'] / best / 1e-6 / bw:5.0f}"
            f" {sp / best if sp else 0:7.2f}") if best else ""
    print(f"{r['tokens']:>4} {r['routing']:>5} {r['hit_bytes'] / 1e6:5.0f} {sp or 0:7.1f} {cells}{tail}")
for r in times:
    if r["tokens"] == 1 and r["routing"] == "real" and "bf16_grouped_us" in r:
        st = [r[k] for k in r if k.startswith("stream:") and k.endswith("_us")]
        if st:
            print(f"1 token: bf16 grouped matmul {r['bf16_grouped_us']:.1f} us = {r['bf16_grouped_us'] / min(st):.2f}x "
                  f"the best stream config ({r['bf16_grouped_us'] / r['bf16-split_us']:.2f}x split)")
for r in rows:
    if r.get("kind") == "kernel_times" and r["routing"] == "real" and r["tokens"] in (1, 64) and "us_per_call" in r:
        ks = sorted(r["us_per_call"].items(), key=lambda kv: -kv[1])[:5]
        print(f"{r['tokens']:>3} tok {r['entry'][:15]:>15}: " + ", ".join(
            f"{re.sub(r'^_?moe_|_kernel.*$', '', k)[:14]} {v:.1f}" for k, v in ks))
EOF
