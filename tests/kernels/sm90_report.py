"""What the sm_90 compile-report scripts (`tests/kernels/*/sm90_compile*.py`) share: compile a
Triton kernel for an explicit GPUTarget("cuda", 90, 32) without a GPU (Triton 3.9), then run
ptxas (bundled with Triton: ptxas-blackwell, the one Triton itself uses for sm_90) again with -v
on the PTX and parse the entry function's registers, stack and spills.

Importing it forces TRITON_INTERPRET off and points TRITON_CACHE_DIR at a fresh directory (a cold
compile every run) before Triton is imported, so import it before triton. The scripts add this
folder to sys.path and import it as a plain module. Never import it into a pytest process (the
suite runs Triton under the interpreter); it has no test_ prefix, so pytest does not collect it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Collection, Mapping
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "0"
os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="sm90_compile_")  # a cold compile every run
os.environ["TRITON_STORE_BINARY_ONLY"] = "0"  # the report reads the PTX (a GPU call script may store binaries only)

import triton
from triton.backends.compiler import GPUTarget

BIN = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
PTXAS = BIN / "ptxas-blackwell"  # Triton's for sm_90 (the plain one is older than Triton's PTX)
TARGET = GPUTarget("cuda", 90, 32)  # sm_90, warp size 32


def as_launched(kernel, consts: Mapping) -> dict:
    """`consts` plus PDL=True for a kernel with an early start (kernels/early_start.py) when the
    script does not choose: the variant a GPU launches by default (MXSERVE_EARLY_START on). The MoE
    expert kernels, whose early start is off by default (stream_splitk.CONFIG "pdl"), have a script
    that chooses."""
    if "PDL" in kernel.arg_names and "PDL" not in consts:
        return {**consts, "PDL": True}
    return dict(consts)


def signature(kernel, consts: Mapping, types: Mapping[str, str], *, default: str | None = None,
              divisible: Collection[str] | None = None, skip: Collection[str] = ()) -> tuple[dict, dict]:
    """(signature, attrs) for `kernel`: "constexpr" for the names in `consts`, `types[name]` (or
    `default`) for the others. With `divisible` given, pointers and the names in it get the
    16-divisibility a real launch specializes on, except the names in `skip`."""
    consts = as_launched(kernel, consts)
    sig, attrs = {}, {}
    for i, name in enumerate(kernel.arg_names):
        if name in consts:
            sig[name] = "constexpr"
            continue
        ty = types[name] if default is None else types.get(name, default)
        sig[name] = ty
        if divisible is not None and (ty.startswith("*") or name in divisible) and name not in skip:
            attrs[(i,)] = [["tt.divisibility", 16]]
    return sig, attrs


def compile_sm90(kernel, sig: dict, consts: Mapping, attrs: dict | None = None, **options):
    """(compiled kernel, compile seconds) for sm_90; `options` as triton.compile takes them (num_warps, ...)."""
    consts = as_launched(kernel, consts)
    start = time.perf_counter()
    compiled = triton.compile(triton.compiler.ASTSource(fn=kernel, signature=sig, constexprs=dict(consts), attrs=attrs),
                              target=TARGET, options=options)
    return compiled, time.perf_counter() - start


def ptxas_report(ptx: str) -> tuple[dict, bytes]:
    """Registers, stack and spill bytes of the kernel's entry function from ptxas -v, and the cubin ptxas wrote."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "k.ptx"
        path.write_text(ptx)
        cubin = path.with_suffix(".cubin")
        out = subprocess.run([str(PTXAS), "-v", "--gpu-name=sm_90a", str(path), "-o", str(cubin)],
                             capture_output=True, text=True, check=True).stderr
        cubin_bytes = cubin.read_bytes()
    entry = out.split("Compiling entry function", 1)[1]  # skip the libdevice helpers' reports
    spills = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", entry)
    regs = re.search(r"Used (\d+) registers", entry)
    return {"n_regs": int(regs.group(1)), "stack_bytes": int(spills.group(1)),
            "spill_store_bytes": int(spills.group(2)), "spill_load_bytes": int(spills.group(3))}, cubin_bytes


def disassemble(cubin: bytes, tool: str = "nvdisasm", *args: str) -> str:
    """The SASS of `cubin` from Triton's bundled `tool` (nvdisasm, or cuobjdump with "-sass")."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "k.cubin"
        path.write_bytes(cubin)
        return subprocess.run([str(BIN / tool), *args, str(path)], capture_output=True, text=True,
                              check=True).stdout


def print_reports(reports: list[dict]) -> None:
    """One JSON list with --json on the command line, else one `key=value ...` line per report."""
    if "--json" in sys.argv:
        print(json.dumps(reports))
        return
    for r in reports:
        print(" ".join(f"{k}={v}" for k, v in r.items()))


def mma_k_loop(sass: str) -> list[str]:
    """Opcodes of the innermost loop that contains a wgmma (HGMMA/QGMMA): the shortest span from a
    label to a backward branch to it whose body holds one. Empty when there is no such loop."""
    lines = sass.splitlines()
    labels = {m.group(1): i for i, line in enumerate(lines) if (m := re.match(r"\s*(\.L_x_\d+):", line))}
    best = None
    for i, line in enumerate(lines):
        m = re.search(r"BRA\s+`\((\.L_x_\d+)\)", line)
        if m and labels.get(m.group(1), i) < i:
            body = lines[labels[m.group(1)]:i + 1]
            if any("GMMA" in b for b in body) and (best is None or len(body) < len(best)):
                best = body
    return [m.group(1) for line in best or []
            if (m := re.match(r"\s*/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", line))]
