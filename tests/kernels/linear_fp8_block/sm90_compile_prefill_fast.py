"""Compile the opt-in fast prefill tile (`_prefill_fast_kernel`) for sm_90 without a GPU:
registers, spills, shared memory, programs per SM, and the wgmma of its K loop.

    .venv/bin/python tests/kernels/linear_fp8_block/sm90_compile_prefill_fast.py [--dump DIR]

Same method as `sm90_compile.py` (its `compile_tile`, imported as a sibling module: run it
as a script, never from pytest): Triton 3.9 here, the device runs 3.6, so the counts are
indicative. wgmma shows as HGMMA (bf16) / QGMMA (e4m3) in the SASS; HMMA only would be the slow
mma.sync path. One K-loop trip is one BLOCK_K step of a BLOCK_N x BLOCK_M tile.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from sm90_compile import KEY_OPS, compile_tile  # the sibling script; it imports the shared sm90_report

from mxserve.kernels.linear_fp8_block._prefill_fast_kernel import _prefill_fast_kernel
from mxserve.kernels.linear_fp8_block.triton import PREFILL_FAST_CONFIGS

POINTERS = {"xs_ptr": "*fp32", "w_ptr": "*fp8e4nv", "ws_ptr": "*u8", "out_ptr": "*fp32"}
DIVISIBLE = {"N", "K", "stride_xm", "stride_wn", "stride_om"}


def compile_report(w8a8: bool, cfg: tuple, dump: Path | None = None) -> dict:
    block_n, block_m, block_k, warps, stages = cfg
    consts = dict(BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=16, EVEN_K=True, W8A8=w8a8, DOT=2)
    tag = f"{'w8a8' if w8a8 else 'wo_bf16x'}-{block_n}x{block_m}x{block_k}-w{warps}s{stages}"
    types = {**POINTERS, "x_ptr": "*fp8e4nv" if w8a8 else "*bf16"}
    compiled, report, sass, loop, counts = compile_tile(_prefill_fast_kernel, consts, types, DIVISIBLE, warps,
                                                        stages, tag, dump)
    smem = compiled.metadata.shared
    by_regs = 65536 // (-(-report["n_regs"] // 8) * 8 * 32 * warps)
    by_smem = (228 * 1024) // (smem + 1024)
    return {"kernel": tag, **report, "smem_bytes": smem, "fits_227KB": smem <= 227 * 1024,
            "programs_per_sm": min(by_regs, by_smem), "k_loop_instr": len(loop),
            "k_loop_ops": {op: counts[op] for op in KEY_OPS if counts[op]},
            "mma_in_kernel": {op: len(re.findall(rf"\b{op}\.", sass)) for op in ("HGMMA", "QGMMA", "HMMA")}}


def main() -> None:
    dump = Path(sys.argv[sys.argv.index("--dump") + 1]) if "--dump" in sys.argv else None
    for w8a8 in (True, False):
        for cfg in PREFILL_FAST_CONFIGS["w8a8" if w8a8 else "wo"]:
            r = compile_report(w8a8, cfg, dump)
            print(" ".join(f"{k}={v}" for k, v in r.items()), flush=True)


if __name__ == "__main__":
    main()
