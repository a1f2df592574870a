"""CUDA timing shared by the benchmark scripts (imported as a sibling module: the scripts run as
`python benchmarks/<name>.py`, which puts this folder on sys.path)."""

from __future__ import annotations

import statistics

import torch


def _timed(fn) -> float:
    """Seconds of one `fn()` between two CUDA events."""
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    fn()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) * 1e-3


def event_time(fn, reps: int = 5) -> float:
    """Median seconds of `fn()` over `reps` runs after one warm-up."""
    fn()
    torch.cuda.synchronize()
    return statistics.median(_timed(fn) for _ in range(reps))


def copy_bandwidth() -> float:
    """Device-to-device copy of 2 GiB, bytes read + written per second (the memory ceiling)."""
    src = torch.empty(1 << 31, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    return 2 * src.numel() / event_time(lambda: dst.copy_(src), reps=10)


def graph_time(calls: list, replays: int = 15) -> float:
    """Median seconds per call: one CUDA graph runs every closure in `calls` once (rotating inputs)."""
    for fn in calls:  # compile and warm up outside the capture
        fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        for fn in calls:
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    for _ in range(3):
        graph.replay()
    return statistics.median(_timed(graph.replay) for _ in range(replays)) / len(calls)


def profiled_once(calls: list) -> None:
    """Each of `calls` once between cudaProfilerStart/Stop, so `ncu --profile-from-start off` sees
    exactly those launches (the caller has warmed them up)."""
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for fn in calls:
        fn()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
