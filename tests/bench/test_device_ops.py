"""The op split's bases: device kernel time on CUDA, synchronizing host timers elsewhere.

* `split_device_time` (pure) gives each host event's device seconds to its nearest labelled range:
  an op range → (owner, op), an owner span → (owner, "other"), none → ("preamble", "other"); it
  reports what it could not place and refuses a profile with nothing to split;
* `host_events` reads torch's `FunctionEvent`s: each host event id's kernels once (a duplicate
  host record sharing an op's id must not count them again), GPU-side annotation mirrors dropped;
* on the CPU the bench's split is the wall one and says so; device mode without kernels falls
  back to wall timers and says why; the op ranges and spans nest in a real model step as the
  attribution assumes (checked on the CPU by standing CPU time in for kernel time);
* the projection names the basis of the op it says holds the step back;
* on CUDA (`-m gpu`): every layer gets kernel time, the ops never add up to more than the step's
  kernels, and the kernel split sits inside the synchronizing timers' split.
"""

from __future__ import annotations

import pytest
import torch
from torch.autograd import DeviceType
from torch.autograd.profiler_util import EventList, FunctionEvent

import mxserve.bench.layers.device_ops as device_ops
from mxserve.bench.layers.device_ops import (
    DeviceSplitError,
    HostEvent,
    host_events,
    op_range_name,
    span_range_name,
    split_device_time,
)
from mxserve.bench.layers.op_split import OP_SPLIT_DEVICE, OP_SPLIT_WALL, resolve_op_split
from mxserve.bench.layers.run import LayersBenchOptions, project, projection_lines
from mxserve.bench.layers.timing import OpProfiler, weight_owners
from mxserve.testing.tiny_configs import get_config

US = 1e-6


# ------------------------------------------------------------------------------------------ pure attribution
def _synthetic_step() -> list[HostEvent]:
    """embedding (before any op) | layer 0: wq_b (a kernel on the range itself + one under aten::mm),
    a norm between ops (two levels of aten), | head: its linear."""
    op, span = op_range_name, span_range_name
    rows = [
        ("aten::embedding", None, 2.0),  # 0: before the first op → preamble
        (span("layer 0"), None, 0.0),  # 1
        (op("layer 0", "linear wq_b"), 1, 1.0),  # 2: a Triton launch linked to the range itself
        ("aten::mm", 2, 5.0),  # 3
        ("cudaLaunchKernel", 3, 0.0),  # 4
        ("aten::add", 1, 3.0),  # 5: model code between ops → other
        ("aten::copy_", 5, 1.0),  # 6: nested deeper, still other
        (span("head"), None, 0.0),  # 7
        (op("head", "linear head"), 7, 0.0),  # 8
        ("aten::mm", 8, 7.0),  # 9
    ]
    return [HostEvent(index=i, name=name, parent=parent, device_s=us * US) for i, (name, parent, us) in enumerate(rows)]


def test_device_time_goes_to_the_nearest_range_and_other_to_the_span():
    split = split_device_time(_synthetic_step(), total_device_s=19.5 * US, num_kernels=7)
    assert split.basis == OP_SPLIT_DEVICE
    assert split.ops_s["layer 0"] == pytest.approx({"linear wq_b": 6.0 * US, "other": 4.0 * US})
    assert split.ops_s["head"] == pytest.approx({"linear head": 7.0 * US})
    assert split.ops_s["preamble"] == pytest.approx({"other": 2.0 * US})
    assert split.spans_s == pytest.approx({"layer 0": 10.0 * US, "head": 7.0 * US, "preamble": 2.0 * US})
    assert split.total_s == pytest.approx(19.0 * US) and split.preamble_s == pytest.approx(2.0 * US)
    # 0.5 us of the recorded kernels was linked to no host event: reported, in no layer
    assert split.unattributed_s == pytest.approx(0.5 * US) and split.num_kernels == 7
    (note,) = split.notes
    assert "0.5 us" in note and "in no layer" in note


def test_a_profile_with_nothing_to_split_is_refused_not_zeros():
    with pytest.raises(DeviceSplitError, match="no device kernels"):
        split_device_time(_synthetic_step(), total_device_s=0.0, num_kernels=0)
    unlinked = [HostEvent(e.index, e.name, e.parent, 0.0) for e in _synthetic_step()]
    with pytest.raises(DeviceSplitError, match="linked none of them"):
        split_device_time(unlinked, total_device_s=4 * US, num_kernels=2)


