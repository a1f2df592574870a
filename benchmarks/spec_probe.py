"""Whether the graphed speculative step runs on this GPU: one short greedy generate with DSpark K=3
on the packaged default model (every Triton kernel); prints the graphs' state and the eager reasons.
Exit status 1 when the graphs are unavailable. With --profile, then one timed 128-token generate:
host seconds per step in each part of the step (wall clocks around the calls; a part's wall
includes waiting for the device when it reads a result) and device seconds per replay of each
captured graph (CUDA events over back-to-back replays). With --busy, one more 64-token generate under
torch.profiler: the wall time per step and the share of it the GPU spent in kernels (is the step
bound by the device or by the host?). --lookahead turns the draft lookahead on (MXSERVE_SPEC_LOOKAHEAD=1);
--k=N drafts N tokens (default 3).

    PYTHONPATH=src python benchmarks/spec_probe.py [--profile] [--busy] [--lookahead] [--k=N]
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections import defaultdict

import torch

from mxserve import LLM, SamplingParams
from mxserve.kernels.chooser import ALL_TRITON

if "--lookahead" in sys.argv:
    os.environ["MXSERVE_SPEC_LOOKAHEAD"] = "1"
K = next((int(a.split("=", 1)[1]) for a in sys.argv if a.startswith("--k=")), 3)

llm = LLM(device="cuda", max_model_len=512, kernel_overrides=ALL_TRITON, progress=False,
          speculative_config={"method": "dspark", "num_speculative_tokens": K})
llm.generate([[0, 7, 8, 9, 10]], SamplingParams(max_tokens=16, temperature=0, ignore_eos=True))
runner = llm.engine.runner
graphs = runner.step_graphs
print("graphed steps:", graphs.num_steps, "| unavailable:", graphs.unavailable)
print("eager reasons:", dict(runner.eager_stats.counts))
ok = graphs.unavailable is None and graphs.num_steps > 0
if ok and "--profile" in sys.argv:
    walls: dict[str, list[float]] = defaultdict(list)

    def timed(owner, name: str, label: str) -> None:
        real = getattr(owner, name)

        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            out = real(*args, **kwargs)
            walls[label].append(time.perf_counter() - start)
            return out
        setattr(owner, name, wrapper)

    timed(llm.engine, "step", "engine.step (whole)")
    timed(runner, "execute", "runner.execute")
    timed(graphs, "draft_tokens", "draft: stage + replay")
    timed(graphs, "verify", "verify: stage + replay")
    timed(graphs, "finish", "finish: mask + post replay")
    timed(graphs, "finish_on_device", "finish on device: post replay")
    timed(graphs, "draft_ahead", "draft ahead: inputs + replay")
    timed(llm.engine.scheduler, "schedule", "scheduler.schedule")
    llm.generate([[0, *range(20, 44)]], SamplingParams(max_tokens=128, temperature=0, ignore_eos=True))
    print("drafts taken from the lookahead:", graphs.num_ahead_used, "of", graphs.num_steps, "graphed steps")
    for label, values in walls.items():
        print(f"host {label:<28} n={len(values):4d} median {statistics.median(values) * 1e3:7.3f} ms")

    def device_ms(graph) -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(50):
            graph.replay()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 50
    for bucket, entry in graphs._drafts.items():
        print(f"device draft graph   bucket {bucket:3d}: {device_ms(entry.graph):.3f} ms")
    for bucket, entry in graphs._verifies.items():
        print(f"device verify graph  bucket {bucket:3d}: {device_ms(entry.graph):.3f} ms")
        print(f"device post graph    bucket {bucket:3d}: {device_ms(entry.post_graph):.3f} ms")
    print("(the verify/post replays above rewrite the finished request's slots: timing only)")
if ok and "--busy" in sys.argv:
    from torch.profiler import ProfilerActivity, profile

    steps_before = graphs.num_steps
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        start = time.perf_counter()
        llm.generate([[0, *range(50, 74)]], SamplingParams(max_tokens=64, temperature=0, ignore_eos=True))
        torch.cuda.synchronize()
        wall = time.perf_counter() - start
    steps = graphs.num_steps - steps_before
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    busy = sum(e.time_range.elapsed_us() for e in kernels) * 1e-6  # µs → s
    print(f"busy: {steps} graphed steps in {wall * 1e3:.1f} ms ({wall / max(steps, 1) * 1e3:.3f} ms/step, "
          f"profiler on); GPU kernel time {busy * 1e3:.1f} ms = {busy / wall:.0%} of the wall, "
          f"{len(kernels)} kernels")
sys.exit(0 if ok else 1)
