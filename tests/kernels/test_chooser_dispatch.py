"""LinearDispatcher: per-layer backends decided once, called with linear_ref's signature
(Triton runs under the interpreter on the CPU)."""

from __future__ import annotations

import logging

import pytest
import torch

pytest.importorskip("triton")

from mxserve.formats import E4M3FNUZ, QuantizedWeight, WeightLayout, fp8_ocp_to_fnuz
from mxserve.kernels.chooser import Choice, LinearDispatcher, LinearSpec, Platform, choose_linear
from mxserve.kernels.linear import grouped_linear_ref, linear_ref

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def fp8(n: int, k: int, seed: int) -> QuantizedWeight:
    w = torch.randn(n, k, generator=torch.Generator().manual_seed(seed)) * 0.05
    return QuantizedWeight.quantize(w, WeightLayout.FP8_BLOCK).to(DEVICE)


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm())


def test_dispatches_each_weight_to_its_choice(caplog: pytest.LogCaptureFixture) -> None:
    ocp = fp8(128, 256, 0)
    fnuz = QuantizedWeight.from_fp8_block(*fp8_ocp_to_fnuz(ocp.codes, ocp.scales), fmt=E4M3FNUZ)
    weights = {"a.wq_a": fnuz, "a.wo_b": fp8(64, 300, 1), "a.wo_a": fp8(256, 200, 2),
               "a.proj": torch.randn(40, 256).bfloat16().to(DEVICE)}
    tri = Choice("triton", "test")
    dispatcher = LinearDispatcher(weights, {"a.wq_a": tri, "a.wo_b": Choice("reference", "test"), "a.wo_a": tri,
                                            "a.proj": tri})
    assert dispatcher.backend_counts() == {"triton": 3, "reference": 1}
    x = torch.randn(3, 256, device=DEVICE)
    for qi in (False, True):
        out = dispatcher(x, weights["a.wq_a"], quantize_input=qi)  # FNUZ converted to OCP once, at load
        assert rel(out, linear_ref(x, ocp, quantize_input=qi)) <= 1e-6
    x300 = torch.randn(2, 300, device=DEVICE)
    assert torch.equal(dispatcher(x300, weights["a.wo_b"]), linear_ref(x300, weights["a.wo_b"]))  # the reference
    assert rel(dispatcher(x, weights["a.proj"]), linear_ref(x, weights["a.proj"])) <= 2e-5
    xg = torch.randn(5, 2, 200, device=DEVICE).bfloat16()
    assert rel(dispatcher.grouped(xg, weights["a.wo_a"]), grouped_linear_ref(xg, weights["a.wo_a"])) <= 1e-6
    stranger = fp8(64, 256, 3)
    with caplog.at_level(logging.WARNING, logger="mxserve.kernels"):
        assert torch.equal(dispatcher(x, stranger), linear_ref(x, stranger))
    assert "not seen at load" in caplog.text
    report = dispatcher.compare_with_reference()
    assert {(n, v) for n, v, _e in report} == {("a.wq_a", "weight-only"), ("a.wq_a", "w8a8"), ("a.wo_a", "grouped"),
                                               ("a.proj", "weight-only")}
    assert all(e <= 2e-5 for _n, _v, e in report), report


def test_grouped_spec_needs_whole_row_blocks() -> None:
    h200 = Platform("cuda", (9, 0), False, True)
    w = QuantizedWeight.quantize(torch.randn(8 * 128, 256), WeightLayout.FP8_BLOCK)
    assert choose_linear(LinearSpec.of("l.wo_a", w, quantize_input=False, groups=8), h200, forced="triton").backend \
        == "triton"
    odd = choose_linear(LinearSpec.of("l.wo_a", w, quantize_input=False, groups=16), h200, forced="triton")
    assert odd.backend == "reference" and "128-row" in odd.reason
    bf16 = choose_linear(LinearSpec.of("head", torch.randn(64, 256).bfloat16(), quantize_input=True), h200,
                         forced="triton")
    assert bf16.backend == "triton" and "bf16" in bf16.reason
