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

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "0"
os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="sm90_compile_router_")  # a cold compile every run

import triton
from triton.backends.compiler import GPUTarget

from mxserve.kernels.moe import router
from mxserve.kernels.moe._router_kernel import (
    _gate_logits_kernel,
    _gate_partials_kernel,
    _route_select_kernel,
)

E, D, TOP_K = 256, 4096, 6
BIN = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
PTXAS = BIN / "ptxas-blackwell"  # Triton's ptxas for sm_90 (the plain one is older than Triton's PTX)
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
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "k.ptx"
        path.write_text(ptx)
        cubin = path.with_suffix(".cubin")
        out = subprocess.run([str(PTXAS), "-v", "--gpu-name=sm_90a", str(path), "-o", str(cubin)],
                             capture_output=True, text=True, check=True).stderr
        sass = subprocess.run([str(BIN / "cuobjdump"), "-sass", str(cubin)], capture_output=True, text=True,
                              check=True).stdout
    entry = out.split("Compiling entry function", 1)[1]  # skip the libdevice helpers' reports
    spills = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", entry)
    regs = re.search(r"Used (\d+) registers", entry)
    ops = Counter(m.split(".")[0] if not m.startswith("F2F.F64") else "F2F.F64"
                  for m in re.findall(r"^\s+/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", sass, re.M))
    return {"n_regs": int(regs.group(1)), "stack_bytes": int(spills.group(1)),
            "spill_store_bytes": int(spills.group(2)), "spill_load_bytes": int(spills.group(3)),
            "sass": sum(ops.values()), "fp64_ops": ops["DFMA"] + ops["DMUL"] + ops["DADD"],
            "f2f_f64": ops["F2F.F64"], "shfl": ops["SHFL"], "bar": ops["BAR"], "ldg": ops["LDG"]}


def compile_report(name: str, kernel, consts: dict, num_warps: int) -> dict:
    signature = {n: "constexpr" if n in consts else ARG_TYPES[n] for n in kernel.arg_names}
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(kernel.arg_names)
             if n not in consts and (ARG_TYPES[n].startswith("*") or n in DIVISIBLE_BY_16)}
    start = time.perf_counter()
    compiled = triton.compile(
        triton.compiler.ASTSource(fn=kernel, signature=signature, constexprs=consts, attrs=attrs),
        target=GPUTarget("cuda", 90, 32), options={"num_warps": num_warps})
    compile_s = time.perf_counter() - start
    return {"kernel": name, "triton": triton.__version__, "num_warps": num_warps, "compile_s": round(compile_s, 2),
            **_ptxas_report(compiled.asm["ptx"])}


def main() -> None:
    reports = [compile_report(*case) for case in _cases()]
    if "--json" in sys.argv:
        print(json.dumps(reports))
        return
    for r in reports:
        print(" ".join(f"{k}={v}" for k, v in r.items()))


if __name__ == "__main__":
    main()
