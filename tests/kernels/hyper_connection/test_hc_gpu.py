"""The session-7 hc kernels on CUDA (`-m gpu`): the same bits as the kernels they replace.

* new vs old (MXSERVE_HC_OLD_KERNELS=1 in the same process): hc_pre (block input, post, comb),
  hc_post (with and without the MoE addend) and hc_head at the Flash shape (hc 4, D 4096), hc_pre
  at the default model's (D 256; the others differ from Flash's only by a prefetch), 1, 8 and 67
  tokens, BF16 streams of mixed magnitudes; torch.equal;
* at Flash also post and comb in fp64, before their fp32 rounding: the new comb runs the old
  build's fp64 operations in the old order, so even these are equal (a changed order of the
  4-element sums would show in the last bits of most values; at the default shape the old build
  summed columns as a tree, the new one in order: only the fp32 outputs are compared there);
* the side stream (MXSERVE_HC_SIDE_STREAM=1): hc_pre → a block that allocates and writes on the
  caller's stream → hc_post gives the one-stream bits, eagerly and replayed from a CUDA graph
  (the fork and join captured as a branch), and the graph leaves nothing unjoined;
* against the CUDA twins at the Flash shape (the kernels' contract: the twins' bits in practice).
"""

from __future__ import annotations

import pytest
import torch

from mxserve.kernels.hyper_connection import HyperConnectionWeights, hc_head_ref, hc_post_ref, hc_pre_ref

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

EPS = dict(hc_eps=1e-6, rms_eps=1e-6)
ITERS = 20


def _inputs(num_tokens: int, dim: int, seed: int, hc: int = 4):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    n = (2 + hc) * hc
    scale = torch.rand(num_tokens, 1, 1, generator=gen, device="cuda") * 4 + 0.1
    streams = (torch.randn(num_tokens, hc, dim, generator=gen, device="cuda") * scale).bfloat16()
    w = HyperConnectionWeights(torch.randn(n, hc * dim, generator=gen, device="cuda") * 0.05,
                               torch.randn(n, generator=gen, device="cuda"), torch.rand(3, generator=gen, device="cuda") + 0.5)
    head = (torch.randn(hc, hc * dim, generator=gen, device="cuda") * 0.05, torch.randn(hc, generator=gen, device="cuda"),
            torch.rand(1, generator=gen, device="cuda") + 0.5)
    routed = torch.randn(num_tokens, dim, generator=gen, device="cuda")
    shared = torch.randn(num_tokens, dim, generator=gen, device="cuda")
    return streams, w, head, routed, shared


def _run_all(streams, w, head, routed, shared, *, pre_only: bool = False) -> dict[str, torch.Tensor]:
    from mxserve.kernels.hyper_connection import triton as ht

    block_in, post, comb = ht.hc_pre_triton(streams, w, sinkhorn_iters=ITERS, **EPS)
    out = {"block input": block_in, "post": post, "comb": comb}
    if pre_only:
        return out
    out["hc_post"] = ht.hc_post_triton(routed.bfloat16(), streams, post, comb)
    out["hc_post + addend"] = ht.hc_post_triton(routed, streams, post, comb, addend=shared)
    out["hc_head"] = ht.hc_head_triton(streams, *head, **EPS)
    return out


def _assert_same(got: dict, want: dict, what: str) -> None:
    for name in want:
        a, b = got[name], want[name]
        if not torch.equal(a, b):
            bad = (a != b).nonzero()
            idx = tuple(bad[0].tolist())
            raise AssertionError(f"{what} {name}: {len(bad)} of {a.numel()} differ; first at {idx}: "
                                 f"{a[idx].item()!r} vs {b[idx].item()!r}")


@pytest.mark.parametrize("dim", [4096, 256], ids=["flash", "default"])
def test_new_kernels_equal_the_old_bitwise(dim, monkeypatch):
    for num_tokens in (1, 8, 67):
        args = _inputs(num_tokens, dim, seed=num_tokens + dim)
        monkeypatch.setenv("MXSERVE_HC_OLD_KERNELS", "1")
        old = _run_all(*args, pre_only=dim != 4096)
        monkeypatch.delenv("MXSERVE_HC_OLD_KERNELS")
        new = _run_all(*args, pre_only=dim != 4096)
        _assert_same(new, old, f"D {dim} T {num_tokens}: new vs old")


