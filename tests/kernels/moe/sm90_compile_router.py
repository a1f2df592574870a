"""Compile the MoE router kernels for sm_90 without a GPU and report time, registers, spills, SASS mix.

    .venv/bin/python tests/kernels/moe/sm90_compile_router.py [--json]

Shapes are the DeepSeek-V4-Flash router's (E = 256 experts, D = 4096, bf16 x and gate, top-6) with
the launch parameters `router.py` picks. The arguments carry the 16-divisibility that the JIT
would specialize on at that shape (pointers, E, D, the strides; T is never specialized), so the
loads vectorize as they will on the device. Triton compiles for a target given explicitly, so this
runs anywhere; ptxas (bundled with Triton) is run again with -v for the register and spill report,
and cuobjdump counts the instructions that set the kernel's cost: fp64 ops (DFMA/DMUL/DADD),
conversions to fp64 (F2F.F64), warp shuffles, barriers. TRITON_INTERPRET is forced off here: run it
as a script or in a subprocess, never imported into a pytest process (the suite sets it on); the
name does not start with test_, so pytest does not collect it.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/kernels: the shared sm90_report

import sm90_report as sm90  # before triton: it forces TRITON_INTERPRET off and a cold cache
import triton

from mxserve.kernels.moe import router
from mxserve.kernels.moe._router_kernel import (
    _gate_logits_kernel,
    _gate_partials_kernel,
    _route_select_kernel,
)

E, D, TOP_K = 256, 4096, 6
ARG_TYPES = {  # runtime arguments by name; everything else in a signature is a constexpr
    "x_ptr": "*bf16", "w_ptr": "*bf16", "part_ptr": "*fp64", "out_ptr": "*fp32", "bias_ptr": "*fp32",
    "tid2eid_ptr": "*i64", "token_ids_ptr": "*i64", "scaling_ptr": "*fp64", "weights_ptr": "*fp32",
    "ids_ptr": "*i64", "T": "i32", "E": "i32", "D": "i32", "stride_xt": "i32", "stride_we": "i32",
    "stride_ot": "i32", "stride_h": "i32",
}
DIVISIBLE_BY_16 = {"E", "D", "stride_xt", "stride_we", "stride_ot"}  # at the Flash shape (stride_h = k = 6 is not)


def _cases() -> list[tuple[str, object, dict, int]]:
    """(name, kernel, constexprs, num_warps) as `router.py` launches them at the Flash shape."""
    splits = router.num_splits(D)
    select = dict(NUM_SPLITS=splits, TOP_K=TOP_K, BLOCK_T=1, BLOCK_E=triton.next_power_of_2(E),
                  KPAD=triton.next_power_of_2(TOP_K), USE_LIBDEVICE=True)
    select_warps = router.select_num_warps(E)
    return [
        ("gate_partials", _gate_partials_kernel,
         dict(BLOCK_T=router.GATE_BLOCK_T, BLOCK_E=router.GATE_BLOCK_E, BLOCK_D=router.GATE_BLOCK_D,
              SUB_BLOCKS=router.GATE_SUB_BLOCKS), router.GATE_NUM_WARPS),
        ("gate_logits", _gate_logits_kernel,
         dict(NUM_SPLITS=splits, BLOCK_T=router.LOGITS_BLOCK_T, BLOCK_E=router.LOGITS_BLOCK_E), 4),
        ("select_learned", _route_select_kernel, dict(select, HASH=False), select_warps),
        ("select_hash", _route_select_kernel, dict(select, HASH=True), select_warps),
    ]


def _ptxas_report(ptx: str) -> dict:
    """Registers, spill bytes and stack of the kernel's entry function (ptxas -v), and its SASS mix."""
    report, cubin = sm90.ptxas_report(ptx)
    sass = sm90.disassemble(cubin, "cuobjdump", "-sass")
    ops = Counter(m.split(".")[0] if not m.startswith("F2F.F64") else "F2F.F64"
                  for m in re.findall(r"^\s+/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", sass, re.M))
    return {**report, "sass": sum(ops.values()), "fp64_ops": ops["DFMA"] + ops["DMUL"] + ops["DADD"],
            "f2f_f64": ops["F2F.F64"], "shfl": ops["SHFL"], "bar": ops["BAR"], "ldg": ops["LDG"]}


def compile_report(name: str, kernel, consts: dict, num_warps: int) -> dict:
    signature, attrs = sm90.signature(kernel, consts, ARG_TYPES, divisible=DIVISIBLE_BY_16)
    compiled, compile_s = sm90.compile_sm90(kernel, signature, consts, attrs, num_warps=num_warps)
    return {"kernel": name, "triton": triton.__version__, "num_warps": num_warps, "compile_s": round(compile_s, 2),
            **_ptxas_report(compiled.asm["ptx"])}


def main() -> None:
    reports = [compile_report(*case) for case in _cases()]
    sm90.print_reports(reports)


if __name__ == "__main__":
    main()
