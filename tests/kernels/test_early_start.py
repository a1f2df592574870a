"""Early start (kernels/early_start.py): when it is on, and that every early kernel waits first.

CPU: the launch keywords follow MXSERVE_EARLY_START and the interpreter; every @triton.jit kernel
that uses `wait_for_previous` calls it as its first statement (a load or store before the wait
could read what the previous kernel has not written yet: a race no interpreter test would see).
GPU (marked, skipped without CUDA): the packaged default model with every Triton kernel, greedy 64
tokens in CUDA graphs, gives the same tokens and the same logits bit for bit with early starts on
and off.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch
from tests.engine.test_cuda_graphs import _greedy as greedy_with_logits

from mxserve import LLM
from mxserve.kernels.early_start import EARLY_START_ENV, early_start_launch

KERNELS_DIR = Path(__file__).resolve().parents[2] / "src" / "mxserve" / "kernels"
CUDA = torch.cuda.is_available()


def test_launch_keywords_follow_the_switch_and_the_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    monkeypatch.delenv(EARLY_START_ENV, raising=False)
    assert early_start_launch() == {"PDL": True, "launch_pdl": True}
    monkeypatch.setenv(EARLY_START_ENV, "0")
    assert early_start_launch() == {}
    monkeypatch.setenv(EARLY_START_ENV, "1")
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # the interpreter cannot run griddepcontrol
    assert early_start_launch() == {}


def _is_jit(node: ast.FunctionDef) -> bool:
    for dec in node.decorator_list:
        target = dec.func if isinstance(dec, ast.Call) else dec
        if isinstance(target, ast.Attribute) and target.attr == "jit":
            return True
    return False


def _calls_wait(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) and getattr(n.func, "id", None) == "wait_for_previous" for n in ast.walk(node))


def _early_kernels() -> list[tuple[str, ast.FunctionDef]]:
    found = []
    for path in sorted(KERNELS_DIR.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and _is_jit(node) and _calls_wait(node):
                found.append((f"{path.relative_to(KERNELS_DIR)}:{node.name}", node))
    return found


def test_every_early_kernel_waits_before_anything_else():
    kernels = _early_kernels()
    assert len(kernels) >= 15, [name for name, _ in kernels]  # the decode kernels of session 14 at least
    for name, node in kernels:
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:]  # the docstring
        first = body[0]
        assert (isinstance(first, ast.Expr) and isinstance(first.value, ast.Call)
                and getattr(first.value.func, "id", None) == "wait_for_previous"), (
            f"{name}: the first statement must be wait_for_previous(PDL), got line {first.lineno}")
        arg = first.value.args[0] if first.value.args else None
        assert isinstance(arg, ast.Name) and arg.id == "PDL", f"{name}: wait_for_previous must take the PDL constexpr"
        assert "PDL" in [a.arg for a in node.args.args], f"{name}: no PDL parameter"


def _greedy(prompts: list[list[int]], num_tokens: int) -> tuple[list[list[int]], list[torch.Tensor]]:
    """A fresh all-Triton engine's greedy tokens and the logits its sampler saw, through CUDA graphs."""
    llm = LLM(device="cuda", max_model_len=512, progress=False,
              kernel_overrides={"linear": "triton", "moe": "triton", "attention": "triton", "hc": "triton"})
    tokens, logits = greedy_with_logits(llm, prompts, num_tokens)
    graphs = llm.engine.runner.decode_graphs
    assert graphs is not None and graphs.num_replays > 0, "no graph replayed"
    return tokens, logits


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_gpu_early_start_gives_the_same_bits(monkeypatch):
    """Every logit of 64 greedy graph-replayed steps (5 prompts, bucket 8) is the same with early
    starts on and off: the waits order every access as ordinary launches do."""
    prompts = [[0, *range(7, 7 + n)] for n in (3, 17, 40, 9, 66)]
    monkeypatch.setenv(EARLY_START_ENV, "1")
    on_tokens, on_logits = _greedy(prompts, 64)
    monkeypatch.setenv(EARLY_START_ENV, "0")
    off_tokens, off_logits = _greedy(prompts, 64)
    assert on_tokens == off_tokens
    assert len(on_logits) == len(off_logits)
    for step, (a, b) in enumerate(zip(on_logits, off_logits, strict=True)):
        assert torch.equal(a, b), f"step {step}: logits differ, max |Δ| {(a - b).abs().max():.3e}"
