#!/usr/bin/env bash
# Session 7, issue 10 (<= 90 s on one H200): the MoE decode, variant "bf16-stream-splitk" (opt-in) against
# "bf16-stream" (the default up to 32 pairs; 61.4 us at 1 token in session 5: gate/up 38.5, down 21.3).
#   run(command="bash benchmarks/gpu_s7_moe.sh", carry=[".tc"])
# The new variant (`kernels/moe/stream_splitk.py`, `_experts_stream_splitk_kernel.py`): the widened weights
# are relabelled straight into the wgmma operand registers (sm_90 compile, Triton 3.6: no STS/LDSM in the
# K loop, 29 KB shared memory at 4 stages instead of 45, 257 K-loop instructions a warp per 128-K block
# instead of 277), K split across programs with the partials summed in split order by the last arrival,
# and a register cap (maxnreg 80: 6 programs per SM instead of 4). Its fp32 sums group K differently, so
# it has its own bits: tolerances, not equality.
# A (parallel): one process per config compiles the decode kernels at 1 and 16 tokens (an 8-expert layer
#    of the Flash D/I: same kernels, so the run below finds them in the Triton cache), and the GPU tests of
#    the new variant (test_gpu.py -k splitk: vs the fp64 twin 2e-3 faithful / 1e-4 exact, vs bf16-stream
#    1e-3 / 1e-5, token alone == in the batch, CUDA-graph replay == eager; 1/16/85 tokens, worst routing).
# B: benchmarks/moe.py at Flash shapes (256 experts, top-6, 4096 -> 2048 -> 4096), tokens 1, 4, 16, real
#    top-6 routing (Triton router) and worst (every token on experts 0..5): parity (bf16-stream == fused
#    bits; each split-K config's normwise error vs fused and vs bf16-stream, token 0 alone == in the batch),
#    then us per call under CUDA-graph replay (8 routings per graph, so the hit experts come from HBM),
#    TB/s and % of the copy bandwidth on the hit experts' bytes, per-kernel device times at 1 token.
# Columns: stream:n64s4 = "bf16-stream" as shipped; splitk:<n64 s4 g<gate/up splits> d<down splits> r<maxnreg>>.
#   g2d2r80 = stream_splitk.CONFIG as shipped (768 gate/up + 768 down programs at 1 token), g1d1r80 = no split
#   (the register decode alone), g4d2r72 = more splits (7 per SM), g2d2 = no register cap (4 per SM).
#
# PREDICTION (written before any GPU run of this code). bf16-stream: 61 / 211 / 713 us at 1 / 4 / 16 tokens
# real (session 5). splitk g2d2r80 (the default): 1 token ~36 us (30-48; gate/up ~21, down ~12, prep ~1.5),
# 2.2 TB/s = ~53% of copy on the 80 MB hit; 4 tokens ~125 us (~2.5 TB/s); 16 tokens ~420 us (~2.6 TB/s);
# 16 worst (6 experts, 16 rows each) ~40 us. g1d1r80 ~46 us at 1 token (3 programs
# per SM only), within 10% of g2d2r80 at 4-16 tokens; g4d2r72 within 10% of g2d2r80; g2d2 (4 per SM) ~15%
# slower than g2d2r80 at 1 token. Why: n128 (192 programs) ran 1.74x slower than n64 (384) in session 5, so
# at 1 token the rate scales with programs per SM; 64 tokens (4 per SM) reached 1.7 TB/s in gate/up with
# the old loop; the new loop drops the shared-memory round trip and allows 6 per SM. Normwise vs
# bf16-stream (faithful) ~1e-6..1e-4, vs fused the same; every token-alone check true; all GPU tests pass.
# If 1 token stays > 45 us the K loop is not what limits it (next: ncu on the gate/up kernel, DRAM pattern
# of the 64-byte half lines); <= 30 us would meet issue 10's decode target.
source benchmarks/gpu_s5_env.sh
CFGS="n64s4g2d2r80 n64s4g1d1r80 n64s4g4d2r72 n64s4g2d2"

stamp "A: compile (one process per config) + GPU tests of bf16-stream-splitk"
for c in $CFGS; do
    timeout -s INT 42 python3 benchmarks/moe.py --warm-only --warm-tokens 1 16 --variants bf16-stream-splitk \
        --splitk-configs "$c" > "$R/warm_$c.log" 2>&1 &
done
timeout -s INT 42 python3 benchmarks/moe.py --warm-only --warm-tokens 1 16 --variants bf16 bf16-stream \
    --stream-configs n64s4 > "$R/warm_stream.log" 2>&1 &
