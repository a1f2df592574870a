#!/usr/bin/env bash
# Issue 15 in one device call on nvidia-h200-x2 (<= 10 min; NOT RUN YET: no multi-GPU machine was lent):
#   run(command="bash benchmarks/gpu_tp_session.sh", kind="nvidia-h200-x2", timeout_s=600)
# (a) tests/distributed/gpu_tp_check.py: NCCL TP=2 (and TP=2+EP) logits/greedy tokens vs one process,
#     reference and all-Triton kernels, then TP=2 vs one process through LLMEngine, which also reports
#     that decode runs eager under TP (no CUDA-graph path there) with the runner's reasons.
# (b) benchmarks/tp_flash.py: full-size random Flash written to local storage, loaded at TP=2 through
#     the engine; load time, bytes per GPU, KV capacity, decode b1/8/64 at 4K, prefill 8K.
# Each part runs under its own time limit; results land in $OUT as they are produced (a part cut
# short still leaves its JSON). Knobs (environment): TP_CHECK_S (default 170), TP_FLASH_S (rest of
# 570 s), TP_CKPT_DIR (default: the first of /dev/shm, /tmp, $PWD with room; else /dev/shm grown,
# TP_SHM_GROW=0 to skip), TP_KERNELS,
# LAYERS_JSON (a `mxserve bench layers` JSON to compare with), SKIP_CHECK=1 (only part b: for a
# second call made while the machine is still warm, which reuses the checkpoint part b wrote).
set -uo pipefail
# NVLink multicast off in every process started from here (device rules: KINDS.md).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src TRITON_CACHE_DIR=/tmp/triton_cache
OUT=${OUT:-/tmp/gpu_tp_out}; mkdir -p "$OUT"
T0=$(date +%s)
stamp() { echo; echo "=== $1 ($(date -u +%H:%M:%S), +$(( $(date +%s) - T0 )) s)"; }

stamp "machine"
nvidia-smi --query-gpu=index,name,memory.total,memory.used --format=csv,noheader
nvidia-smi topo -m 2>/dev/null | head -n 4
df -h / /tmp /dev/shm 2>/dev/null
free -g | head -n 2
GPUS=$(python3 -c 'import torch; print(torch.cuda.device_count())')
echo "torch sees $GPUS GPU(s); env NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE TORCH_SYMM_MEM_DISABLE_MULTICAST=$TORCH_SYMM_MEM_DISABLE_MULTICAST NVSHMEM_DISABLE_NVLS=$NVSHMEM_DISABLE_NVLS"
if [ "${GPUS:-0}" -lt 2 ]; then echo "refused: issue 15 needs 2 GPUs; torch sees ${GPUS:-0}"; exit 2; fi

if [ "${SKIP_CHECK:-0}" != 1 ]; then
    stamp "(a) NCCL TP=2 correctness (limit ${TP_CHECK_S:-170} s)"
    timeout -s INT "${TP_CHECK_S:-170}" python3 tests/distributed/gpu_tp_check.py > "$OUT/tp_check.log" 2>&1
    echo "exit $?"
    grep -E "^(case| *TP=|1 proc|engine)|^\{'case': 'engine" "$OUT/tp_check.log" | cut -c1-400 | tail -n 20
fi

# Where the ~160 GB checkpoint goes: the first candidate with room (tp_flash.py checks again and
# refuses with one line when none has; x2's 128 GiB disk cannot hold it, /dev/shm may).
NEED_GB=$(python3 - <<'EOF'
import importlib.util, sys
spec = importlib.util.spec_from_file_location("tp_flash", "benchmarks/tp_flash.py")
m = importlib.util.module_from_spec(spec); sys.modules["tp_flash"] = m; spec.loader.exec_module(m)
print(int(m.checkpoint_nbytes(m.get_config("flash")) * m.DISK_MARGIN / 1e9) + 1)
EOF
)
CKPT=${TP_CKPT_DIR:-}
if [ -z "$CKPT" ]; then
    for base in /dev/shm /tmp "$PWD"; do
        free_gb=$(df -B1000000000 --output=avail "$base" 2>/dev/null | tail -n 1 | tr -d ' ')
        echo "candidate $base: ${free_gb:-?} GB free, need $NEED_GB GB"
        if [ -n "${free_gb:-}" ] && [ "$free_gb" -ge "$NEED_GB" ]; then CKPT=$base/flash-random; break; fi
    done
    # x2: 128 GiB of disk and (by default) a /dev/shm of half the 256 GiB memory; the checkpoint is
    # 149 GiB. As root, grow /dev/shm to 175 GiB (TP_SHM_GROW=0 to skip): 149 GiB of tmpfs + the ranks'
    # host-side column copies (~24 GB each at TP=2) stay under 256 GiB.
    if [ -z "$CKPT" ] && [ "${TP_SHM_GROW:-1}" = 1 ] && [ "$(id -u)" = 0 ]; then
        echo "no candidate has room: growing /dev/shm to 175G (TP_SHM_GROW=0 skips this)"
        mount -o remount,size=175G /dev/shm && df -h /dev/shm
        free_gb=$(df -B1000000000 --output=avail /dev/shm | tail -n 1 | tr -d ' ')
        if [ "${free_gb:-0}" -ge "$NEED_GB" ]; then CKPT=/dev/shm/flash-random; fi
    fi
    CKPT=${CKPT:-/tmp/flash-random}  # none has room: tp_flash.py refuses there, naming the sizes
fi

REM=$(( 570 - ($(date +%s) - T0) ))
LIMIT=${TP_FLASH_S:-$REM}
stamp "(b) full-size Flash at TP=2 in $CKPT (limit $LIMIT s)"
LAYERS_ARG=(); if [ -n "${LAYERS_JSON:-}" ]; then LAYERS_ARG=(--layers-json "$LAYERS_JSON"); fi
timeout -s INT "$LIMIT" python3 benchmarks/tp_flash.py --ckpt-dir "$CKPT" --tp 2 --device cuda \
    --kernels "${TP_KERNELS:-linear=triton,attention=triton,moe=reference}" --context 4096 --batches 1,8,64 \
    --prefill-tokens 8192 --decode-steps 16 --deadline $(( LIMIT > 120 ? LIMIT - 60 : LIMIT )) \
    "${LAYERS_ARG[@]}" --out "$OUT/tp_flash.json" > "$OUT/tp_flash.log" 2>&1
echo "exit $?"
grep -vE "^\s*$|it/s\]|tensor/s\]" "$OUT/tp_flash.log" | cut -c1-300 | tail -n 40
nvidia-smi --query-gpu=index,memory.used --format=csv,noheader
stamp "done"
ls -la "$OUT"