def test_more_linked_than_recorded_time_is_said_to_over_count():
    split = split_device_time(_synthetic_step(), total_device_s=15.0 * US, num_kernels=7)
    (note,) = split.notes
    assert "linked some kernels twice" in note and "4.0 us" in note and split.unattributed_s == 0.0


# ------------------------------------------------------------------------------------------ torch's events
def _event(event_id: int, name: str, start_us: float, end_us: float, *, device: bool = False,
           annotation: bool = False) -> FunctionEvent:
    return FunctionEvent(id=event_id, name=name, thread=1, start_us=start_us, end_us=end_us, use_device="cuda",
                         device_type=DeviceType.CUDA if device else DeviceType.CPU, is_user_annotation=annotation)


def test_host_events_count_each_ids_kernels_once_and_drop_annotation_mirrors():
    span = _event(1, span_range_name("layer 0"), 0, 100, annotation=True)
    op = _event(2, op_range_name("layer 0", "linear wq_b"), 10, 50, annotation=True)
    mm = _event(3, "aten::mm", 12, 40)
    overhead = _event(3, "Lazy Function Loading", 13, 14)  # a host record sharing aten::mm's id
    add = _event(4, "aten::add", 60, 70)
    for host, kernels in ((mm, [("gemm", 8.0)]), (overhead, [("gemm", 8.0)]), (add, [("add_kernel", 2.0)]),
                          (op, [(op.name, 30.0)])):  # the range's GPU-side mirror, linked to the range
        for name, us in kernels:
            host.append_kernel(name, 0, us)
    device = [_event(10, "gemm", 200, 208, device=True), _event(11, "add_kernel", 210, 212, device=True),
              _event(12, op.name, 200, 230, device=True, annotation=True)]
    events = EventList([span, op, mm, overhead, add, *device], use_device="cuda")
    events._build_tree()  # what prof.events() hands over: parents set
    hosts, total_s, num_kernels = host_events(events)
    assert num_kernels == 2 and total_s == pytest.approx(10.0 * US)  # the annotation mirror is not work
    split = split_device_time(hosts, total_device_s=total_s, num_kernels=num_kernels)
    assert list(split.ops_s) == ["layer 0"]
    assert split.ops_s["layer 0"] == pytest.approx({"linear wq_b": 8.0 * US, "other": 2.0 * US})
    assert split.unattributed_s == 0.0 and not split.notes


# ------------------------------------------------------------------------------------------ the CPU basis
def test_op_split_mode_resolves_per_device_and_refuses_what_cannot_work():
    assert resolve_op_split("auto", torch.device("cpu")) == "wall"
    assert resolve_op_split("auto", torch.device("cuda")) == "device"
    assert resolve_op_split("wall", torch.device("cuda")) == "wall"
    with pytest.raises(ValueError, match="needs a CUDA device"):
        resolve_op_split("device", torch.device("cpu"))
    with pytest.raises(ValueError, match="op_split='kernel' is not one of"):
        LayersBenchOptions(config="tiny-all", num_layers=1, device="cpu", prefill_tokens=0, decode_batches=(1,),
                           contexts=(8,), reps=1, warmup=0, numerics="faithful", bandwidth_tb_s=1.0,
                           peak_tflops=1.0, seed=0, op_split="kernel")


def _tiny_step(device: torch.device):
    from mxserve.bench.layers.build import bench_config, layer_plan, random_weights
    from mxserve.bench.layers.cache import build_cache_state
    from mxserve.bench.layers.kernels import build_bench_model
    from mxserve.model.forward_batch import ForwardBatch

    full = get_config("tiny-all")
    config = bench_config(full, layer_plan(full, 3))
    model, _ = build_bench_model(config, random_weights(config, device, num_threads=1), device=device,
                                 numerics="faithful", overrides={}, source="test", max_model_len=128)
    state = build_cache_state(config, model.policy, num_seqs=1, context_len=40, new_tokens=1, block_size=16,
                              device=device)
    batch = ForwardBatch.from_chunks([[7]], [0], [40], logits_for="last", device=device)

    def step() -> None:
        model.forward(batch, state)

    step()  # warm: first-call work out of the profiled step
    return model, step


def _profiled(model, step, mode: str, device: torch.device):
    profiler = OpProfiler(weight_owners(model), device, mode=mode)
    plain = model.kernels
    model.set_kernels(profiler.kernels(plain))
    try:
        return profiler.profile_step(step)
    finally:
        model.set_kernels(plain)


