"""bench layers on a CUDA device: the engine's kernels, eager and CUDA-graph decode timed, said which.

Tiny shapes (tiny-all), so it runs in seconds; the full-size run is the command in
docs/benchmarks.md. With every Triton backend forced, each decode scenario either reports a
graph replay time (and the projection then uses it and says so) or says exactly why no graph
was captured (the engine's sync probe or capture reason) — never an eager number as `graph_s`.
On CUDA the op split is device kernel time (torch.profiler), and the projection line says so.
"""

from __future__ import annotations

import pytest
import torch

from mxserve.bench.layers.kernels import parse_kernels_option
from mxserve.bench.layers.op_split import OP_SPLIT_DEVICE
from mxserve.bench.layers.run import LayersBenchOptions, run_layers_bench

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


@pytest.mark.parametrize("kernels", ["linear=triton,moe=triton,attention=triton", None])
def test_layers_bench_times_graph_replay_or_says_why(tmp_path, kernels, monkeypatch):
    monkeypatch.delenv("MXSERVE_KERNEL_OVERRIDES", raising=False)
    overrides, source = parse_kernels_option(kernels)
    opts = LayersBenchOptions(config="tiny-all", num_layers=3, device="cuda", prefill_tokens=64, decode_batches=(1, 3),
                              contexts=(70,), reps=3, warmup=1, numerics="faithful", bandwidth_tb_s=4.27,
                              peak_tflops=790.0, seed=0, time_budget_s=300.0, kernel_overrides=overrides,
                              kernel_source=source)
    lines: list[str] = []
    result = run_layers_bench(opts, tmp_path / "layers.json", echo=lines.append)
    meta = result["meta"]
    if kernels:
        assert meta["kernels"]["sparse_attention"] == "triton" and meta["kernels"]["moe_experts"] == "triton"
        assert meta["linear_backend"] == "triton" and meta["kernels"]["linear"].startswith("per layer: ")
    decodes = [r for r in result["scenarios"] if r["scenario"]["phase"] == "decode"]
    assert len(decodes) == 2
    for row in decodes:
        assert "error" not in row, row["error"]
        assert row["op_split"] == OP_SPLIT_DEVICE, row["op_split_notes"]  # a fallback says why
        assert row["num_kernels"] > 0 and all(layer["kernel_s"] > 0 for layer in row["layers"])
        assert sum(layer["kernel_s"] for layer in row["layers"]) + row["head"]["kernel_s"] <= row["kernel_s"] * (1 + 1e-9)
        if row["graph_median_s"] is None:
            assert row["graph_status"].startswith("not captured: ") and len(row["graph_status"]) > 20, row
        else:
            assert row["graph_status"].startswith("replayed (bucket ") and row["graph_median_s"] > 0
            assert row["graph_bucket"] == {1: 1, 3: 4}[row["scenario"]["num_seqs"]]
    (projection,) = result["projection"]
    b1 = next(r for r in decodes if r["scenario"]["num_seqs"] == 1)
    assert projection["is_graph"] == (b1["graph_median_s"] is not None)
    assert projection["timing"].startswith("CUDA-graph replay" if projection["is_graph"] else "eager (no graph: ")
    if b1["graph_median_s"] is not None:  # one more layer of each built kind was replayed too
        assert set(b1["graph_marginal_s"]) == {layer["kind"] for layer in b1["layers"]}, b1["graph_marginal_status"]
        assert projection["is_marginal"] and all(v > 0 for v in b1["graph_marginal_s"].values())
    printed = "\n".join(lines)
    assert "graph ms" in printed and b1["graph_status"] in printed
    assert projection["op_split"] == OP_SPLIT_DEVICE and projection["kernel_ops_s"]
    assert "% of the projected kernel time, layers + head); worst layer" in printed
    print(printed)  # the evidence, for -s runs
