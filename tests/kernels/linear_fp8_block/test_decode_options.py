"""linear_fp8_block: the decode options (`DecodeOptions`, issue 9 session 5) leave every bit as it is.

The reference for "as it is" is the launch before these options existed:
`DecodeOptions(even=False, shape_rule=False)` compiles the same kernel code as before. Under the
interpreter the dot is an fp32 product-sum, so these tests check what the options change there:
the mask-free loads (EVEN) read the same values, the in-program one-group code adds the same
partials, the prepared activations feed the same operands. What only a GPU shows (the MMA's bits
with other configs, programmatic dependent launch, CUDA-graph replay) the GPU test below and
benchmarks/gpu_s5_linear.sh check on the H200.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from tests.kernels.linear_fp8_block.test_linear_fp8_block import CPU, DEVICE, first_mismatch, weight

from mxserve.kernels.linear_fp8_block import triton as launcher
from mxserve.kernels.linear_fp8_block.triton import DecodeOptions, kb_per_group, linear_fp8_block_triton

BEFORE = DecodeOptions(even=False, shape_rule=False, fused_act_quant=False)  # the launch as it was before the options
VARIANTS = {
    "default": DecodeOptions(),
    "in_program": DecodeOptions(one_group="in_program"),
    "prep_x": DecodeOptions(prep_x=True),
    "all": DecodeOptions(prep_x=True, one_group="in_program", pdl=True),  # pdl: ignored by the interpreter
}


def test_shape_rule_plans_by_layer_size() -> None:
    """The measured rule (session 5): >= 32 Mi weights prepared activations on 64-feature tiles,
    smaller layers a dependent launch on 64-feature 4-warp 2-stage tiles (session 13); a value given
    wins; no rule for grouped launches or with the rule off."""
    rule = DecodeOptions()
    assert rule.weight_only_plan(4096, 8192, groups=1) == (False, True, launcher.LARGE_DECODE_CONFIG)
    assert rule.weight_only_plan(4096, 4096, groups=1) == (True, False, launcher.SMALL_DECODE_CONFIG)
    assert rule.weight_only_plan(1024, 4096, groups=8) == (False, False, None)
    assert DecodeOptions(shape_rule=False).weight_only_plan(4096, 8192, groups=1) == (False, False, None)
    assert DecodeOptions(pdl=True, prep_x=False, wo_config=(64, 4, 6)).weight_only_plan(4096, 8192, groups=1) == (
        True, False, (64, 4, 6))


def test_large_layer_rule_gives_the_bits_of_the_launch_before(monkeypatch) -> None:
    """The large-layer plan (prepared activations) on interpreter-sized shapes: the bits of BEFORE."""
    monkeypatch.setattr(launcher, "LARGE_DECODE_WEIGHTS", 0)
    w = weight(256, 512, seed=3)
    x = torch.randn(7, 512, generator=torch.Generator().manual_seed(4)).to(DEVICE).bfloat16()
    for m in (1, 7):
        got, before = _run(DecodeOptions(), x[:m], w), _run(BEFORE, x[:m], w)
        assert torch.equal(got, before), f"{m=}: {first_mismatch(got, before)}"


def _run(options: DecodeOptions, x: torch.Tensor, w, **kw) -> torch.Tensor:
    prev = launcher.set_decode_options(options)
    try:
        return linear_fp8_block_triton(x, w, **kw)
    finally:
        launcher.set_decode_options(prev)


def _is_even(n: int, k: int) -> bool:
    num_kb = -(-k // 128)
    return n % 128 == 0 and k % 128 == 0 and num_kb % kb_per_group(n, k) == 0


@pytest.mark.parametrize("n,k", [(256, 512), (128, 384), (200, 700), (128, 300)])
@pytest.mark.parametrize("xkind", ["bf16", "fp32", "w8a8"])
def test_options_give_the_bits_of_the_launch_before(n: int, k: int, xkind: str) -> None:
    """Every option set gives the bits of the pre-option launch for M = 0, 1, 7 (decode) and 20
    (the GEMM launch, where only `even` applies). Shapes with and without partial tiles/blocks."""
    w = weight(n, k, seed=n + k)
    x = torch.randn(20, k, generator=torch.Generator().manual_seed(k)).to(DEVICE)
    xin = x.bfloat16() if xkind == "bf16" else x
    q = xkind == "w8a8"
    for m in (0, 1, 7, 20):
        before = _run(BEFORE, xin[:m], w, quantize_input=q)
        assert before.shape == (m, n)
        for name, opts in VARIANTS.items():
            got = _run(opts, xin[:m], w, quantize_input=q)
            assert torch.equal(got, before), f"{name} {m=} {xkind=} even={_is_even(n, k)}: {first_mismatch(got, before)}"


def test_even_shapes_are_the_release_kind() -> None:
    """The EVEN specialization applies to the test shapes chosen for it and to every release decode
    shape (so the timed path is the mask-free one), and not where a tile or block is partial."""
    assert _is_even(256, 512) and _is_even(128, 384)
    assert not _is_even(200, 700) and not _is_even(128, 300)
    for n, k in [(1536, 4096), (32768, 1024), (4096, 8192), (4096, 4096), (4096, 2048), (8192, 1024),
                 (129280, 4096), (8 * 1024, 4096)]:
        assert _is_even(n, k), (n, k)


def test_one_group_layer_in_program_equals_split(monkeypatch: pytest.MonkeyPatch) -> None:
    """A one-group layer (the head's and wq_b's kind: forced here by a tiny program target) decodes
    to the same bits on the split code (issue 9 call 3) and the in-program code (before it)."""
    monkeypatch.setattr(launcher, "_GROUP_TARGET_PROGRAMS", 1)
    n, k = 128, 512
    assert kb_per_group(n, k) == 4  # one group of all 4 blocks
    w = weight(n, k, seed=3)
    x = torch.randn(7, k, generator=torch.Generator().manual_seed(5)).to(DEVICE).bfloat16()
    split = _run(DecodeOptions(one_group="split"), x, w)
    in_program = _run(DecodeOptions(one_group="in_program"), x, w)
    assert torch.equal(split, in_program), first_mismatch(split, in_program)
    assert torch.equal(split, _run(BEFORE, x, w))


def test_grouped_projection_keeps_its_bits() -> None:
    """wo_a's block-diagonal launch (groups on grid axis 2) with the mask-free loads."""
    g, r, k = 2, 128, 256
    w = weight(g * r, k, seed=9)
    x = torch.randn(3, g, k, generator=torch.Generator().manual_seed(2)).to(DEVICE)
    prev = launcher.set_decode_options(BEFORE)
    try:
        before = launcher.grouped_linear_fp8_block_triton(x, w)
    finally:
        launcher.set_decode_options(prev)
    got = launcher.grouped_linear_fp8_block_triton(x, w)
    assert torch.equal(got, before), first_mismatch(got, before)


