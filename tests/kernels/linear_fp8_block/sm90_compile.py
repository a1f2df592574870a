"""Compile the block-scaled FP8 decode kernel for sm_90 without a GPU: registers, shared memory,
occupancy, and the SASS of the K loop (instructions per weight byte).

    .venv/bin/python tests/kernels/linear_fp8_block/sm90_compile.py [--json] [--dump DIR]

Issue 9: the weight-only decode streams at 1.7-3.0 TB/s where the W8A8 variant of the same tile
reaches 2.4-4.0. Triton 3.9 compiles for an explicit GPUTarget, so this runs anywhere; ptxas
(bundled with Triton: the one it uses for sm_90) gives registers and spills, nvdisasm the SASS.
Occupancy is what the H200 allows per SM: 64K registers (allocated per warp in units of 8 per
thread), 228 KB of shared memory (1 KB reserved per program), at most 32 programs. The K loop is
the innermost backward branch around the (H|Q)GMMAs; one trip is one 128-K block, BLOCK_N x 128 weight
bytes, so warp instructions per byte = trip instructions x warps / (BLOCK_N x 128). At the H200's
~1.98 GHz x 4 issue slots x 132 SMs, 4.2 TB/s leaves ~0.25 warp instructions per byte at full issue.
The device runs Triton 3.6: the PTX here is 3.9's, so counts are indicative, not the device's.
TRITON_INTERPRET is forced off: run it as a script, never imported into a pytest process.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/kernels: the shared sm90_report

import sm90_report as sm90  # before triton: it forces TRITON_INTERPRET off and a cold cache

from mxserve.kernels.linear_fp8_block._linear_fp8_block_kernel import _blockdot_kernel

POINTERS = {"xs_ptr": "*fp32", "w_ptr": "*u8", "ws_ptr": "*u8", "lut_ptr": "*u8", "out_ptr": "*fp32",
            "sum_ptr": "*fp32", "cnt_ptr": "*i32"}
DIVISIBLE = {"N", "K", "stride_xm", "stride_xg", "stride_wn", "stride_om"}  # multiples of 16 at the release shapes
MODES = {  # name: (x pointer type, constexprs); weight-only bf16 x is the decode default
    "wo_bf16x": ("*bf16", dict(X_MODE=0, X_PIECES=1, DOT=1, W_KIND=0)),
    "wo_fp32x": ("*fp32", dict(X_MODE=0, X_PIECES=2, DOT=1, W_KIND=0)),
    "w8a8": ("*u8", dict(X_MODE=1, X_PIECES=1, DOT=2, W_KIND=0)),
    "wo_prepared": ("*fp16", dict(X_MODE=3, X_PIECES=1, DOT=1, W_KIND=0)),  # the issue-9 experiment
    "w8a8_fused": ("*bf16", dict(X_MODE=4, X_PIECES=1, DOT=2, W_KIND=0)),  # session 6: x quantized in the program
}
LAUNCHES = {  # name: constexprs of the launch; "in_program" is the pre-issue-9 decode of a one-group layer
    "in_program": dict(SPLIT=False, FUSED_SUM=False),
    "split": dict(SPLIT=True, FUSED_SUM=False),
    "fused": dict(SPLIT=True, FUSED_SUM=True),
    # DecodeOptions (session 5): mask-free loads at the release shapes, and the early start
    "even_split": dict(SPLIT=True, FUSED_SUM=False, EVEN=True),
    "even_fused": dict(SPLIT=True, FUSED_SUM=True, EVEN=True),
    "even_fused_pdl": dict(SPLIT=True, FUSED_SUM=True, EVEN=True, PDL=True),
    # session 6, X_MODE 4 at M = 1: only the live row quantized (XQ_ROWS)
    "even_fused_1row": dict(SPLIT=True, FUSED_SUM=True, EVEN=True, XQ_ROWS=1),
}
LAUNCH_DEFAULTS = dict(EVEN=False, PDL=False, PDL_BLOCKS=4, XQ_ROWS=0)  # constexprs every launch passes (defaults in the kernel)
CONFIGS = [(64, 4, 4), (128, 4, 4), (64, 4, 6)]  # (BLOCK_N, warps, stages): triton.DECODE_CONFIGS
KEY_OPS = ("F2FP", "LDS", "LDSM", "STS", "SHFL", "HGMMA", "QGMMA", "BAR", "MEMBAR", "LDG", "LDGSTS", "FMUL", "FFMA",
           "FMNMX", "IMAD", "PRMT")


def compile_tile(kernel, consts: dict, types: dict, divisible: set, warps: int, stages: int, tag: str,
                 dump: Path | None) -> tuple:
    """(compiled, ptxas report, SASS, K-loop opcodes, their counts) of one tile: pointers and the ints
    in `divisible` 16-divisible, the other ints i32; PTX and SASS written to `dump` when given."""
    signature, attrs = sm90.signature(kernel, consts, types, default="i32", divisible=divisible)
    compiled, _ = sm90.compile_sm90(kernel, signature, consts, attrs, num_warps=warps, num_stages=stages)
    regs, cubin = sm90.ptxas_report(compiled.asm["ptx"])
    report = {"n_regs": regs["n_regs"], "spill_bytes": regs["spill_store_bytes"] + regs["spill_load_bytes"]}
    sass = sm90.disassemble(cubin, "nvdisasm", "-c")
    if dump is not None:
        dump.mkdir(parents=True, exist_ok=True)
        (dump / f"{tag}.ptx").write_text(compiled.asm["ptx"])
        (dump / f"{tag}.sass").write_text(sass)
    loop = sm90.mma_k_loop(sass)
    return compiled, report, sass, loop, Counter(op.split(".")[0] for op in loop)


def compile_report(mode: str, launch: str, block_n: int, warps: int, stages: int, dump: Path | None = None) -> dict:
    x_type, consts = MODES[mode]
    consts = dict(consts, **{**LAUNCH_DEFAULTS, **LAUNCHES[launch]}, BLOCK_M=16, BLOCK_N=block_n)
    tag = f"{mode}-{launch}-{block_n}x{warps}x{stages}"
    compiled, report, _, loop, counts = compile_tile(_blockdot_kernel, consts, {**POINTERS, "x_ptr": x_type},
                                                     DIVISIBLE, warps, stages, tag, dump)
    smem = compiled.metadata.shared
    threads = 32 * warps
    by_regs = 65536 // (-(-report["n_regs"] // 8) * 8 * threads)
    by_smem = (228 * 1024) // (smem + 1024)
    return {"kernel": tag, **report, "smem_bytes": smem, "programs_per_sm": min(by_regs, by_smem, 32, 64 // warps),
            "limited_by": "registers" if by_regs < by_smem else "shared memory",
            "k_loop_instr": len(loop), "warp_instr_per_byte": round(len(loop) * warps / (block_n * 128), 3),
            "cvt_e4m3x2_in_ptx": compiled.asm["ptx"].count("cvt.rn.f16x2.e4m3x2"),
            "k_loop_ops": {op: counts[op] for op in KEY_OPS if counts[op]}}


def main() -> None:
    dump = Path(sys.argv[sys.argv.index("--dump") + 1]) if "--dump" in sys.argv else None
    jobs = [(mode, launch, *CONFIGS[0]) for mode in MODES for launch in LAUNCHES
            if mode not in ("wo_prepared", "w8a8_fused") and launch != "even_fused_1row"]
    jobs += [("wo_prepared", launch, *CONFIGS[0]) for launch in ("split", "fused")]
    jobs += [("wo_bf16x", "fused", *cfg) for cfg in CONFIGS[1:]]
    jobs += [("wo_bf16x", "even_fused", 128, 8, 4), ("wo_prepared", "even_fused", *CONFIGS[0])]
    jobs += [("w8a8_fused", launch, *cfg) for launch in ("even_fused", "even_fused_1row") for cfg in CONFIGS[:2]]
    reports = [compile_report(*job, dump=dump) for job in jobs]
    sm90.print_reports(reports)


if __name__ == "__main__":
    main()
