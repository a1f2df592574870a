"""Compile the slot-map kernels for sm_90 without a GPU and report registers and spills.

    .venv/bin/python tests/kernels/paged_slots/sm90_compile.py

Catches what the interpreter does not (typing of the runtime branches, int64 pointer math) before
a GPU run. TRITON_INTERPRET is forced off by sm90_report: run it as a script, never under pytest.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/kernels: the shared sm90_report

import sm90_report as sm90  # before triton: it forces TRITON_INTERPRET off and a cold cache

from mxserve.kernels.paged_slots._paged_slots_kernel import _paged_slots_kernel
from mxserve.kernels.paged_slots._step_maps_kernel import _step_maps_kernel


def main() -> None:
    cases = [("paged_slots", _paged_slots_kernel, {"BLOCK": 256}, {"tables_ptr": "*i64", "indices_ptr": "*i64",
                                                                   "out_ptr": "*i64"}),
             *((f"step_maps ({n} sites, {c} candidate sets)", _step_maps_kernel,
                {"NUM_SITES": n, "NUM_CANDIDATES": c, "BLOCK": 128},
                {name: "*i64" for name in _step_maps_kernel.arg_names if name.endswith("_ptr")})
               for n, c in ((3, 2), (1, 1), (0, 0)))]
    for label, kernel, consts, ptrs in cases:
        sig, _ = sm90.signature(kernel, consts, ptrs, default="i32")
        compiled, seconds = sm90.compile_sm90(kernel, sig, consts, num_warps=4)
        print(f"kernel={label} compile_s={seconds:.2f} {sm90.ptxas_report(compiled.asm['ptx'])[0]}")


if __name__ == "__main__":
    main()
