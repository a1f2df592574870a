"""Compile the MoE decode kernels (split and stream) for sm_90 without a GPU: registers, spills,
shared memory, occupancy, which K-loop loads Triton pipelines, and the K loop's SASS.

    .venv/bin/python tests/kernels/moe/sm90_compile_experts.py [--json] [--dump DIR] [--stages 3 4]

Issue 10: the split decode streamed at 1.1-1.2 TB/s. The report answers, per kernel and
num_stages: how many loads of the K loop became cp.async (`async_copies`, from the TTGIR) and how
many stay plain loads inside the loop (`sync_loads_in_loop`: each waits a memory round trip per
128-K block), the K-loop instruction count per weight byte (one trip = 64 x 128 weights = 4096
bytes of codes; at ~1.98 GHz x 4 issue slots x 132 SMs the H200 has ~0.25 warp instructions per
byte at 4.2 TB/s), and programs per SM (64K registers, 228 KB shared memory). Shapes: Flash
(D 4096, I 2048), bf16 activations, faithful numerics, 16-divisible strides as the JIT
specializes them. Triton here is 3.9, the device's 3.6: the counts are indicative.
TRITON_INTERPRET is forced off: run it as a script, never imported into a pytest process.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/kernels: the shared sm90_report

import sm90_report as sm90  # before triton: it forces TRITON_INTERPRET off and a cold cache

from mxserve.kernels.moe._experts_split_kernel import _moe_down_split_kernel, _moe_gate_up_split_kernel
from mxserve.kernels.moe._experts_stream_kernel import _moe_stream_down_kernel, _moe_stream_gate_up_kernel
from mxserve.kernels.moe._experts_stream_splitk_kernel import (
    _moe_splitk_down_kernel,
    _moe_splitk_gate_up_kernel,
)

TYPES = {"x_ptr": "*bf16", "xp_ptr": "*bf16", "h_ptr": "*bf16", "w1_ptr": "*u8", "w3_ptr": "*u8", "w2_ptr": "*u8",
         "w1s_ptr": "*u8", "w3s_ptr": "*u8", "w2s_ptr": "*u8", "sorted_ptr": "*i32", "block_expert_ptr": "*i32",
         "expert_start_ptr": "*i32", "expert_count_ptr": "*i32", "gu_ptr": "*fp32", "y_ptr": "*fp32",
         "out_ptr": "*fp32", "ids_ptr": "*i64", "route_w_ptr": "*fp32", "cnt_ptr": "*i32", "limit": "fp32"}
STREAM_SCALES = {"w1s_ptr": "*i32", "w3s_ptr": "*i32", "w2s_ptr": "*i32"}  # the int32 words
DIVISIBLE = {"I", "D", "stride_x", "stride_we", "stride_wn", "stride_wse", "stride_wsn", "stride_gu", "stride_h",
             "stride_y", "stride_o", "stride_gus", "stride_ys"}
COMMON = dict(BLOCK_M=16, BLOCK_N=64, DOT=1, X_PIECES=1, USE_ASM=True)
KERNELS = {  # name: (kernel, extra constexprs, pointer types)
    "split_gate_up": (_moe_gate_up_split_kernel, {}, TYPES),
    "split_down": (_moe_down_split_kernel, {}, TYPES),
    "stream_gate_up": (_moe_stream_gate_up_kernel, dict(NP=16, H_BF16=True, QUANT_H=True, PDL=False, PDL_BLOCKS=4),
                       {**TYPES, **STREAM_SCALES}),
    "stream_down": (_moe_stream_down_kernel, dict(NP=16, TOP_K=6, KPAD=8, PDL=False, PDL_BLOCKS=4),
                    {**TYPES, **STREAM_SCALES}),
    # "bf16-stream-splitk" at its CONFIG (Flash: 2 splits each): no STS/LDSM expected in the K loop
    "splitk_gate_up": (_moe_splitk_gate_up_kernel, dict(NP=64, H_BF16=True, QUANT_H=True, SPLITS=2, K_SPLIT=2048),
                       {**TYPES, **STREAM_SCALES}),
    "splitk_down": (_moe_splitk_down_kernel, dict(NP=64, TOP_K=6, KPAD=8, SPLITS=2, K_SPLIT=1024),
                    {**TYPES, **STREAM_SCALES}),
}
KEY_OPS = ("LDG", "LDGSTS", "LDS", "LDSM", "STS", "HGMMA", "HMUL2", "PRMT", "LOP3", "IMAD", "BAR", "DEPBAR", "SHF")


def _loop_loads(ttgir: str) -> tuple[int, int]:
    """(cp.async copies, plain tt.load ops) inside the scf.for loops of the TTGIR."""
    async_copies = sync_loads = 0
    depth = 0
    for line in ttgir.splitlines():
        if "scf.for" in line:
            depth += 1
        if depth:
            async_copies += "ttg.async_copy_global_to_local" in line or "async_tma_copy" in line
            sync_loads += bool(re.search(r"= tt\.load ", line))
            if re.match(r"\s*} loc", line) or line.strip().startswith("} {"):
                depth -= 1
    return async_copies, sync_loads


def kernel_report(compiled, warps: int, tag: str, dump: Path | None, key_ops: tuple[str, ...] = KEY_OPS) -> dict:
    """Registers, spills, shared memory, programs per SM and the K loop's instructions of one compiled
    kernel (shared with sm90_compile_prefill.py); `dump` keeps its TTGIR, PTX and SASS as `tag`.*."""
    regs, cubin = sm90.ptxas_report(compiled.asm["ptx"])
    sass = sm90.disassemble(cubin, "nvdisasm", "-c")
    if dump is not None:
        dump.mkdir(parents=True, exist_ok=True)
        for ext, text in (("ttgir", compiled.asm["ttgir"]), ("ptx", compiled.asm["ptx"]), ("sass", sass)):
            (dump / f"{tag}.{ext}").write_text(text)
    loop = sm90.mma_k_loop(sass)
    counts = Counter(op.split(".")[0] for op in loop)
    smem = compiled.metadata.shared
    by_regs = 65536 // (-(-regs["n_regs"] // 8) * 8 * 32 * warps)
    by_smem = (228 * 1024) // (smem + 1024)
    async_copies, sync_loads = _loop_loads(compiled.asm["ttgir"])
    return {"n_regs": regs["n_regs"], "spill_bytes": regs["spill_store_bytes"] + regs["spill_load_bytes"],
            "smem_bytes": smem, "programs_per_sm": min(by_regs, by_smem, 32), "async_copies": async_copies,
            "sync_loads_in_loop": sync_loads, "k_loop_instr": len(loop),
            "k_loop_ops": {op: counts[op] for op in key_ops if counts[op]}}


def compile_report(name: str, stages: int, pdl: bool = False, warps: int = 4, dump: Path | None = None) -> dict:
    """One kernel at one num_stages (kernels with an early start: with or without it)."""
    kernel, extra, types = KERNELS[name]
    consts = {**COMMON, **extra, **({"PDL": pdl} if "PDL" in kernel.arg_names else {})}
    signature, attrs = sm90.signature(kernel, consts, types, default="i32", divisible=DIVISIBLE)
    compiled, compile_s = sm90.compile_sm90(kernel, signature, consts, attrs, num_warps=warps, num_stages=stages)
    report = kernel_report(compiled, warps, f"{name}-s{stages}{'-pdl' if pdl else ''}", dump)
    return {"kernel": name, "stages": stages, "pdl": pdl, **report,
            "warp_instr_per_byte": round(report["k_loop_instr"] * warps / 4096, 3), "compile_s": round(compile_s, 1)}


def _ints(flag: str, default: list[int]) -> list[int]:
    """The integers after `flag` on the command line (up to the next flag), else `default`."""
    if flag not in sys.argv:
        return default
    out = []
    for a in sys.argv[sys.argv.index(flag) + 1:]:
        if not a.isdigit():
            break
        out.append(int(a))
    return out


def main() -> None:
    dump = Path(sys.argv[sys.argv.index("--dump") + 1]) if "--dump" in sys.argv else None
    stages = _ints("--stages", [3, 4])
    reports = [compile_report("split_gate_up", 3, dump=dump), compile_report("split_down", 3, dump=dump)]
    reports += [compile_report(name, s, dump=dump) for name in ("stream_gate_up", "stream_down") for s in stages]
    reports += [compile_report(name, 4, pdl=True, dump=dump) for name in ("stream_gate_up", "stream_down")]
    reports += [compile_report(name, s, dump=dump) for name in ("splitk_gate_up", "splitk_down") for s in stages]
    sm90.print_reports(reports)


if __name__ == "__main__":
    main()