timeout -s INT 44 python3 -m pytest -q -p no:cacheprovider -n 4 -m gpu tests/kernels/moe/test_gpu.py -k splitk \
    > "$R/gpu_tests.log" 2>&1 &
wait
for f in "$R"/warm_*.log; do echo "$(basename "$f"): $(tail -n 1 "$f" | cut -c1-110)"; done
grep -E "^(FAILED|ERROR)|passed|failed" "$R/gpu_tests.log" | tail -n 6 | cut -c1-200

stamp "B: parity, then timing at 1, 4, 16 tokens"
timeout -s INT 40 python3 benchmarks/moe.py --tokens 1 4 16 --variants bf16-stream bf16-stream-splitk \
    --stream-configs n64s4 --splitk-configs $CFGS --no-twin --baselines none --skip invariance extras exact \
    --kernel-times 1 --deadline 26 --out "$R/moe_splitk.json" > "$R/bench.log" 2>&1
echo "benchmark exit $?"; grep -E "Traceback|Error" "$R/bench.log" | head -n 4 | cut -c1-200
stamp "done"

python3 - "$R/moe_splitk.json" "$R/gpu_tests.log" <<'EOF'
import json, re, sys
tests = [l.strip() for l in open(sys.argv[2]) if re.search(r"passed|failed", l)]
print("GPU tests (splitk):", tests[-1][:150] if tests else "no result")
try:
    d = json.load(open(sys.argv[1]))
except Exception as exc:
    sys.exit(f"no benchmark JSON: {exc!r}")
rows, bw = d["rows"], d["copy_bandwidth"]
par = [r for r in rows if r.get("kind") == "parity"]
bits = [(f"{r['tokens']}/{r['routing']}", v) for r in par for k, v in r.items() if k.endswith("_bit_identical_to_bf16")]
alone = [(f"{r['tokens']}/{r['routing']}:{k}", v) for r in par for k, v in r.items() if k.endswith("_token0_alone_equal")]
errs = [f"{r['tokens']}/{r['routing']}:{k}" for r in par for k in r if k.endswith("_error")]
print(f"copy {bw / 1e12:.2f} TB/s; stream==fused bits {sum(v for _, v in bits)}/{len(bits)}; splitk token0 alone"
      f" == batch {sum(v for _, v in alone)}/{len(alone)}" + (f"; ERRORS {errs[:3]}" if errs else ""))
for tag in ("_vs_bf16", "_vs_stream"):
    worst = {}
    for r in par:
        for k, v in r.items():
            if k.endswith(tag):
                c = k[len("splitk:"):-len(tag)]
                worst[c] = max(worst.get(c, 0.0), v)
    print(f"max normwise{tag}: " + ", ".join(f"{c} {v:.1e}" for c, v in worst.items()))
times = [r for r in rows if r.get("kind") == "time"]
cols = sorted({k[:-3] for r in times for k in r if k.startswith(("stream:", "splitk:")) and k.endswith("_us")},
              key=lambda c: (not c.startswith("stream"), c))
print(f"{'tok':>3} {'route':>5} {'MB':>4} " + " ".join(f"{c.split(':')[1][:12]:>12}" for c in cols)
      + f" {'best':>6} {'TB/s':>5} {'%copy':>5} {'x strm':>6}")
for r in sorted(times, key=lambda r: (r["tokens"], r["routing"])):
    us = {c: r.get(f"{c}_us") for c in cols}
    new = [v for c, v in us.items() if c.startswith("splitk") and v]
    best = min(new) if new else None
    old = us.get("stream:n64s4")
    cells = " ".join(f"{v:12.1f}" if v else f"{'err':>12}" for v in us.values())
    tail = (f" {best:6.1f} {r['hit_bytes'] / best / 1e6:5.2f} {100 * r['hit_bytes'] / (best * 1e-6) / bw:5.0f}"
            f" {old / best if old else 0:6.2f}") if best else ""
    print(f"{r['tokens']:>3} {r['routing']:>5} {r['hit_bytes'] / 1e6:4.0f} {cells}{tail}")
for r in rows:
    if r.get("kind") == "kernel_times" and "us_per_call" in r:
        ks = sorted(r["us_per_call"].items(), key=lambda kv: -kv[1])[:3]
        print(f"1 tok {r['entry'][:19]:>19}: " + ", ".join(f"{re.sub(r'^_?moe_|_kernel.*$', '', k)[:16]} {v:.1f}"
                                                        for k, v in ks))
for r in rows:
    if r.get("kind") == "error":
        print("error:", str(r)[:160])
EOF