def test_device_mode_without_kernels_falls_back_to_wall_timers_and_says_why():
    cpu = torch.device("cpu")
    model, step = _tiny_step(cpu)
    split = _profiled(model, step, "device", cpu)
    assert split.basis == OP_SPLIT_WALL
    assert split.notes[0].startswith("no device kernel time to split (the profiler recorded no device kernels")
    assert {f"layer {i}" for i in range(3)} | {"head"} <= set(split.spans_s)
    assert all(split.spans_s[f"layer {i}"] > 0 for i in range(3))


_real_host_events = device_ops.host_events


def _cpu_time_as_device_time(function_events):
    """`host_events` with every aten op's self CPU time standing in for the kernels it launched."""
    function_events = list(function_events)
    hosts, _, _ = _real_host_events(function_events)
    cpu_events = [e for e in function_events if e.device_type == DeviceType.CPU]
    stood_in = [HostEvent(h.index, h.name, h.parent, e.self_cpu_time_total * US if e.name.startswith("aten::") else 0.0)
                for h, e in zip(hosts, cpu_events, strict=True)]
    return stood_in, sum(h.device_s for h in stood_in), sum(h.device_s > 0 for h in stood_in)


def test_op_ranges_and_spans_nest_in_a_real_step_as_the_attribution_assumes(monkeypatch):
    """CPU time of every aten op stands in for kernel time: the ranges the op profiler opens around a
    real tiny model step must then place every layer's ops under that layer with the wall mode's
    labels, the model code between ops under the layer's "other", and lose nothing."""
    cpu = torch.device("cpu")
    model, step = _tiny_step(cpu)
    wall = _profiled(model, step, "wall", cpu)
    monkeypatch.setattr(device_ops, "host_events", _cpu_time_as_device_time)
    split = _profiled(model, step, "device", cpu)
    assert split.basis == OP_SPLIT_DEVICE and not split.notes and split.unattributed_s == 0.0
    assert sum(split.spans_s.values()) == pytest.approx(split.total_s)
    for owner in [f"layer {i}" for i in range(3)] + ["head"]:
        assert split.spans_s[owner] > 0, owner
        assert set(split.ops_s[owner]) - {"other"} <= set(wall.ops_s[owner]), owner  # the same labels
    assert any(op.startswith("linear ") for op in split.ops_s["layer 0"])
    assert split.ops_s["layer 0"].get("other", 0.0) > 0  # norms, mHC, cache writes between ops


def test_a_device_basis_run_records_its_basis_beside_the_old_keys(tmp_path, monkeypatch):
    """The whole bench on the device basis (CPU time standing in for kernels): rows and projection
    carry the basis and kernel seconds, every older key is still there, layer times still add up to
    the eager step, and the printed lines name the basis."""
    import mxserve.bench.layers.run as run

    monkeypatch.setattr(run, "resolve_op_split", lambda requested, device: "device")
    monkeypatch.setattr(device_ops, "host_events", _cpu_time_as_device_time)
    opts = LayersBenchOptions(config="tiny-all", num_layers=3, device="cpu", prefill_tokens=0, decode_batches=(1,),
                              contexts=(40,), reps=1, warmup=0, numerics="faithful", bandwidth_tb_s=1.0,
                              peak_tflops=1.0, seed=0)
    lines: list[str] = []
    result = run.run_layers_bench(opts, tmp_path / "layers.json", echo=lines.append)
    (row,) = result["scenarios"]
    assert "error" not in row, row.get("error")
    assert result["meta"]["op_split_mode"] == "device" and row["op_split"] == OP_SPLIT_DEVICE
    assert row["num_kernels"] > 0 and row["unattributed_kernel_s"] == 0.0 and not row["op_split_notes"]
    parts = [*row["layers"], row["head"]]
    for part in parts:
        assert {"time_s", "ops_s", "top_op", "ratio_to_bandwidth_floor", "kernel_s"} <= set(part)
        assert part["kernel_s"] > 0 and sum(part["ops_s"].values()) == pytest.approx(part["kernel_s"])
    assert sum(p["kernel_s"] for p in parts) + row["preamble_kernel_s"] == pytest.approx(row["kernel_s"])
    assert sum(p["time_s"] for p in parts) + row["preamble_s"] == pytest.approx(row["step_median_s"])
    (projection,) = result["projection"]
    assert projection["op_split"] == OP_SPLIT_DEVICE and projection["bottleneck_op"] in projection["kernel_ops_s"]
    printed = "\n".join(lines)
    assert f"ops by {OP_SPLIT_DEVICE}" in printed and "kernels " in printed
    assert "% of the projected kernel time, layers + head); worst layer" in printed


