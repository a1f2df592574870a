"""Compile the top-k kernels for sm_90 without a GPU and report registers, spills and SASS size.

    .venv/bin/python tests/kernels/topk/sm90_compile.py [--json] [--warps 16 32]

Issue 11 (session 5): the one-program legacy kernel took 23-43 us on the H200. This compiles the
rank path's two kernels (session 7: `_topk_bound_kernel` where the row needs S, `_topk_rank_kernel`)
with `rank_launch_params` at rows x C = 1x1024, 8x1024, 1x16384, 64x16384, 64x1024 (k = 512), and the
radix-select kernel at the decode shapes (C = 1024 and 16384 candidates, k = 512 and 64) with the
launch parameters `select_launch_params` picks (sort: one program per row; rank: P programs per
row), plus the legacy kernel for comparison, for GPUTarget("cuda", 90, 32) (Triton 3.9 compiles
for an explicit target, so this runs anywhere), then runs ptxas -v for registers and spills and
nvdisasm for the SASS: straight-line instruction count and the opcodes that cost latency
(BAR.SYNC, shuffles, shared-memory atomics of `tl.histogram`). TRITON_INTERPRET is forced off
here: run it as a script, never imported into a pytest process (the suite sets it on).
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/kernels: the shared sm90_report

import sm90_report as sm90  # before triton: it forces TRITON_INTERPRET off and a cold cache
import torch

from mxserve.kernels.topk import triton as launcher
from mxserve.kernels.topk._topk_bound_kernel import _topk_bound_kernel
from mxserve.kernels.topk._topk_kernel import _topk_kernel
from mxserve.kernels.topk._topk_rank_kernel import _topk_rank_kernel
from mxserve.kernels.topk._topk_select_kernel import _topk_select_kernel

TYPES = {"scores_ptr": "*fp32", "mask_ptr": "*fp32", "num_valid_ptr": "*i32", "out_ptr": "*i64",
         "scratch_ptr": "*i32", "head_ptr": "*i32", "sidx_ptr": "*i32", "skey_ptr": "*i32", "C": "i32", "k": "i32",
         "stride_s": "i32", "stride_m": "i32", "stride_o": "i32", "stride_w": "i32"}
OPCODES = ("BAR", "SHFL", "REDUX", "ATOMS", "VOTE", "LDS", "STS")


def _sass_report(cubin: bytes) -> dict:
    sass = sm90.disassemble(cubin)
    ops = re.findall(r"^\s+/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9.]*)", sass, flags=re.M)
    counts = Counter(op.split(".")[0] for op in ops)
    return {"sass": len(ops), **{op.lower(): counts[op] for op in OPCODES}}


def compile_report(label: str, kernel, consts: dict, num_warps: int) -> dict:
    divisible = {"C", "stride_s", "stride_o"}  # real launches: C and strides multiples of 16 (not stride_w)
    signature, attrs = sm90.signature(kernel, consts, TYPES, divisible=divisible, skip={"k"})
    compiled, compile_s = sm90.compile_sm90(kernel, signature, consts, attrs, num_warps=num_warps)
    report, cubin = sm90.ptxas_report(compiled.asm["ptx"])
    return {"kernel": label, "num_warps": num_warps, "compile_s": round(compile_s, 2),
            "smem_bytes": compiled.metadata.shared, **report, **_sass_report(cubin)}


def rank_reports() -> list[dict]:
    """The rank path at its launch shapes (132 SMs, as the H200)."""
    launcher._num_sms = lambda index: 132
    reports = []
    for rows, c in ((1, 1024), (8, 1024), (1, 16384), (64, 16384), (64, 1024)):
        lp = launcher.rank_launch_params(rows, c, 512, torch.device("cuda", 0))
        has = {"HAS_MASK": False, "HAS_NUM": True}
        if lp["bound"] is not None:
            bd = lp["bound"]
            consts = {name: bd[name] for name in ("BLOCK_C", "CAP", "CHUNK", "SAMPLE", "BACK", "EDGES", "FLOAT")} | has
            reports.append(compile_report(f"bound {rows}x{c} Q={bd['Q']}", _topk_bound_kernel, consts, bd["num_warps"]))
        rk = lp["rank"]
        consts = {name: rk[name] for name in ("BLOCK_C", "BLOCK_K", "CAP", "P", "FROM_S", "SCALAR_J", "MB", "JB")} | has
        reports.append(compile_report(f"rank {rows}x{c} P={rk['P']} MB={rk['MB']}{' scalar-j' if rk['SCALAR_J'] else ''}",
                                      _topk_rank_kernel, consts, rk["num_warps"]))
    return reports


def main() -> None:
    warps = [int(w) for w in sys.argv[sys.argv.index("--warps") + 1:] if w.isdigit()] if "--warps" in sys.argv else []
    reports = rank_reports()
    for c, k in ((1024, 512), (16384, 512), (16384, 64)):
        for p in (1, 16, 64):  # sort; rank at 8 rows; rank at 1 row (P from select_launch_params on 132 SMs)
            try:
                lp = launcher.select_launch_params(1, c, k, torch.device("cpu"), programs_per_row=p)
            except ValueError:  # slices under 16 members (k = 64: S holds 512): never launched
                continue
            consts = {name: lp[name] for name in ("BLOCK_C", "BLOCK_K", "CAP", "P", "RANK", "BJ")}
            consts |= {"HAS_MASK": False, "HAS_NUM": True}
            for nw in warps or [lp["num_warps"]]:
                reports.append(compile_report(f"select C={c} k={k} P={p}", _topk_select_kernel, consts, nw))
    for c in (1024, 16384):
        consts = {"HAS_MASK": False, "HAS_NUM": True, "BLOCK_C": c, "BLOCK_OUT": 512}
        reports.append(compile_report(f"legacy C={c} k=512", _topk_kernel, consts, max(1, min(16, c // 1024))))
    sm90.print_reports(reports)


if __name__ == "__main__":
    main()
