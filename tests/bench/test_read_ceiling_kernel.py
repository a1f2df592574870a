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


def test_the_tile_pattern_reads_every_word_once():
    """Each word lands in exactly one program's xor: the xor of all programs' words is the buffer's."""
    bench = _load_benchmark()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    row_bytes, chunk_bytes, blocks = 512, 64, 2  # 128 rows of 128 words: 2 row tiles x 4 splits
    buf = torch.randint(-2**31, 2**31 - 1, (128 * 128,), dtype=torch.int32, device=device)
    out = torch.zeros(8, dtype=torch.int32, device=device)
    bench.tile_launch(buf, out, row_bytes, chunk_bytes, blocks)()
    assert reduce(lambda a, b: a ^ b, out.cpu().tolist()) == reduce(lambda a, b: a ^ b, buf.cpu().tolist())
    tiles = buf.view(2, 64, 4, 32).permute(2, 0, 1, 3).reshape(8, -1).cpu().tolist()  # (split, row tile)
    assert out.cpu().tolist() == [reduce(lambda a, b: a ^ b, t) for t in tiles]