# ------------------------------------------------------------------------------------------ the projection
def _row(basis: str) -> dict:
    layer = {"owner": "layer 0", "kind": "csa", "time_s": 0.006, "bandwidth_floor_s": 0.001,
             "ratio_to_bandwidth_floor": 6.0,
             "ops_s": {"linear wq_b": 40 * US, "moe_experts": 100 * US, "other": 20 * US}}
    head = {"owner": "head", "kind": "head", "time_s": 0.003, "bandwidth_floor_s": 0.0005,
            "ops_s": {"linear head": 200 * US}}
    return {"scenario": {"name": "decode b1 ctx64", "phase": "decode", "num_seqs": 1, "context_len": 64,
                         "new_tokens": 1},
            "eager_s": 0.010, "step_median_s": 0.010, "graph_median_s": None,
            "graph_status": "not captured: device is cpu", "preamble_s": 0.001, "layers": [layer], "head": head,
            "op_split": basis, "op_split_notes": ["a note from the split"]}


def test_projection_names_the_basis_of_the_op_that_holds_it_back():
    full = get_config("tiny-all")  # 6 layers, all timed as the one csa layer here
    opts = LayersBenchOptions(config="tiny-all", num_layers=1, device="cpu", prefill_tokens=0, decode_batches=(1,),
                              contexts=(64,), reps=1, warmup=0, numerics="faithful", bandwidth_tb_s=1.0,
                              peak_tflops=1.0, seed=0)
    (device,) = project([_row(OP_SPLIT_DEVICE)], full, opts)
    # kernel time: 6 × (40 + 100 + 20) us of layers + 200 us of head
    assert device["kernel_ops_s"] == pytest.approx({"moe_experts": 600 * US, "linear wq_b": 240 * US,
                                                     "other": 120 * US, "head linear head": 200 * US})
    assert device["bottleneck_op"] == "moe_experts" and device["bottleneck_share"] == pytest.approx(600 / 1160)
    assert device["op_split"] == OP_SPLIT_DEVICE and "a note from the split" in device["notes"]
    assert device["step_s"] == pytest.approx(6 * 0.006 + 0.003 + 0.001)  # timing does not move with the basis
    assert sum(device["ops_s"].values()) == pytest.approx(device["step_s"] - 0.001)  # all but the preamble
    line, *rest = projection_lines([device])
    assert "held back by moe_experts (52% of the projected kernel time, layers + head)" in line
    assert f"  op split: {OP_SPLIT_DEVICE}" in rest

    (wall,) = project([_row(OP_SPLIT_WALL)], full, opts)
    assert wall["kernel_ops_s"] is None and wall["bottleneck_basis"] == "of the step"
    assert wall["bottleneck_op"] == "moe_experts" and f"  op split: {OP_SPLIT_WALL}" in projection_lines([wall])
    old = {k: v for k, v in _row(OP_SPLIT_WALL).items() if not k.startswith("op_split")}  # an earlier result file
    (earlier,) = project([old], full, opts)
    assert earlier["op_split"] == OP_SPLIT_WALL and "% of the step)" in projection_lines([earlier])[0]


# ------------------------------------------------------------------------------------------ on CUDA
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_split_is_kernel_time_inside_the_wall_timers():
    cuda = torch.device("cuda")
    model, step = _tiny_step(cuda)
    wall = _profiled(model, step, "wall", cuda)
    split = _profiled(model, step, "device", cuda)
    assert split.basis == OP_SPLIT_DEVICE, split.notes  # a fallback would name the reason here
    assert split.num_kernels > 0 and split.total_s > 0
    for owner in [f"layer {i}" for i in range(3)] + ["head"]:
        assert split.spans_s[owner] > 0, (owner, split.ops_s.get(owner))
        assert set(split.ops_s[owner]) - {"other"} <= set(wall.ops_s[owner]), owner
    placed = sum(sum(ops.values()) for ops in split.ops_s.values())
    assert placed == pytest.approx(split.total_s)
    assert placed <= split.total_s + split.unattributed_s + 1e-9  # never more than the step's kernels
    # A kernel runs between the two synchronizations that time its op, so summed over the step's
    # ops (not "other") the kernel time cannot exceed the synchronized wall time.
    kernel_ops = sum(v for ops in split.ops_s.values() for k, v in ops.items() if k != "other")
    wall_ops = sum(v for ops in wall.ops_s.values() for k, v in ops.items() if k != "other")
    assert 0 < kernel_ops <= wall_ops
