"""Compile the hyper-connection kernels for sm_90 without a GPU and report time, registers, spills.

    .venv/bin/python tests/kernels/hyper_connection/sm90_compile.py [--json]

Shapes: DeepSeek-V4-Flash (hc 4, D 4096: K = 16384, 24 mixes; the head's 4) and the packaged
default model (hc 4, D 256), BF16 streams, with exactly the constexprs the launchers pass
(`launch_constexprs`, the session-7 kernels; also the post/comb launch of the side stream) and their
fp-fusion setting; `divisions` counts the fp64 reciprocal seeds (MUFU.RCP64H) in the SASS. Triton
compiles for a target given explicitly
(GPUTarget("cuda", 90, 32): sm_90, warp size 32), so this runs anywhere; ptxas (bundled with
Triton, the one Triton itself uses for sm_90) is run again with -v on the PTX for the register
and spill report. TRITON_INTERPRET is forced off here: run it as a script or in a subprocess,
never imported into a pytest process (the suite sets it on).
"""

from __future__ import annotations

import inspect
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/kernels: the shared sm90_report
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton 3.9's warning; the options below say it anyway

import sm90_report as sm90  # before triton: it forces TRITON_INTERPRET off and a cold cache

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
    "scale_ptr": "*fp32", "out_ptr": "*bf16", "post_ptr": "*fp32", "comb_ptr": "*fp32", "f_ptr": "*bf16", "a_ptr": "*fp32",
    "norm_w_ptr": "*fp32", "T": "i32", "K": "i32", "N": "i32", "D": "i32", "iters": "i32",
    "stride_xt": "i32", "stride_xh": "i32", "stride_fn": "i32", "stride_ot": "i32", "stride_oh": "i32",
    "stride_ft": "i32", "stride_at": "i32",
}


def _cases(dim: int) -> list[tuple[str, str, object, dict]]:
    """(label, launcher's kernel name, kernel, constexprs) as the launchers launch them at hidden size `dim`."""
    block = hc_triton.launch_constexprs(HC, dim, (2 + HC) * HC, interpreter=False)
    head = hc_triton.launch_constexprs(HC, dim, HC, interpreter=False)
    return [
        ("sumsq", "sumsq", _hc_sumsq_kernel, block["sumsq"]),
        ("mix (24 mixes)", "mix", _hc_mix_kernel, {**block["mix"], "RMS_EPS": EPS, "USE_LIBDEVICE": True}),
        ("mix (head, 4)", "mix", _hc_mix_kernel, {**head["mix"], "RMS_EPS": EPS, "USE_LIBDEVICE": True}),
        ("finish (hc_pre)", "finish", _hc_finish_kernel, {**block["finish"], "HC_EPS": EPS, "WITH_POST": True,
                                                          "OUT_BF16": True, "USE_LIBDEVICE": True, "PART": 0}),
        ("finish (post/comb launch)", "finish", _hc_finish_kernel, {**block["finish"], "HC_EPS": EPS, "WITH_POST": True,
                                                                    "OUT_BF16": True, "USE_LIBDEVICE": True, "PART": 2}),
        ("finish (hc_head)", "finish", _hc_finish_kernel, {**head["finish"], "HC_EPS": EPS, "WITH_POST": False,
                                                           "OUT_BF16": True, "USE_LIBDEVICE": True, "PART": 0}),
        ("hc_post", "post", _hc_post_kernel, {**block["post"], "OUT_BF16": True, "HAS_ADDEND": False}),
        ("hc_post (+ addend)", "post", _hc_post_kernel, {**block["post"], "OUT_BF16": True, "HAS_ADDEND": True}),
        *_fused_cases(dim, block),
    ]


def _fused_cases(dim: int, block: dict) -> list[tuple[str, str, object, dict]]:
    """MXSERVE_HC_FUSED=1's kernels where the shape takes them (triton.py): the mix with its own
    sums of squares (few K-splits) and the finish with the block norm (one D-block)."""
    cases = []
    if block["mix"]["NUM_SPLITS"] <= hc_triton.FUSED_SUMSQ_MAX_SPLITS:
        cases.append(("mix (fused sums of squares)", "mix", _hc_mix_kernel,
                      {**block["mix"], "RMS_EPS": EPS, "USE_LIBDEVICE": True, "FUSED_SUMSQ": True,
                       "SUMSQ_BLOCK_K": hc_triton.SUMSQ_BLOCK_K}))
    if hc_triton.norm_fits(dim):
        cases.append(("finish (hc_pre + norm)", "finish", _hc_finish_kernel,
                      {**block["finish"], "HC_EPS": EPS, "WITH_POST": True, "OUT_BF16": True, "USE_LIBDEVICE": True,
                       "PART": 0, "NORM": True, "NORM_EPS": EPS}))
    return cases


def _with_defaults(kernel, consts: dict) -> dict:
    """`consts` plus the kernel's defaulted constexprs a launch leaves out (the fused options: off)."""
    return {**{p.name: p.default for p in kernel.params if p.is_constexpr and p.name not in consts
               and p.default is not inspect.Parameter.empty}, **consts}


def compile_report(label: str, name: str, kernel, consts: dict, shape: str) -> dict:
    consts = _with_defaults(kernel, consts)
    signature, _ = sm90.signature(kernel, consts, ARG_TYPES)
    compiled, compile_s = sm90.compile_sm90(kernel, signature, consts, num_warps=hc_triton.NUM_WARPS[name],
                                            enable_fp_fusion=hc_triton.FP_FUSION[name])
    ptx = compiled.asm["ptx"]
    report, cubin = sm90.ptxas_report(ptx)
    return {"kernel": label, "shape": shape, "num_warps": hc_triton.NUM_WARPS[name], "compile_s": round(compile_s, 2),
            "ptx_lines": ptx.count("\n"), "bar_sync": ptx.count("bar.sync"),
            "divisions": sm90.disassemble(cubin).count("MUFU.RCP64H"), **report}


def main() -> None:
    reports = [compile_report(label, name, kernel, consts, shape)
               for shape, dim in SHAPES.items() for label, name, kernel, consts in _cases(dim)]
    sm90.print_reports(reports)


if __name__ == "__main__":
    main()
