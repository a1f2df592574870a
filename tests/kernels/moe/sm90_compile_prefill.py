"""Compile the MoE prefill tiles for sm_90 without a GPU: the fused kernel (`_experts_kernel.py`,
"bf16-fused") and the prefill tile (`_experts_prefill_kernel.py`, "bf16-prefill") at Flash shapes.

    .venv/bin/python tests/kernels/moe/sm90_compile_prefill.py [--json] [--dump DIR] [--quick] [--mma-order]

Issue 10: the fused kernel ran the 4096-token Flash MoE at ~19 TFLOP/s on the H200. Per kernel and
launch config the report gives registers, spills, shared memory, programs per SM (64K registers,
228 KB shared memory), how many K-loop loads became cp.async and how many stay plain loads (each
waits a memory round trip per 128-K block), and the K loop's SASS per warp: instructions, HGMMAs,
and warp instructions per MMA FLOP of the program (`instr_per_kflop`, the decode's cost against the
tensor cores': at ~4096 bf16 FLOP per clock and 4 issue slots per SM, 1.0 warp instruction per
kFLOP is the balance point). Shapes: D 4096, I 2048, bf16 activations, faithful numerics,
16-divisible strides as the JIT specializes them. Triton here is 3.9, the device's 3.6: the counts
are indicative. TRITON_INTERPRET is forced off: run it as a script, never imported into pytest.
--mma-order: the shipped tiers (32 rows / 4 warps, 128 rows / 8 warps with 256-feature down programs)
in the old K order and in the MMA order (MXSERVE_MOE_MMA_ORDER). Triton 3.9 (session 7): the MMA order
has no STS/LDSM in the K loop (old: 32 + 32 in gate/up at 32 rows, 16 + 16 at 128), 848 / 497 / 500
K-loop instructions (old 896 / 519 / 522: gate/up 32, gate/up 128, down 256), shared memory 59 / 133
/ 133 KB (old 92 / 166 / 199), registers 233 / 254 / 255 (old 219 / 248 / 255; down 256 spills 284
bytes, old 252), the same programs per SM.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/kernels: the shared sm90_report

import sm90_report as sm90  # before triton: it forces TRITON_INTERPRET off and a cold cache
from sm90_compile_experts import kernel_report

from mxserve.kernels.moe._experts_kernel import _moe_down_kernel, _moe_gate_up_kernel
from mxserve.kernels.moe._experts_prefill_kernel import _moe_prefill_down_kernel, _moe_prefill_gate_up_kernel

TYPES = {"x_ptr": "*bf16", "xp_ptr": "*bf16", "xs_ptr": "*fp32", "h_ptr": "*bf16", "hs_ptr": "*fp32",
         "w1_ptr": "*u8", "w3_ptr": "*u8", "w2_ptr": "*u8", "w1s_ptr": "*u8", "w3s_ptr": "*u8", "w2s_ptr": "*u8",
         "sorted_ptr": "*i32", "block_expert_ptr": "*i32", "expert_start_ptr": "*i32", "expert_count_ptr": "*i32",
         "y_ptr": "*fp32", "route_w_ptr": "*fp32", "limit": "fp32"}
WORDS = {"w1s_ptr": "*i32", "w3s_ptr": "*i32", "w2s_ptr": "*i32"}  # the prefill tile reads scale words
DIVISIBLE = {"I", "D", "stride_x", "stride_xs", "stride_we", "stride_wn", "stride_wse", "stride_wsn", "stride_h",
             "stride_hs", "stride_y"}
KEY_OPS = ("LDG", "LDGSTS", "LDS", "LDSM", "STS", "HGMMA", "F2FP", "HMUL2", "PRMT", "LOP3", "IMAD", "BAR", "SHF")
FUSED = dict(W_FMT=0, DOT=1, X_FP8=False, X_PIECES=1)
KERNELS = {  # name: (kernel, constexprs, pointer types, MMA FLOP per K-loop trip per BLOCK_M row)
    "fused_gate_up": (_moe_gate_up_kernel, dict(FUSED, BLOCK_N=128, H_BF16=True, QUANT_H=True, H_CODES=False),
                      TYPES, 2 * 128 * 128),
    "fused_down": (_moe_down_kernel, dict(FUSED, BLOCK_N=128), TYPES, 2 * 128 * 128),
    "prefill_gate_up": (_moe_prefill_gate_up_kernel, dict(DOT=1, X_PIECES=1, USE_ASM=True, H_BF16=True, QUANT_H=True,
                                                          BLOCK_N=128, I=2048, D=4096), {**TYPES, **WORDS}, 2 * 2 * 128 * 128),
    "prefill_down": (_moe_prefill_down_kernel, dict(DOT=1, X_PIECES=1, USE_ASM=True, BLOCK_N=128, I=2048, D=4096),
                     {**TYPES, **WORDS}, 2 * 128 * 128),
}


def _wgmma_serialized(ptx: str) -> bool:
    """Whether ptxas serializes the wgmmas (its advisory C7515: it waits for each before the next; seen
    when K was a run-time value and the loop's zero-trip path fed the accumulators' zero init to the
    wait at the loop exit)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "k.ptx"
        path.write_text(ptx)
        out = subprocess.run([str(sm90.PTXAS), "-v", "--gpu-name=sm_90a", str(path), "-o", str(path.with_suffix(".o"))],
                             capture_output=True, text=True, check=True).stderr
    return "C7515" in out