def test_options_validate_and_restore() -> None:
    with pytest.raises(ValueError, match="one_group="):
        DecodeOptions(one_group="never")
    with pytest.raises(ValueError, match="wo_config="):
        DecodeOptions(wo_config=(96, 4, 4))
    prev = launcher.set_decode_options(pdl=True)
    try:
        assert launcher._decode_options["value"] == DecodeOptions(pdl=True)
    finally:
        assert launcher.set_decode_options(prev) == DecodeOptions(pdl=True)
    assert launcher._decode_options["value"] == prev


@pytest.mark.gpu
@pytest.mark.skipif(CPU, reason="needs CUDA")
@pytest.mark.parametrize("n,k", [(1536, 4096), (4096, 8192), (32768, 1024)])
def test_gpu_options_bitwise_eager_and_graph(n: int, k: int) -> None:
    """GPU: each option set (PDL included) equals the pre-option launch bit for bit at M = 1, 7, 16
    (bf16 x; W8A8 with the default and PDL options), 5 calls in a row, and under CUDA-graph replay
    of a chain of 3 launches (PDL edges between them) on fresh inputs. The decode config is forced
    (64x4x4; 128x8x4 and the small layers' 64x4x2 for one variant each) so the test compiles ~20 kernels instead of autotuning
    each option set; configs never change bits (the autotuned default is compared in
    benchmarks/kernels.py --decode-ab)."""
    w = weight(n, k, seed=21, device="cuda")
    x = torch.randn(16, k, device="cuda")
    variants = {**{name: (opts, (64, 4, 4)) for name, opts in VARIANTS.items()},
                "pdl": (DecodeOptions(pdl=True), (64, 4, 4)), "pdl_128x8": (DecodeOptions(pdl=True), (128, 8, 4)),
                "pdl_64x4s2": (DecodeOptions(pdl=True), launcher.SMALL_DECODE_CONFIG)}
    try:
        for xin, q in ((x.bfloat16(), False), (x, True)):
            for m in (1, 7, 16):
                launcher.force_config("decode", (64, 4, 4))
                before = _run(BEFORE, xin[:m], w, quantize_input=q)
                for name, (opts, cfg) in variants.items():
                    if q and name not in ("default", "pdl"):  # W8A8: the options it takes (fewer compiles)
                        continue
                    launcher.force_config("decode", cfg)
                    for _ in range(5):
                        got = _run(opts, xin[:m], w, quantize_input=q)
                        assert torch.equal(got, before), f"{name} {m=} {q=}: {first_mismatch(got, before)}"
        for name in ("pdl", "pdl_128x8"):
            opts, cfg = variants[name]
            launcher.force_config("decode", cfg)
            prev = launcher.set_decode_options(opts)
            try:
                static_x = x.bfloat16().clone()

                def chain(xs: torch.Tensor = static_x) -> list[torch.Tensor]:
                    return [linear_fp8_block_triton(xs, w) for _ in range(3)]

                stream = torch.cuda.Stream()
                stream.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(stream):
                    chain()  # warm-up outside the capture: compiles, counters
                torch.cuda.current_stream().wait_stream(stream)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    outs = chain()
            finally:
                launcher.set_decode_options(prev)
            for i in range(3):
                static_x.copy_(x.bfloat16() * (i + 1))
                graph.replay()
                launcher.force_config("decode", (64, 4, 4))
                expect = _run(BEFORE, static_x, w)
                for o in outs:
                    assert torch.equal(o, expect), f"{name} replay {i}: {first_mismatch(o, expect)}"
    finally:
        launcher.force_config("decode", None)
