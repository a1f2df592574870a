"""benchmarks/flash_parity.py (issue 11's random Flash-shaped parity gate, run on the H200) on the CPU
at tiny-all size: every Triton kernel under the interpreter through the decode path's static
buffers, against the reference kernels' teacher-forced argmax. Exact numerics at this size give
the reference's tokens; the JSON carries what the GPU run reports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

_SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "flash_parity.py"


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="the CPU run needs the Triton interpreter")
def test_flash_parity_smoke_on_tiny_all(tmp_path):
    out = tmp_path / "flash_parity.json"
    env = {**os.environ, "PYTHONPATH": str(_SCRIPT.parents[1] / "src")}
    proc = subprocess.run([sys.executable, str(_SCRIPT), "--config", "tiny-all", "--layers", "3", "--device", "cpu",
                           "--numerics", "exact", "--prompts", "2", "--prompt-len", "8", "--num-new", "3",
                           "--out", str(out)], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["layers"] == ["sliding", "csa", "hca"] and result["decode"] == "static buffers, eager"
    assert len(result["rows"]) == 2 and result["all_equal"] and result["every_divergence_a_near_tie"]
    assert any(line.startswith("attention backend: triton") for line in result["kernel_reasons"])
    assert "prompt 0: equal" in proc.stdout
