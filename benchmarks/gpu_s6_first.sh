#!/usr/bin/env bash
# Ready for the next session's first H200 call (not run in session 5: its device time was spent):
# issue 11's random Flash-shaped 4-layer greedy parity (benchmarks/flash_parity.py, built in
# session 5 and smoke-tested on the CPU at tiny-all size) in both numerics, and the default model's
# 64-row decode step profiled (the b64 e2e ratio is 3-5x against a 50x target).
#   run(command="bash benchmarks/gpu_s6_first.sh", carry=[".tc", ".whl"])
source benchmarks/gpu_s5_env.sh
ALL=${KERNELS:-linear=triton,moe=triton,attention=triton,hc=triton}

for numerics in exact faithful; do
    stamp "A: Flash-shaped 4-layer greedy parity, $numerics numerics"
    timeout -s INT 240 python3 benchmarks/flash_parity.py --layers 4 --prompts 4 --num-new 256 --kernels $ALL \
        --numerics $numerics --out "$R/flash_parity_$numerics.json" > "$R/flash_parity_$numerics.log" 2>&1
    echo "exit $?"; tail -n 6 "$R/flash_parity_$numerics.log" | cut -c1-300
done

stamp "B: default model decode profile at 64 rows"
timeout -s INT 90 python3 benchmarks/profile_decode.py --what default --default-batch 64 --kernels $ALL --top 16 \
    --out "$R/profile_b64.json" > "$R/profile_b64.log" 2>&1
grep -E "^\[|all kernels" "$R/profile_b64.log" | cut -c1-160 | head -n 6

stamp "done"
gpu_s5_pack