@pytest.mark.parametrize("num_tokens", [1, 67])
def test_flash_post_and_comb_in_fp64_equal_the_old(num_tokens, monkeypatch):
    from mxserve.kernels.hyper_connection import triton as ht

    streams, w, _, _, _ = _inputs(num_tokens, 4096, seed=100 + num_tokens)
    got = {}
    for name in ("old", "new"):
        if name == "old":
            monkeypatch.setenv("MXSERVE_HC_OLD_KERNELS", "1")
        else:
            monkeypatch.delenv("MXSERVE_HC_OLD_KERNELS")
        mixes = ht._mix_partials(streams, w.fn, EPS["rms_eps"])
        _, post, comb = ht._finish(streams, mixes, w.base, w.scale, hc_eps=EPS["hc_eps"], sinkhorn_iters=ITERS,
                                   with_post=True, post_dtype=torch.float64)
        got[name] = {"mixes": mixes, "post fp64": post, "comb fp64": comb}
    _assert_same(got["new"], got["old"], f"T {num_tokens}: new vs old")


def test_flash_kernels_equal_the_cuda_twins():
    streams, w, head, routed, _ = _inputs(8, 4096, seed=1)
    new = _run_all(streams, w, head, routed, routed)
    block_in, post, comb = hc_pre_ref(streams, w, sinkhorn_iters=ITERS, **EPS)
    _assert_same(new, {"block input": block_in, "post": post, "comb": comb}, "vs twin")
    _assert_same(new, {"hc_post": hc_post_ref(routed.bfloat16(), streams, post, comb),
                       "hc_head": hc_head_ref(streams, *head, **EPS)}, "vs twin")


def _layer(streams, w, block_w):
    """hc_pre → a stand-in block on the caller's stream (allocates, reads block_in) → hc_post."""
    from mxserve.kernels.hyper_connection import triton as ht

    block_in, post, comb = ht.hc_pre_triton(streams, w, sinkhorn_iters=ITERS, **EPS)
    f = (block_in.float() @ block_w).tanh()  # fresh allocations on the caller's stream meanwhile
    return ht.hc_post_triton(f, streams, post, comb), post, comb


@pytest.mark.parametrize("num_tokens", [1, 8])
def test_side_stream_gives_the_same_bits_eager_and_in_a_graph(num_tokens, monkeypatch):
    from mxserve.kernels import side_streams

    streams, w, _, _, _ = _inputs(num_tokens, 4096, seed=7 + num_tokens)
    block_w = torch.randn(4096, 4096, device="cuda") * 0.01
    want = _layer(streams, w, block_w)
    monkeypatch.setenv("MXSERVE_HC_SIDE_STREAM", "1")
    eager = _layer(streams, w, block_w)
    torch.cuda.synchronize()
    for name, a, b in zip(("hc_post", "post", "comb"), eager, want, strict=True):
        assert torch.equal(a, b), f"side stream eager {name}"
    assert not side_streams.pending(), "hc_post joined the side stream"

    graph, capture = torch.cuda.CUDAGraph(), torch.cuda.Stream()
    capture.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(capture), torch.cuda.graph(graph, stream=capture):
        replayed = _layer(_layer(streams, w, block_w)[0], w, block_w)  # two layers: fork, join, fork, join
    torch.cuda.current_stream().wait_stream(capture)
    assert not side_streams.pending(), "the captured hc_posts joined every fork"
    graph.replay()
    torch.cuda.synchronize()
    monkeypatch.delenv("MXSERVE_HC_SIDE_STREAM")
    twice = _layer(want[0], w, block_w)
    for name, a, b in zip(("hc_post", "post", "comb"), replayed, twice, strict=True):
        assert torch.equal(a, b), f"side stream graph replay {name}"


def test_comb_sums_run_in_their_documented_orders_on_cuda():
    """The interpreter test's matrix through the compiled helpers (sm_90 code keeps the written order)."""
    from tests.kernels.hyper_connection.test_hc_triton import (
        test_comb_sums_run_in_their_documented_orders as run,
    )

    run()