def compile_report(name: str, block_m: int, warps: int, stages: int, dump: Path | None = None, **extra) -> dict:
    kernel, consts, types, flop_per_row = KERNELS[name]
    consts = {**consts, "BLOCK_M": block_m, **extra}
    signature, attrs = sm90.signature(kernel, consts, types, default="i32", divisible=DIVISIBLE)
    compiled, compile_s = sm90.compile_sm90(kernel, signature, consts, attrs, num_warps=warps, num_stages=stages)
    tag = f"{name}-m{block_m}w{warps}s{stages}" + "".join(f"{k}{v}" for k, v in extra.items())
    report = kernel_report(compiled, warps, tag, dump, KEY_OPS)
    kflop = flop_per_row * consts.get("BLOCK_N", 128) / 128 * block_m / 1000
    return {"kernel": tag, **report, "wgmma_serialized": _wgmma_serialized(compiled.asm["ptx"]),
            "instr_per_kflop": round(report["k_loop_instr"] * warps / kflop, 3), "compile_s": round(compile_s, 1)}


def main() -> None:
    dump = Path(sys.argv[sys.argv.index("--dump") + 1]) if "--dump" in sys.argv else None
    if "--mma-order" in sys.argv:
        reports = []
        for mma in (False, True):
            reports += [compile_report("prefill_gate_up", 32, 4, 3, dump, MMA_ORDER=mma),
                        compile_report("prefill_down", 32, 4, 3, dump, MMA_ORDER=mma),
                        compile_report("prefill_gate_up", 128, 8, 3, dump, MMA_ORDER=mma),
                        compile_report("prefill_down", 128, 8, 3, dump, BLOCK_N=256, MMA_ORDER=mma)]
        sm90.print_reports(reports)
        return
    reports = [compile_report("fused_gate_up", 64, 8, 3, dump), compile_report("fused_down", 64, 8, 3, dump)]
    configs = [(64, 8, 3), (128, 8, 3)] if "--quick" in sys.argv else [(32, 4, 3), (64, 4, 3), (64, 8, 3), (64, 8, 4),
                                                                        (128, 8, 2), (128, 8, 3)]
    for m, w, s in configs:
        reports += [compile_report("prefill_gate_up", m, w, s, dump), compile_report("prefill_down", m, w, s, dump)]
    sm90.print_reports(reports)


if __name__ == "__main__":
    main()
