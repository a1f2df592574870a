"""The read-ceiling benchmark's streaming kernel (benchmarks/read_ceiling.py) under Triton's
interpreter (tests/conftest.py sets it without a GPU): each program xors exactly its own span of words, so the bytes it claims to read are
the bytes it read."""

from __future__ import annotations

import importlib.util
import sys
from functools import reduce
from pathlib import Path

import torch


def _load_benchmark():
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "read_ceiling.py"
    spec = importlib.util.spec_from_file_location("read_ceiling", path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))  # its sibling _cuda_timing
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))
    return module


def test_each_program_xors_its_span():
    bench = _load_benchmark()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    programs, block = 3, 64
    buf = torch.randint(-2**31, 2**31 - 1, (programs * block * 2,), dtype=torch.int32, device=device)
    out = torch.zeros(programs, dtype=torch.int32, device=device)
    bench.read_launch(buf, out, block, 2, 4)()
    spans = buf.view(programs, -1).cpu().tolist()
    assert out.cpu().tolist() == [reduce(lambda a, b: a ^ b, span) for span in spans]
