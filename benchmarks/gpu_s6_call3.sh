#!/usr/bin/env bash
# Session 6 call 3: the helpers' A/Bs in one H200 call, most important first (each script prints
# its own table): the fused W8A8 decode + bf16 epilogue (now the default: its bit checks decide
# whether it stays on), the decode-step glue fusions (bit checks, graph gates, profile), the
# prefill/decode split of the default model at 1 and 64 requests, then the MoE prefill tile.
#   run(command="bash benchmarks/gpu_s6_call3.sh", carry=[".tc", ".whl"])
# The copy holds the helpers' uncommitted edits too: lay HEAD's src/ and tests/ over it first
# (.tc/head.tgz, `git archive HEAD src/mxserve tests` without the default model's weights).
[ -f .tc/head.tgz ] && tar -xzf .tc/head.tgz && echo "src/ and tests/ at HEAD $(cat .tc/head.rev 2>/dev/null)"
source benchmarks/gpu_s5_env.sh
for part in w8a8 glue; do
    stamp "call 3: gpu_s6_$part.sh"
    bash benchmarks/gpu_s6_$part.sh 2>&1 | grep -v "^Triton cache restored"
done
stamp "call 3: batch_split.py (default model, prefill step vs decode step)"
(cd benchmarks && timeout -s INT 100 python3 batch_split.py --batches 1,64 --decode-steps 64 --repeats 2 \
    --out "$R/batch_split.json" > "$R/batch_split.log" 2>&1; echo "exit $?"; tail -n 3 "$R/batch_split.log")
stamp "call 3: gpu_s6_moeprefill.sh"
bash benchmarks/gpu_s6_moeprefill.sh 2>&1 | grep -v "^Triton cache restored"
stamp "call 3 done"
gpu_s5_pack
