"""The hyper-connection Triton kernels against their torch twins (TRITON_INTERPRET=1 on the CPU).

* hc_pre / hc_post / hc_head equal the twins bit for bit (torch.equal) on random inputs: hc 4,
  D not a multiple of the 512-channel block nor of the 256-element K-split (two D-blocks, a
  partial last split), T = 0, 1, 5, bf16 and fp32 streams; hc 3 (padded lanes) once; the GPU's
  mix tile once (the interpreter normally takes longer steps, see `INTERPRETER_MIX_TILE`);
* batch invariance: a token alone gives the bits it gets inside a batch (hc_head shares hc_pre's
  mix kernels and its finish kernel's block-input path);
* the launchers refuse bad shapes and dtypes with the values in the message;
* the chooser: off unless forced, forced Triton on CUDA, the slots it hands out;
* session 7: the old kernels (MXSERVE_HC_OLD_KERNELS=1) still equal the twins; post/comb as a
  launch of their own (the side stream's split) give the one launch's bits; the comb reductions
  run in their documented orders (a matrix where the orders give different fp64 sums).
* session 17: hc_pre / hc_head + the block norm (`hc_pre_norm_triton`, `hc_head_norm_triton`) equal
  the twins' composition bit for bit with MXSERVE_HC_FUSED off and on; on, at a shape that fuses
  the sums-of-squares and norm launches are really gone, and a token alone keeps its batch bits.
"""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from mxserve.kernels.chooser import Platform
from mxserve.kernels.hyper_connection import (
    HyperConnectionSpec,
    HyperConnectionWeights,
    choose_hc,
    hc_head_ref,
    hc_ops,
    hc_post_ref,
    hc_pre_ref,
)
from mxserve.kernels.hyper_connection.reference import hc_head_norm_ref, hc_pre_norm_ref

ht = pytest.importorskip("mxserve.kernels.hyper_connection.triton")
hk = pytest.importorskip("mxserve.kernels.hyper_connection._hc_kernel")

EPS = dict(hc_eps=1e-6, rms_eps=1e-6)
ITERS = 20
D = 520  # two 512-channel blocks (the second 8 wide); K = 4·520 = 2080: 8 full 256-splits + 32


def _assert_equal(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.dtype, want.dtype, got.shape, want.shape)
    if not torch.equal(got, want):
        bad = (got != want).nonzero()
        idx = tuple(bad[0].tolist())
        raise AssertionError(f"{what}: {len(bad)} of {got.numel()} differ; first at {idx}: "
                             f"got {got[idx].item()!r}, want {want[idx].item()!r}")


