#!/usr/bin/env bash
# Session 6, helper "w8a8" (<= 150 s on one H200): W8A8 decode with the activation quantization fused
# into the linear's programs (DecodeOptions.fused_act_quant, X_MODE 4) and the bf16 output epilogue
# (out_dtype), against today's model path (act_quant launch + linear + .to(bf16)).
#   run(command="bash benchmarks/gpu_s6_w8a8.sh", carry=[".tc"])
# 1. bit checks at every Flash dense shape (wq_a||wkv 1536x4096, wq_b 32768x1024, wo_b 4096x8192,
#    shared 4096x4096 / 4096x2048, indexer wq_b 8192x1024, head 129280x4096) for M = 1, 8, 16:
#    fused == two-launch (fp32 bits, 3 fused calls in a row), out_dtype=bf16 == .to(bf16) on both paths;
# 2. CUDA-graph timings at M = 1 (the layer shapes, plus wq_a 1024x4096, wkv 512x4096 and shared w1/w3
#    2048x4096: the model launches these separately, the merged shapes above are what a merge would
#    give), a chain of a CSA layer's eight W8A8 linears in the model's order over two layers (distinct
#    copies) against the summed isolated times, M = 8, then the head (weight-only in the model: W8A8
#    here only as a shape) — L2-cold (rotating copies, >= 192 MB a pass) and L2-warm (one copy, 8 calls
#    a graph; only weights <= 48 MB). Prints the bit-check count and a table (us).
# Raw rows: $R/w8a8_fused.jsonl (row by row) and $R/w8a8_fused.json; log $R/w8a8_fused.log.
#
# Prediction (written before any GPU run):
# - every bit check equal (the shared quantization helper; interpreter tests pass at M = 1, 2, 3, 16).
# - M = 1, L2-cold, fused_bf16 vs two_cast: 2-3 us saved a linear (two launches of ~1 us plus their
#   gaps: act_quant and the bf16 copy), e.g. wq_a||wkv ~8.2 -> ~6, wq_b ~13.9 -> ~11.5, wo_b ~15.8 -> ~13.5,
#   shared w13 / w2 ~11.2 / 8.2 -> ~9 / ~6, indexer wq_b ~7.5 -> ~5.5. The M = 1 fused K loop is 192 warp
#   instructions per 64x128 block against 115 with codes loaded (sm_90, Triton 3.9), well under issue.
# - M = 8: the whole 16-row tile is quantized in every program (488 instructions a block, ~0.24 per
#   weight byte, near the issue limit at copy bandwidth): small layers still ~1-2 us faster, wq_b / wo_b
#   within +-1.5 us (could be slower: then set fused_act_quant_max_m=2 — the option exists for this).
# - the head at M = 1: within +-5% (one 150 us launch; the 2 launches saved are ~2%).
# - L2-warm vs cold: layers <= 16 MB 20-40% faster warm; the session-5 isolated figures capped the
#   rotation at 4 copies, so wq_a||wkv (24 MB a pass), shared w2 and indexer wq_b (32 MB) were partly
#   L2-warm there — part of the "465 us in-step vs ~300 us isolated" gap. The rest: the model runs
#   wq_a + wkv and w1 + w3 as 4 launches (not the 2 merged shapes the isolated sum used), and the
#   profile's 25 `_blockdot_kernel` launches include wo_a (grouped) and the weight-only head (~144 us).
#   The chain should come out within ~10% of the summed cold isolated times (~95 us a layer for
#   two_cast, ~75 for fused_bf16).
source benchmarks/gpu_s5_env.sh
stamp "W8A8 fused activation quantization + bf16 epilogue (benchmarks/w8a8_decode_ab.py --fused)"
timeout -s INT 140 python3 benchmarks/w8a8_decode_ab.py --fused --out "$R/w8a8_fused.json" > "$R/w8a8_fused.log" 2>&1
echo "exit $?"
grep -E "FAILED|Error|error" "$R/w8a8_fused.log" | head -n 5
sed -n '/^bit checks: [0-9]* (shape/,$p' "$R/w8a8_fused.log"
stamp "done"
