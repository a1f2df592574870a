"""Compile the hyper-connection kernels for sm_90 without a GPU and report time, registers, spills.

    .venv/bin/python tests/kernels/hyper_connection/sm90_compile.py [--json]

Shapes: DeepSeek-V4-Flash (hc 4, D 4096: K = 16384, 24 mixes; the head's 4) and the packaged
default model (hc 4, D 256), BF16 streams, with exactly the constexprs the launchers pass
(`launch_constexprs`) and their fp-fusion setting. Triton compiles for a target given explicitly
(GPUTarget("cuda", 90, 32): sm_90, warp size 32), so this runs anywhere; ptxas (bundled with
Triton, the one Triton itself uses for sm_90) is run again with -v on the PTX for the register
and spill report. TRITON_INTERPRET is forced off here: run it as a script or in a subprocess,
never imported into a pytest process (the suite sets it on).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "0"
os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="sm90_compile_")  # a cold compile every run
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton 3.9's warning; the options below say it anyway

import triton
from triton.backends.compiler import GPUTarget

from mxserve.kernels.hyper_connection import triton as hc_triton
from mxserve.kernels.hyper_connection._hc_kernel import (
    _hc_finish_kernel,
    _hc_mix_kernel,
    _hc_post_kernel,
    _hc_sumsq_kernel,
)

SHAPES = {"flash": 4096, "default": 256}  # name: D (hc 4 both)
HC = 4
EPS = 1e-6
ARG_TYPES = {  # runtime arguments by name; everything else in a signature is a constexpr
    "x_ptr": "*bf16", "sumsq_ptr": "*fp64", "fn_ptr": "*fp32", "mix_ptr": "*fp64", "base_ptr": "*fp32",
    "scale_ptr": "*fp32", "out_ptr": "*bf16", "post_ptr": "*fp32", "comb_ptr": "*fp32", "f_ptr": "*bf16",
    "T": "i32", "K": "i32", "N": "i32", "D": "i32", "iters": "i32",
    "stride_xt": "i32", "stride_xh": "i32", "stride_fn": "i32", "stride_ot": "i32", "stride_oh": "i32",
    "stride_ft": "i32",
}
PTXAS = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas-blackwell"  # Triton's for sm_90


def _ptxas_report(ptx: str) -> dict:
    """Registers, spill bytes and stack of the kernel's entry function, from ptxas -v."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "k.ptx"
        path.write_text(ptx)
        out = subprocess.run([str(PTXAS), "-v", "--gpu-name=sm_90a", str(path), "-o", str(path.with_suffix(".o"))],
                             capture_output=True, text=True, check=True).stderr
    entry = out.split("Compiling entry function", 1)[1]  # skip the libdevice helpers' reports
    spills = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", entry)
    regs = re.search(r"Used (\d+) registers", entry)
    return {"n_regs": int(regs.group(1)), "stack_bytes": int(spills.group(1)),
            "spill_store_bytes": int(spills.group(2)), "spill_load_bytes": int(spills.group(3))}


def _cases(dim: int) -> list[tuple[str, str, object, dict]]:
    """(label, launcher's kernel name, kernel, constexprs) as the launchers launch them at hidden size `dim`."""
    block = hc_triton.launch_constexprs(HC, dim, (2 + HC) * HC, interpreter=False)
    head = hc_triton.launch_constexprs(HC, dim, HC, interpreter=False)
    return [
        ("sumsq", "sumsq", _hc_sumsq_kernel, block["sumsq"]),
        ("mix (24 mixes)", "mix", _hc_mix_kernel, {**block["mix"], "RMS_EPS": EPS, "USE_LIBDEVICE": True}),
        ("mix (head, 4)", "mix", _hc_mix_kernel, {**head["mix"], "RMS_EPS": EPS, "USE_LIBDEVICE": True}),
        ("finish (hc_pre)", "finish", _hc_finish_kernel, {**block["finish"], "HC_EPS": EPS, "WITH_POST": True,
                                                          "OUT_BF16": True, "USE_LIBDEVICE": True}),
        ("finish (hc_head)", "finish", _hc_finish_kernel, {**head["finish"], "HC_EPS": EPS, "WITH_POST": False,
                                                           "OUT_BF16": True, "USE_LIBDEVICE": True}),
        ("hc_post", "post", _hc_post_kernel, {**block["post"], "OUT_BF16": True}),
    ]


def compile_report(label: str, name: str, kernel, consts: dict, shape: str) -> dict:
    signature = {arg: "constexpr" if arg in consts else ARG_TYPES[arg] for arg in kernel.arg_names}
    start = time.perf_counter()
    compiled = triton.compile(triton.compiler.ASTSource(fn=kernel, signature=signature, constexprs=consts),
                              target=GPUTarget("cuda", 90, 32),
                              options={"num_warps": hc_triton.NUM_WARPS[name],
                                       "enable_fp_fusion": hc_triton.FP_FUSION[name]})
    compile_s = time.perf_counter() - start
    ptx = compiled.asm["ptx"]
    return {"kernel": label, "shape": shape, "num_warps": hc_triton.NUM_WARPS[name], "compile_s": round(compile_s, 2),
            "ptx_lines": ptx.count("\n"), "bar_sync": ptx.count("bar.sync"), **_ptxas_report(ptx)}


def main() -> None:
    reports = [compile_report(label, name, kernel, consts, shape)
               for shape, dim in SHAPES.items() for label, name, kernel, consts in _cases(dim)]
    if "--json" in sys.argv:
        print(json.dumps(reports))
        return
    for r in reports:
        print(" ".join(f"{k}={v}" for k, v in r.items()))


if __name__ == "__main__":
    main()
