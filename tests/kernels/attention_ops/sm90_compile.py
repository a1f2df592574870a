"""Compile the compressor-emit kernels for sm_90 without a GPU and report time, registers, spills.

    .venv/bin/python tests/kernels/attention_ops/sm90_compile.py [--json]

Issue 11: at HCA's Flash shape (R = 128 rows x 512 channels) the one-program-per-token emit
kernel took minutes to compile on the H200 host and spilled. Triton 3.9 compiles for a target
given explicitly, so this runs anywhere; ptxas (bundled with Triton, the one Triton itself uses
for sm_90) is run again with -v on the PTX for the register and spill report. Shapes are the
DeepSeek-V4 Flash ones (d = 512, rope 64, fp8_ds_mla entries, BF16 stream), with the launch
parameters `compressor_emit_triton` picks. TRITON_INTERPRET is forced off here: run it as a
script or in a subprocess, never imported into a pytest process (the suite sets it on).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/kernels: the shared sm90_report

import sm90_report as sm90  # before triton: it forces TRITON_INTERPRET off and a cold cache
import triton

from mxserve.formats.ds_mla_entry import DS_MLA_DATA_BYTES, DS_MLA_SCALE_BYTES
from mxserve.kernels.attention_ops import triton_ops
from mxserve.kernels.attention_ops._compressor_pool_kernel import _compressor_pool_kernel
from mxserve.kernels.attention_ops._norm_rope_kernels import _kv_insert_kernel

HEAD_DIM, ROPE_PAIRS = 512, 32
SHAPES = {"hca": (128, False), "csa": (4, True)}  # name: (ratio, overlap)
ARG_TYPES = {  # runtime arguments by name; everything else in a signature is a constexpr
    "state_ptr": "*fp32", "row_slots_ptr": "*i64", "entry_slot_ptr": "*i64", "pooled_ptr": "*fp32",
    "state_block_size": "i32", "state_row_stride_words": "i32", "state_page_words": "i32",
    "x_ptr": "*fp32", "w_ptr": "*fp32", "pos_ptr": "*i64", "slot_ptr": "*i64", "inv_freq_ptr": "*fp32",
    "buf": "*u8", "block_size": "i32", "stride": "i32", "stride_xt": "i32", "eps": "fp32",
}


def _constexprs(kernel_name: str, ratio: int, overlap: bool) -> dict:
    rows_r = (2 if overlap else 1) * ratio
    if kernel_name == "pool":
        return dict(R=rows_r, M=ratio, OVERLAP=overlap, WIDTH=(2 if overlap else 1) * HEAD_DIM, HEAD_DIM=HEAD_DIM,
                    CHUNK_R=min(triton.next_power_of_2(rows_r), triton_ops.POOL_CHUNK_ROWS),
                    BLOCK_C=min(HEAD_DIM, triton_ops.POOL_BLOCK_C), ROUND_BF16=True)
    return dict(HEAD_DIM=HEAD_DIM, BLOCK_P=HEAD_DIM // 2, ROPE_PAIRS=ROPE_PAIRS, OUT_BF16=True, MODE=0,
                DATA_BYTES=DS_MLA_DATA_BYTES, SCALE_BYTES=DS_MLA_SCALE_BYTES)


def compile_report(kernel_name: str, shape: str) -> dict:
    kernel = {"pool": _compressor_pool_kernel, "insert": _kv_insert_kernel}[kernel_name]
    consts = _constexprs(kernel_name, *SHAPES[shape])
    signature, _ = sm90.signature(kernel, consts, ARG_TYPES)
    compiled, compile_s = sm90.compile_sm90(kernel, signature, consts, num_warps=4, enable_fp_fusion=False)
    return {"kernel": kernel.__name__, "shape": shape, "compile_s": round(compile_s, 2),
            "ptx_lines": compiled.asm["ptx"].count("\n"), **sm90.ptxas_report(compiled.asm["ptx"])[0]}


def main() -> None:
    # the insert kernel does not depend on R: compiled once (it is the window-KV kernel)
    reports = [compile_report("pool", "hca"), compile_report("pool", "csa"), compile_report("insert", "hca")]
    sm90.print_reports(reports)


if __name__ == "__main__":
    main()
