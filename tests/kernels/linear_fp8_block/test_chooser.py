"""The linear kernel chooser: ordered candidates with reasons, Triton off unless forced."""

from __future__ import annotations

import pytest
import torch

from mxserve.config.engine_config import EngineConfig
from mxserve.formats import QuantizedWeight, WeightLayout
from mxserve.kernels.chooser import (
    ALL_TRITON,
    LinearSpec,
    Platform,
    choose_linear,
    parse_overrides,
    parse_overrides_env,
)

H200 = Platform("cuda", (9, 0), False, True)
CPU = Platform("cpu", None, False, True)
FP8 = LinearSpec.of("layers.0.attn.wq_a", QuantizedWeight.quantize(torch.randn(256, 256), WeightLayout.FP8_BLOCK),
                    quantize_input=True)
BF16 = LinearSpec.of("head", torch.randn(64, 256), quantize_input=True)


def test_default_is_reference_with_the_switch_reason() -> None:
    choice = choose_linear(FP8, H200)
    assert choice.backend == "reference"
    assert "off by default" in choice.reason


def test_forced_triton_where_it_fits_reference_elsewhere() -> None:
    assert choose_linear(FP8, H200, forced="triton").backend == "triton"
    assert "W8A8" in choose_linear(FP8, H200, forced="triton").reason
    head = choose_linear(BF16, H200, forced="triton")
    assert head.backend == "reference" and "full precision" in head.reason
    cpu = choose_linear(FP8, CPU, forced="triton")
    assert cpu.backend == "reference" and "NVIDIA GPU" in cpu.reason
    old = choose_linear(FP8, Platform("cuda", (7, 5), False, True), forced="triton")
    assert old.backend == "reference" and "sm_75" in old.reason
    assert choose_linear(FP8, H200, forced="reference").backend == "reference"
    with pytest.raises(ValueError, match="unknown backend"):
        choose_linear(FP8, H200, forced="cutlass")


def test_env_front_door_and_config() -> None:
    assert parse_overrides_env({"MXSERVE_KERNEL_OVERRIDES": " linear=triton, moe=reference "}) == {
        "linear": "triton", "moe": "reference"}
    assert parse_overrides_env({}) == {}
    with pytest.raises(ValueError, match="MXSERVE_KERNEL_OVERRIDES: 'linear' is not op=backend"):
        parse_overrides_env({"MXSERVE_KERNEL_OVERRIDES": "linear"})
    assert parse_overrides_env({"MXSERVE_KERNEL_OVERRIDES": "all-triton"}) == dict(ALL_TRITON)
    assert parse_overrides(" all-triton ") == {"linear": "triton", "moe": "triton", "attention": "triton", "hc": "triton"}
    with pytest.raises(ValueError, match="--kernel-overrides: 'moe=' is not op=backend"):
        parse_overrides("linear=triton,moe=")
    assert EngineConfig(kernel_overrides={"linear": "triton"}).kernel_overrides == {"linear": "triton"}
