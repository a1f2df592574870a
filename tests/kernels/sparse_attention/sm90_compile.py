"""Compile the sparse-attention kernels for sm_90 without a GPU and report time, registers, spills.

    .venv/bin/python tests/kernels/sparse_attention/sm90_compile.py [--json]

Issue 11: the one-program-per-token kernel was latency-bound at decode and spilled. Session 7 adds
the "halves" kernel (`_fold_kernel`) in its split and fold modes with the GPU's launch parameters. Triton 3.9
compiles for a target given explicitly, so this runs anywhere; ptxas (bundled with Triton) is
run again with -v on the PTX for the register and spill report, and nvdisasm counts the SASS
instructions. Shapes are DeepSeek-V4-Flash's (64 heads x 512, fp8_ds_mla entries in pages of 64
with the default stride), with the launch parameters `sparse_attention_triton` picks on a GPU
and the argument specializations a real launch gets (16-byte aligned pointers, sizes that are
multiples of 16 marked so, except the ones the kernels exclude with do_not_specialize).
TRITON_INTERPRET is forced off here: run it as a script or in a subprocess, never imported into
a pytest process (the suite sets it on; pytest collects only test_*.py).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/kernels: the shared sm90_report
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton 3.9 warns without it; 1 = its default

import sm90_report as sm90  # before triton: it forces TRITON_INTERPRET off and a cold cache

from mxserve.formats.ds_mla_entry import DS_MLA_DATA_BYTES, DS_MLA_SCALE_BYTES
from mxserve.kernels.attention_ops.cache_args import EntryMode
from mxserve.kernels.sparse_attention import triton as launcher
from mxserve.kernels.sparse_attention._fold_kernel import _sparse_attention_fold_kernel
from mxserve.kernels.sparse_attention._sparse_attention_kernel import (
    _sparse_attention_combine_kernel,
    _sparse_attention_kernel,
)

HEADS, HEAD_DIM, BLOCK_SIZE = 64, 512, 64
STRIDE = 37440  # default page stride for B = 64
# (name -> (type, value or None)): the value decides the multiple-of-16 specialization
ARGS = {
    "part_acc_ptr": ("*fp32", None), "part_ml_ptr": ("*fp32", None), "sink_ptr": ("*fp32", None),
    "out_ptr": ("*fp32", None), "buf0": ("*u8", None), "buf1": ("*u8", None), "slots0_ptr": ("*i64", None),
    "slots1_ptr": ("*i64", None), "num_keys0": ("i32", 128), "num_keys1": ("i32", 512), "stride_s0": ("i32", 128),
    "stride_s1": ("i32", 512), "block_size0": ("i32", BLOCK_SIZE), "block_size1": ("i32", BLOCK_SIZE),
    "page_stride0": ("i32", STRIDE), "page_stride1": ("i32", STRIDE), "num_chunks0": ("i32", 2),
    "num_chunks": ("i32", 10), "H": ("i32", HEADS), "scale": ("fp32", None), "stride_qt": ("i32", HEADS * HEAD_DIM),
    "stride_qh": ("i32", HEAD_DIM), "stride_ot": ("i32", HEADS * HEAD_DIM), "stride_oh": ("i32", HEAD_DIM),
}


def _ptxas_report(ptx: str, cubin: bytes) -> dict:
    """Registers, spill bytes and stack of the kernel's entry function (ptxas -v); SASS instructions
    (straight-line code: the partial kernel has no loop, so this is what each warp issues)."""
    report, _ = sm90.ptxas_report(ptx)
    sass = sm90.disassemble(cubin)  # Triton's own cubin
    return {**report,
            "sass_instructions": len(re.findall(r"^\s+/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?[A-Z]", sass, flags=re.M))}


def compile_report(label: str, kernel, consts: dict, q_type: str, num_warps: int) -> dict:
    dont = set(kernel.do_not_specialize) if hasattr(kernel, "do_not_specialize") else set()
    dont = {kernel.arg_names[i] if isinstance(i, int) else i for i in dont}
    types = {name: ty for name, (ty, _) in ARGS.items()} | {"q_ptr": "*" + q_type}
    divisible = {name for name, (_, value) in ARGS.items() if value is not None and value % 16 == 0}
    signature, attrs = sm90.signature(kernel, consts, types, divisible=divisible, skip=dont)
    compiled, compile_s = sm90.compile_sm90(kernel, signature, consts, attrs, num_warps=num_warps)
    return {"kernel": label, "num_warps": num_warps, "compile_s": round(compile_s, 2),
            "smem_bytes": compiled.metadata.shared, **_ptxas_report(compiled.asm["ptx"], compiled.asm["cubin"])}


def main() -> None:
    os.environ.pop(launcher.HALVES_ENV, None)  # the "pieces" kernels' parameters first (the default)
    lp = launcher.launch_params(EntryMode.DS_MLA, HEADS, HEAD_DIM)
    assert lp.dot == 1 and lp.kernel == "pieces", "launch_params gave the interpreter's or the halves parameters"
    reports = []
    for q_type, q_pieces in (("bf16", 1), ("fp32", 2)):
        consts = dict(MODE=int(EntryMode.DS_MLA), HEAD_DIM=HEAD_DIM, DATA_BYTES=DS_MLA_DATA_BYTES,
                      SCALE_BYTES=DS_MLA_SCALE_BYTES, BLOCK_H=lp.block_h, BLOCK_K=lp.block_k, PIECE=lp.piece,
                      DOT=lp.dot, Q_PIECES=q_pieces, ALIGNED=True, NATIVE_FP8=True)
        reports.append(compile_report(f"partial fp8_ds_mla q={q_type}", _sparse_attention_kernel, consts, q_type,
                                      lp.num_warps))
    consts["ALIGNED"] = False  # a page stride that is not a multiple of 16: byte loads
    reports.append(compile_report("partial fp8_ds_mla q=fp32 unaligned", _sparse_attention_kernel, consts, "fp32",
                                  lp.num_warps))
    few = launcher.launch_params(EntryMode.DS_MLA, 4, HEAD_DIM)  # the packaged default model's 4 heads
    consts = dict(MODE=int(EntryMode.DS_MLA), HEAD_DIM=HEAD_DIM, DATA_BYTES=DS_MLA_DATA_BYTES,
                  SCALE_BYTES=DS_MLA_SCALE_BYTES, BLOCK_H=few.block_h, BLOCK_K=few.block_k, PIECE=few.piece,
                  DOT=few.dot, Q_PIECES=1, ALIGNED=True, NATIVE_FP8=True)
    reports.append(compile_report("partial fp8_ds_mla q=bf16 4 heads", _sparse_attention_kernel, consts, "bf16",
                                  few.num_warps))
    fp32 = launcher.launch_params(EntryMode.FP32, HEADS, HEAD_DIM)
    consts = dict(MODE=int(EntryMode.FP32), HEAD_DIM=HEAD_DIM, DATA_BYTES=HEAD_DIM * 4, SCALE_BYTES=0,
                  BLOCK_H=fp32.block_h, BLOCK_K=fp32.block_k, PIECE=fp32.piece, DOT=fp32.dot, Q_PIECES=2,
                  ALIGNED=True, NATIVE_FP8=True)
    reports.append(compile_report("partial fp32 cache q=fp32", _sparse_attention_kernel, consts, "fp32",
                                  fp32.num_warps))
    os.environ[launcher.HALVES_ENV] = "1"  # the opt-in halves kernel
    halves = launcher.launch_params(EntryMode.DS_MLA, HEADS, HEAD_DIM)
    assert halves.kernel == "halves", "launch_params did not pick the halves kernel for Flash shapes"
    for fold, blocks in ((False, halves.split_ch_blocks), (True, halves.fold_ch_blocks)):
        for q_type, q_pieces in (("bf16", 1), ("fp32", 2)):
            consts = dict(DATA_BYTES=DS_MLA_DATA_BYTES, SCALE_BYTES=DS_MLA_SCALE_BYTES, BLOCK_H=halves.block_h,
                          BLOCK_K=halves.block_k, CH_BLOCKS=blocks, FOLD=fold,
                          STAGES=halves.fold_stages if fold else 1, DOT=halves.dot, Q_PIECES=q_pieces, ALIGNED=True,
                          NATIVE_FP8=True, PDL=halves.pdl and not fold)
            reports.append(compile_report(f"halves {'fold' if fold else 'split'} x{blocks} q={q_type}",
                                          _sparse_attention_fold_kernel, consts, q_type, halves.num_warps))
    consts = dict(HEAD_DIM=HEAD_DIM, BLOCK_H=launcher.COMBINE_BLOCK_H, BLOCK_D=launcher.COMBINE_BLOCK_D,
                  NUM_STAGES=launcher.COMBINE_NUM_STAGES, PDL=False)
    reports.append(compile_report("combine", _sparse_attention_combine_kernel, consts, "fp32",
                                  launcher.COMBINE_NUM_WARPS))
    reports.append(compile_report("combine PDL", _sparse_attention_combine_kernel, {**consts, "PDL": True}, "fp32",
                                  launcher.COMBINE_NUM_WARPS))
    sm90.print_reports(reports)


if __name__ == "__main__":
    main()