def _inputs(num_tokens: int, hc: int, dim: int, dtype: torch.dtype, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    n = (2 + hc) * hc
    scale = torch.rand(num_tokens, 1, 1, generator=gen) * 4 + 0.1  # rows of different magnitudes
    streams = (torch.randn(num_tokens, hc, dim, generator=gen) * scale).to(dtype)
    w = HyperConnectionWeights(torch.randn(n, hc * dim, generator=gen) * 0.05, torch.randn(n, generator=gen),
                               torch.rand(3, generator=gen) + 0.5)
    head = (torch.randn(hc, hc * dim, generator=gen) * 0.05, torch.randn(hc, generator=gen),
            torch.rand(1, generator=gen) + 0.5)
    block_out = torch.randn(num_tokens, dim, generator=gen).to(dtype)
    return streams, w, head, block_out


def _check_all(streams, w, head, block_out) -> None:
    want = hc_pre_ref(streams, w, sinkhorn_iters=ITERS, **EPS)
    got = ht.hc_pre_triton(streams, w, sinkhorn_iters=ITERS, **EPS)
    for name, g, r in zip(("block input", "post", "comb"), got, want, strict=True):
        _assert_equal(g, r, f"hc_pre {name}")
    _, post, comb = want
    _assert_equal(ht.hc_post_triton(block_out, streams, post, comb), hc_post_ref(block_out, streams, post, comb),
                  "hc_post")
    _assert_equal(ht.hc_head_triton(streams, *head, **EPS), hc_head_ref(streams, *head, **EPS), "hc_head")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("num_tokens", [0, 1, 5])
def test_triton_equals_twin_bitwise(num_tokens, dtype):
    _check_all(*_inputs(num_tokens, 4, D, dtype, seed=num_tokens))


def test_padded_lanes_hc3_and_the_gpu_mix_tile(monkeypatch):
    _check_all(*_inputs(3, 3, 200, torch.bfloat16, seed=7))  # HC_PAD 4: masked lanes through the Sinkhorn
    monkeypatch.setattr(ht, "INTERPRETER_MIX_TILE", ht.MIX_TILE)  # the GPU's [4, 32, 16] steps
    _check_all(*_inputs(2, 4, D, torch.float32, seed=8))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_hc_post_with_an_addend_is_the_add_and_cast_then_hc_post(dtype):
    """F = (routed + shared) rounded to the stream dtype inside the launch (the MoE's shared expert):
    the same bits as torch's add and cast before a plain hc_post, and as the twin's addend. fp32
    values whose sums land on and near bf16 ties (the round-to-nearest-even case)."""
    streams, w, _, _ = _inputs(5, 4, D, dtype, seed=11)
    _, post, comb = hc_pre_ref(streams, w, sinkhorn_iters=ITERS, **EPS)
    gen = torch.Generator().manual_seed(12)
    routed = torch.randn(5, D, generator=gen) * 3
    shared = torch.randn(5, D, generator=gen)
    routed[0, :8] = torch.tensor([1.0, 1.0, -1.0, 3.0, 0.0, 1e-30, 2.0, 100.0])
    shared[0, :8] = torch.tensor([2.0**-8, 3 * 2.0**-8, 2.0**-9, 2.0**-6 + 2.0**-20, -0.0, -1e-30, 2.0**-7, 0.25])
    want = hc_post_ref((routed + shared).to(dtype), streams, post, comb)
    _assert_equal(hc_post_ref(routed, streams, post, comb, addend=shared), want, "twin with addend")
    _assert_equal(ht.hc_post_triton(routed, streams, post, comb, addend=shared), want, "hc_post + addend")
    # a bf16 addend is torch's promotion, not the kernel's fp32 add: the launcher adds in torch first
    _assert_equal(ht.hc_post_triton(routed, streams, post, comb, addend=shared.bfloat16()),
                  hc_post_ref((routed + shared.bfloat16()).to(dtype), streams, post, comb), "bf16 addend")


def test_a_token_alone_equals_the_token_in_a_batch():
    streams, w, _, block_out = _inputs(5, 4, D, torch.bfloat16, seed=3)
    batch_pre = ht.hc_pre_triton(streams, w, sinkhorn_iters=ITERS, **EPS)
    batch_post = ht.hc_post_triton(block_out, streams, batch_pre[1], batch_pre[2])
    for t in (0, 4):
        row = slice(t, t + 1)
        alone = ht.hc_pre_triton(streams[row], w, sinkhorn_iters=ITERS, **EPS)
        for name, a, b in zip(("block input", "post", "comb"), alone, batch_pre, strict=True):
            _assert_equal(a[0], b[t], f"token {t} hc_pre {name}")
        _assert_equal(ht.hc_post_triton(block_out[row], streams[row], batch_pre[1][row], batch_pre[2][row])[0],
                      batch_post[t], f"token {t} hc_post")


def test_launchers_refuse_bad_inputs_with_the_values():
    streams, w, head, block_out = _inputs(2, 4, 64, torch.bfloat16)
    with pytest.raises(ValueError, match=r"hc_pre: streams must be fp32 or bf16, got streams.dtype=torch.float16"):
        ht.hc_pre_triton(streams.half(), w, sinkhorn_iters=ITERS, **EPS)
    with pytest.raises(ValueError, match=r"hc_pre: streams must be \[T, hc, D\], got .*=\(2, 256\)"):
        ht.hc_pre_triton(streams.flatten(1), w, sinkhorn_iters=ITERS, **EPS)
    with pytest.raises(ValueError, match=r"hc_pre: fn must be a float tensor \[24, 256\].*\[24, 255\]"):
        ht.hc_pre_triton(streams, HyperConnectionWeights(w.fn[:, :-1], w.base, w.scale), sinkhorn_iters=ITERS, **EPS)
    with pytest.raises(ValueError, match=r"hc_post: block_out must be a float \[2, 64\].*\(2, 63\)"):
        ht.hc_post_triton(block_out[:, :-1], streams, torch.ones(2, 4), torch.ones(2, 4, 4))
    with pytest.raises(ValueError, match=r"hc_head: base must be a float tensor \[4\]"):
        ht.hc_head_triton(streams, head[0], head[1][:3], head[2], **EPS)


def test_chooser_off_unless_forced_and_the_slots():
    spec = HyperConnectionSpec(hc_mult=4, hidden_size=4096, stream_dtype="bfloat16")
    h200 = Platform("cuda", (9, 0), False, True)
    assert choose_hc(spec, h200).backend == "reference"
    assert "off by default" in choose_hc(spec, h200).reason
    forced = choose_hc(spec, h200, forced="triton")
    assert forced.backend == "triton" and forced.reason.startswith("forced; fp64 mixes"), forced
    cpu = choose_hc(spec, Platform("cpu", None, False, True), forced="triton")
    assert cpu.backend == "reference" and "needs an NVIDIA GPU" in cpu.reason
    assert choose_hc(HyperConnectionSpec(32, 64, "bfloat16"), h200, forced="triton").backend == "reference"
    assert hc_ops("reference") == {}
    from mxserve.kernels.rms_norm.triton import rms_norm_triton

    assert hc_ops("triton") == {"hc_pre": ht.hc_pre_triton, "hc_post": ht.hc_post_triton,
                                "hc_head": ht.hc_head_triton, "rms_norm": rms_norm_triton,
                                "hc_pre_norm": ht.hc_pre_norm_triton, "hc_head_norm": ht.hc_head_norm_triton}
    with pytest.raises(ValueError, match=r"hc: unknown backend 'cuda'; known: \['reference', 'triton'\]"):
        choose_hc(spec, h200, forced="cuda")


def test_old_kernels_switch_still_equals_the_twin(monkeypatch):
    """MXSERVE_HC_OLD_KERNELS=1: comb in the register tile again (the A/B's "before")."""
    monkeypatch.setenv("MXSERVE_HC_OLD_KERNELS", "1")
    assert not ht._constexprs(4, D, 24)["finish"]["COMB_LANES"]
    _check_all(*_inputs(3, 4, 200, torch.bfloat16, seed=5))


def test_post_comb_launch_of_their_own_gives_the_one_launch_bits():
    """The side stream's split (PART 2 then PART 1) against the one finish launch (PART 0)."""
    streams, w, _, _ = _inputs(3, 4, 200, torch.float32, seed=9)
    mixes = ht._mix_partials(streams, w.fn, EPS["rms_eps"])
    kw = dict(hc_eps=EPS["hc_eps"], sinkhorn_iters=ITERS, with_post=True)
    one = ht._finish(streams, mixes, w.base, w.scale, **kw)
    split = ht._finish(streams, mixes, w.base, w.scale, split_launch=True, **kw)
    wide = ht._finish(streams, mixes, w.base, w.scale, post_dtype=torch.float64, **kw)  # the GPU test's fp64 outputs
    _assert_equal(wide[2].float(), one[2], "comb stored in fp64, then rounded")
    for name, a, b in zip(("block input", "post", "comb"), split, one, strict=True):
        _assert_equal(a, b, f"split launch {name}")


@triton.jit
def _sums_kernel(c_ptr, rows_ptr, cols_ptr):
    ii = tl.arange(0, 4)[:, None]
    jj = tl.arange(0, 4)[None, :]
    c = tl.load(c_ptr + ii * 4 + jj)
    tl.store(rows_ptr + ii * 4 + jj, hk._row_sums4(c, jj)[:, None] + tl.zeros_like(c))  # [i, j]: row i's sum
    tl.store(cols_ptr + ii * 4 + jj, hk._col_sums4(c))  # [i, j]: column j's sum


def test_comb_sums_run_in_their_documented_orders():
    """Rows (c0 + c2) + (c1 + c3), columns ((c0 + c1) + c2) + c3, exactly: on this matrix every
    other order of either sum gives another fp64 value (1 and -1 cancel only when paired first)."""
    tiny = 2.0 ** -60
    c = torch.zeros(4, 4, dtype=torch.float64)
    c[0] = torch.tensor([1.0, tiny, -1.0, 0.0])  # row 0: butterfly tiny, in order 0
    c[:, 3] = torch.tensor([0.0, 1.0, -1.0, tiny])  # column 3: in order tiny, butterfly 0
    device = "cuda" if torch.cuda.is_available() and not ht.interpreting() else "cpu"
    c = c.to(device)
    rows, cols = torch.empty_like(c), torch.empty_like(c)
    _sums_kernel[(1,)](c, rows, cols)
    v = c.cpu().tolist()
    want_rows = [(r[0] + r[2]) + (r[1] + r[3]) for r in v]
    want_cols = [((v[0][j] + v[1][j]) + v[2][j]) + v[3][j] for j in range(4)]
    assert want_rows[0] == tiny and want_cols[3] == tiny  # the orders matter here
    assert rows.cpu().tolist() == [[want_rows[i]] * 4 for i in range(4)], rows
    assert cols.cpu().tolist() == [want_cols] * 4, cols


class _NotLaunched:
    """Stands in for a kernel that the fused path must not launch."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __getitem__(self, grid):
        raise AssertionError(f"{self.name} was launched on the fused path")


def _check_normed(streams, w, head, fused: bool, what: str, seed: int) -> None:
    dim = streams.shape[2]
    norm_w = torch.rand(dim, generator=torch.Generator().manual_seed(seed)) + 0.5
    want = hc_pre_norm_ref(streams, w, norm_w, sinkhorn_iters=ITERS, **EPS)
    got = ht.hc_pre_norm_triton(streams, w, norm_w, sinkhorn_iters=ITERS, **EPS)
    for name, g, r in zip(("normed block input", "post", "comb"), got, want, strict=True):
        _assert_equal(g, r, f"{what} fused={fused} hc_pre_norm {name}")
    _assert_equal(ht.hc_head_norm_triton(streams, *head, norm_w, **EPS), hc_head_norm_ref(streams, *head, norm_w, **EPS),
                  f"{what} fused={fused} hc_head_norm")


@pytest.mark.parametrize("fused", [False, True], ids=["off", "fused"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_pre_and_head_norm_equal_the_twins(fused, dtype, monkeypatch):
    """D 256 (hc 4: K 1024, 4 splits; one finish program a row: both fusions), D 200 with hc 3
    (padded lanes, a partial split, a masked tail of the row), D 520 (two D-blocks and 9 splits:
    neither fusion, the unfused launches); T 0, 1, 5."""
    monkeypatch.setenv(ht.FUSED_ENV, "1" if fused else "0")
    for num_tokens, hc, dim in ((1, 4, 256), (5, 4, 256), (0, 4, 256), (3, 3, 200), (2, 4, D)):
        streams, w, head, _ = _inputs(num_tokens, hc, dim, dtype, seed=num_tokens + dim)
        _check_normed(streams, w, head, fused, f"T={num_tokens} hc={hc} D={dim} {dtype}", seed=dim)


def test_fused_path_skips_the_sums_of_squares_and_norm_launches(monkeypatch):
    """MXSERVE_HC_FUSED=1 at a shape that fuses: hc_pre + norm is 2 launches (no sums-of-squares,
    no norm kernel), with the same bits; and with the switch off the unfused kernels still run."""
    import mxserve.kernels.rms_norm.triton as rt

    streams, w, head, _ = _inputs(5, 4, 256, torch.bfloat16, seed=21)
    monkeypatch.setenv(ht.FUSED_ENV, "1")
    monkeypatch.setattr(ht, "_hc_sumsq_kernel", _NotLaunched("_hc_sumsq_kernel"))
    monkeypatch.setattr(rt, "_rms_norm_kernel", _NotLaunched("_rms_norm_kernel"))
    _check_normed(streams, w, head, True, "fused, unfused kernels removed", seed=21)
    monkeypatch.setenv(ht.FUSED_ENV, "0")
    with pytest.raises(AssertionError, match="_hc_sumsq_kernel was launched"):
        ht.hc_pre_norm_triton(streams, w, torch.ones(256), sinkhorn_iters=ITERS, **EPS)


def test_fused_token_alone_equals_the_token_in_a_batch(monkeypatch):
    monkeypatch.setenv(ht.FUSED_ENV, "1")
    streams, w, _, _ = _inputs(5, 4, 256, torch.bfloat16, seed=23)
    norm_w = torch.rand(256, generator=torch.Generator().manual_seed(24)) + 0.5
    batch = ht.hc_pre_norm_triton(streams, w, norm_w, sinkhorn_iters=ITERS, **EPS)
    for t in (0, 4):
        alone = ht.hc_pre_norm_triton(streams[t:t + 1], w, norm_w, sinkhorn_iters=ITERS, **EPS)
        for name, a, b in zip(("normed block input", "post", "comb"), alone, batch, strict=True):
            _assert_equal(a[0], b[t], f"token {t} fused hc_pre_norm {name}")


def test_norm_weight_is_checked():
    streams, w, head, _ = _inputs(2, 4, 64, torch.bfloat16)
    with pytest.raises(ValueError, match=r"hc_pre_norm: norm_weight must be a float tensor \[64\].*\[63\]"):
        ht.hc_pre_norm_triton(streams, w, torch.ones(63), sinkhorn_iters=ITERS, **EPS)
    with pytest.raises(ValueError, match=r"hc_head_norm: norm_weight must be a float tensor \[64\]"):
        ht.hc_head_norm_triton(streams, *head, torch.ones(64, dtype=torch.int32), **EPS)


def test_fused_norm_with_post_comb_in_a_launch_of_their_own():
    """The side stream's split (PART 2, then PART 1 with the norm) gives the one fused launch's bits."""
    streams, w, _, _ = _inputs(3, 4, 256, torch.bfloat16, seed=25)
    norm = (torch.rand(256, generator=torch.Generator().manual_seed(26)) + 0.5, EPS["rms_eps"])
    mixes = ht._mix_partials(streams, w.fn, EPS["rms_eps"])
    kw = dict(hc_eps=EPS["hc_eps"], sinkhorn_iters=ITERS, with_post=True, norm=norm)
    one = ht._finish(streams, mixes, w.base, w.scale, **kw)
    split = ht._finish(streams, mixes, w.base, w.scale, split_launch=True, **kw)
    want = hc_pre_norm_ref(streams, w, norm[0], sinkhorn_iters=ITERS, **EPS)
    for name, a, b, r in zip(("normed block input", "post", "comb"), split, one, want, strict=True):
        _assert_equal(a, b, f"split launch {name}")
        _assert_equal(b, r, f"one launch {name}")
    with pytest.raises(ValueError, match=r"the fused norm needs one D-block, got D=520 > 512"):
        wide, ww, _, _ = _inputs(1, 4, D, torch.bfloat16)
        ht._finish(wide, ht._mix_partials(wide, ww.fn, EPS["rms_eps"]), ww.base, ww.scale, **kw)
