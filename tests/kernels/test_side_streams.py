"""Side lanes (kernels/side_streams.py): fork/join, the lane of the current stream, per-lane scratch.

CPU: every call is a no-op off the GPU (the launches run in program order), MAIN is no side lane.
GPU (marked, skipped without CUDA): a lane sees what the caller queued before the fork, the caller
sees the lane's work after the join (a slow lane kernel would otherwise be overtaken), a lane knows
itself inside its fork, the linears' split-K counters are one buffer per lane, and two fused
split-K linears running at once on two lanes give the bits they give one after the other (with
one shared counter buffer their arrivals would mix); fork/join inside a CUDA graph capture.
"""

from __future__ import annotations

import pytest
import torch

from mxserve.kernels import side_streams
from mxserve.kernels.side_streams import MAIN, current_lane, fork, join, lane_stream, pending

CUDA = torch.cuda.is_available()


def test_off_the_gpu_forks_run_inline_and_hold_nothing():
    cpu = torch.device("cpu")
    x = torch.arange(4.0)
    with fork(cpu, "a", keep=(x,)):
        assert current_lane(cpu) == MAIN
        y = x * 2
    join(cpu, "a")
    assert torch.equal(y, torch.tensor([0.0, 2.0, 4.0, 6.0]))
    assert pending() == [] and not side_streams._held


def test_main_is_not_a_side_lane():
    with pytest.raises(ValueError, match="caller's stream"):
        lane_stream(torch.device("cuda", 0), MAIN)


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_gpu_fork_and_join_order_the_lane_against_the_caller():
    dev = torch.device("cuda")
    a = torch.randn(2048, 2048, device=dev)
    for _ in range(3):
        b = a @ a  # queued on the caller's stream before the fork: the lane must see it
        with fork(dev, "test lane", keep=(b,)):
            assert current_lane(dev) == "test lane"
            c = b @ b  # slow enough that an unjoined read would overtake it
            for _ in range(4):
                c = c @ a
        assert current_lane(dev) == MAIN
        assert pending(dev) == ["test lane"]
        join(dev, "test lane")
        assert pending(dev) == []
        got = c.sum()  # on the caller's stream, after the join
        want = b @ b
        for _ in range(4):
            want = want @ a
        torch.cuda.synchronize()
        assert torch.equal(got, want.sum())


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_gpu_counters_are_per_lane_and_concurrent_linears_keep_their_bits():
    from tests.kernels.linear_fp8_block.test_linear_fp8_block import weight

    from mxserve.kernels.linear_fp8_block.triton import launch_linear_fp8_block, split_counters

    dev = torch.device("cuda")
    with fork(dev, "lane a"):
        buf_a = split_counters(dev, 1)
    join(dev, "lane a")
    assert split_counters(dev, 1).data_ptr() != buf_a.data_ptr(), "the main lane shares lane a's counters"

    gen = torch.Generator().manual_seed(0)
    weights = [weight(4096, 4096, seed=1), weight(2048, 4096, seed=2)]  # split-K decode launches, fused sums
    xs = [torch.randn(4, 4096, generator=gen).to(dev, torch.bfloat16) for _ in weights]
    want = [launch_linear_fp8_block(x, w) for x, w in zip(xs, weights, strict=True)]
    for _ in range(20):
        got = []
        for lane, (x, w) in zip(("lane a", "lane b"), zip(xs, weights, strict=True), strict=True):
            with fork(dev, lane, keep=(x,)):
                got.append(launch_linear_fp8_block(x, w))
        join(dev, "lane a")
        join(dev, "lane b")
        torch.cuda.synchronize()
        for g, w_ in zip(got, want, strict=True):
            assert torch.equal(g, w_)


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_gpu_forks_are_captured_as_branches():
    dev = torch.device("cuda")
    a = torch.randn(512, 512, device=dev)

    def step(x):
        with fork(dev, "graph lane", keep=(x,)):
            side = (x @ a).relu()
        main = x @ a.T
        join(dev, "graph lane")
        return main + side

    want = step(a)  # eager first: the lane's stream is made outside the capture
    graph, capture = torch.cuda.CUDAGraph(), torch.cuda.Stream()
    capture.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(capture), torch.cuda.graph(graph, stream=capture):
        out = step(a)
    torch.cuda.current_stream().wait_stream(capture)
    assert pending() == []
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, want)
