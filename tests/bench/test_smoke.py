"""CI smoke runs of both benchmarks on the CPU, through the real command line.

`bench serve` starts two `mxserve serve` subprocesses on the default model (capped and uncapped
chunked prefill), sweeps 1 and 2 streams on both prompt sets, and runs the scenario once;
`bench layers` builds the three tiny-all layer kinds and times a prefill and two decode steps.
Tiny shapes: these prove the pipelines run end to end and report consistent numbers, not speed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from mxserve.bench.layers.op_split import OP_SPLIT_WALL

pytest.importorskip("httpx")


def _run(args: list[str], timeout_s: float) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "mxserve.cli.main", "bench", *args], capture_output=True, text=True,
                          timeout=timeout_s, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def test_bench_serve_smoke(tmp_path):
    out = tmp_path / "serve.json"
    proc = _run(["serve", "--device", "cpu", "--concurrency", "1,2", "--dataset", "text,random", "--prompt-len", "8",
                 "--output-len", "4", "--requests-per-client", "1", "--max-model-len", "256",
                 "--max-num-batched-tokens", "96", "--prefill-cap", "16", "--scenario-reps", "1", "--out", str(out)],
                timeout_s=240)
    result = json.loads(out.read_text())
    levels = {(lv["dataset"], lv["concurrency"]): lv for lv in result["levels"]}
    assert set(levels) == {("text", 1), ("text", 2), ("random", 1), ("random", 2)}
    for level in levels.values():
        assert level["num_errors"] == 0, level["first_errors"]
        assert level["num_requests"] == level["concurrency"]
        assert level["total_output_tokens"] == 4 * level["num_requests"]
        assert level["aggregate_output_tok_s"] > 0 and 0 < level["ttft_p50_s"] <= level["ttft_p99_s"]
        assert 0 < level["itl_p50_s"] <= level["itl_p99_s"]
    scenario = result["prefill_cap"]
    assert scenario["no_cap"]["long_prefill_token_threshold"] == 96 and scenario["cap"]["long_prefill_token_threshold"] == 16
    assert not scenario["no_cap"]["errors"] and not scenario["cap"]["errors"]
    # Uncapped, the short request waits for the whole 96-token prefill step; capped, it shares the first step.
    assert scenario["cap"]["short_ttft_median_s"] < scenario["no_cap"]["short_ttft_median_s"]
    assert "short request" in proc.stdout and (tmp_path / "serve.server.log").exists()
    assert (tmp_path / "serve.png").exists() or "plot skipped" in proc.stdout


def test_bench_layers_smoke(tmp_path):
    out = tmp_path / "layers.json"
    proc = _run(["layers", "--config", "tiny-all", "--layers", "3", "--device", "cpu", "--prefill-tokens", "32",
                 "--batches", "1,2", "--contexts", "70", "--reps", "1", "--warmup", "0", "--out", str(out)], timeout_s=240)
    result = json.loads(out.read_text())
    assert result["meta"]["layer_kinds"] == ["sliding", "csa", "hca"]  # tiny-all has two of each: its order
    names = [row["scenario"]["name"] for row in result["scenarios"]]
    assert names == ["decode b1 ctx70", "prefill 32", "decode b2 ctx70"]  # batch 1 first
    assert result["meta"]["kernel_builder"].startswith("mxserve.model.kernel_selection.build_engine_model")
    assert result["meta"]["kernels"]["linear"] == "reference" and result["meta"]["linear_backend"] == "reference-resident"
    for row in result["scenarios"]:
        assert "error" not in row, row.get("error")
        assert row["op_split"] == OP_SPLIT_WALL and row["kernel_s"] is None  # the CPU's op split: host timers
        assert row["eager_s"] == row["step_median_s"] and row["graph_s"] is None  # no CUDA graphs on the CPU, said:
        assert row["graph_status"] in ("not captured: device is cpu (CUDA graphs need a CUDA device)",
                                       "prefill: the engine runs it eager")
        parts = [*row["layers"], row["head"]]
        assert all(p["time_s"] > 0 and p["bytes"] > 0 and p["ratio_to_bandwidth_floor"] > 1 for p in parts)
        # layer spans (scaled to the plain step) and the preamble add up to the step
        assert sum(p["time_s"] for p in parts) + row["preamble_s"] == pytest.approx(row["step_median_s"], rel=1e-6)
        routed = [layer["bytes_split"]["routed_experts"] for layer in row["layers"]]
        assert all(r > 0 for r in routed)  # captured from the route op
    (projection,) = result["projection"]
    assert projection["label"].startswith("PROJECTION") and projection["context_len"] == 70
    assert projection["tok_s"] == pytest.approx(1 / projection["step_s"])
    assert projection["bottleneck_op"] in projection["ops_s"] and "PROJECTION ctx 70 [eager]" in proc.stdout
    assert not projection["is_graph"] and projection["timing"].startswith("eager (no graph: not captured: device is cpu")
    assert result["meta"]["op_split_mode"] == "wall" and projection["op_split"] == OP_SPLIT_WALL
    assert "% of the step); worst layer" in proc.stdout and f"op split: {OP_SPLIT_WALL}" in proc.stdout
