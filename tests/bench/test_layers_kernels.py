"""bench layers runs the engine's kernels: `--kernels`, the shared model builder, graph vs eager labels.

* `--kernels` has the MXSERVE_KERNEL_OVERRIDES syntax and validation, wins over the variable op by
  op, and a bad value is one `error:` line naming the op or backend and what is known (exit 2);
* the bench model is built by `build_engine_model`, the function `LLMEngine` builds its model
  with: for the same checkpoint and overrides both get the same per-op labels and chooser lines;
* forcing attention=triton on the command line (TRITON_INTERPRET=1 on the CPU) reaches the model:
  the JSON's labels and reasons say triton;
* the projection uses the CUDA-graph step when one was timed and says which timing it used;
* the device-built embedding/head rows are the host pool's rows up to a sign.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import pytest
import torch
from typer.testing import CliRunner

from mxserve.bench.layers.build import pooled_plain_tensor
from mxserve.bench.layers.kernels import build_bench_model, kernel_labels, parse_kernels_option
from mxserve.bench.layers.run import LayersBenchOptions, project
from mxserve.cli.main import app
from mxserve.model.checkpoint import CheckpointReader, build_inventory
from mxserve.testing.random_checkpoint import random_plain_tensor
from mxserve.testing.tiny_configs import get_config

runner = CliRunner()
ENV = "MXSERVE_KERNEL_OVERRIDES"


# ------------------------------------------------------------------------------------------ --kernels parsing
def test_kernels_option_wins_over_the_environment_op_by_op():
    env = {ENV: "moe=triton,attention=triton"}
    assert parse_kernels_option(None, {}) == ({}, f"engine defaults ({ENV} unset)")
    assert parse_kernels_option(None, env) == ({"moe": "triton", "attention": "triton"}, ENV)
    overrides, source = parse_kernels_option("attention=reference,linear=triton", env)
    assert overrides == {"moe": "triton", "attention": "reference", "linear": "triton"}
    assert source == f"--kernels, plus {ENV} for ['moe']"
    assert parse_kernels_option(" linear=triton , moe=triton-w4a8 ", {})[0] == {"linear": "triton",
                                                                                 "moe": "triton-w4a8"}


@pytest.mark.parametrize(("value", "expected"), [
    ("attention=fa3", "--kernels: attention='fa3': unknown backend; available for attention: ['reference', 'triton']"),
    ("topk=triton", "--kernels: unknown op 'topk'; known ops: ['attention', 'hc', 'linear', 'moe']"),
    ("moe=cutlass", "available for moe: ['reference', 'triton', 'triton-fused', 'triton-w4a8', 'triton-repack']"),
    ("linear", "--kernels 'linear': expected op=backend[,op=backend...]"),
    (",", "--kernels ',': no op=backend given"),
])
def test_bad_kernels_value_is_one_error_line_with_exit_2(value, expected):
    result = runner.invoke(app, ["bench", "layers", "--config", "tiny-all", "--device", "cpu", "--kernels", value])
    assert result.exit_code == 2, result.output
    err = result.stderr.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: ") and "Traceback" not in result.output, err
    assert expected in err, err


def test_bad_environment_value_is_refused_too(monkeypatch):
    monkeypatch.setenv(ENV, "attention=flash")
    result = runner.invoke(app, ["bench", "layers", "--config", "tiny-all", "--device", "cpu"])
    assert result.exit_code == 2 and f"{ENV}: attention='flash': unknown backend" in result.stderr, result.output


@pytest.mark.parametrize(("value", "expected"), [
    ("kernels", "op_split='kernels' is not one of ['auto', 'device', 'wall']"),
    ("device", "op_split='device' needs a CUDA device (it splits kernel time), got cpu"),
])
def test_bad_op_split_is_one_error_line_with_exit_2(value, expected):
    result = runner.invoke(app, ["bench", "layers", "--config", "tiny-all", "--device", "cpu", "--op-split", value])
    assert result.exit_code == 2, result.output
    err = result.stderr.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: ") and expected in err, err


def test_max_model_len_below_the_longest_step_is_refused():
    result = runner.invoke(app, ["bench", "layers", "--config", "tiny-all", "--device", "cpu", "--contexts", "100",
                                 "--prefill-tokens", "0", "--max-model-len", "64"])
    assert result.exit_code == 2 and "--max-model-len 64 is below the longest step's 101 positions" in result.stderr


# ------------------------------------------------------------------------------------------ same builder as the engine
def _choice_lines(lines) -> list[str]:
    keep = ("linear backend", "attention backend", "moe backend", "moe shared expert")
    return [line for line in lines if line.startswith(keep)]


@pytest.mark.skipif(not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1",
                    reason="forced Triton on the CPU needs the interpreter")
def test_bench_model_has_the_engine_model_kernels(tiny_all, caplog, monkeypatch):
    from mxserve import LLM

    monkeypatch.delenv(ENV, raising=False)
    overrides = {"attention": "triton", "moe": "triton"}
    with caplog.at_level(logging.INFO, logger="mxserve.engine"):
        llm = LLM(str(tiny_all), numerics="exact", max_model_len=64, progress=False, kernel_overrides=overrides)
    engine_lines = _choice_lines(r.getMessage() for r in caplog.records)
    reader = CheckpointReader(tiny_all)
    device = llm.engine.device
    weights = {name: w.to(device) for name, w in reader.load(progress=False).items()}
    model, engine = build_bench_model(reader.config, weights, device=device, numerics="exact",
                                      overrides=parse_kernels_option("attention=triton,moe=triton", {})[0],
                                      source="--kernels", max_model_len=64)
    assert kernel_labels(model.kernels) == kernel_labels(llm.engine.model.kernels)
    assert kernel_labels(model.kernels)["sparse_attention"] == "triton"
    assert kernel_labels(model.kernels)["moe_experts"] == "triton"
    assert _choice_lines(engine.reasons) == engine_lines and len(engine_lines) == 4  # same choices, same reasons
    assert engine.linear_backend == ("reference-resident" if device.type == "cpu" else "reference")


@pytest.mark.skipif(not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1",
                    reason="forced Triton on the CPU needs the interpreter")
def test_kernels_option_reaches_the_model_through_the_command_line(tmp_path):
    out = tmp_path / "layers.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TRITON_INTERPRET": "1"}
    env.pop(ENV, None)
    proc = subprocess.run(
        [sys.executable, "-m", "mxserve.cli.main", "bench", "layers", "--config", "tiny-all", "--layers", "2",
         "--device", "cpu", "--prefill-tokens", "0", "--batches", "1", "--contexts", "20", "--reps", "1",
         "--warmup", "0", "--kernels", "attention=triton", "--out", str(out)],
        capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    meta = json.loads(out.read_text())["meta"]
    assert meta["kernel_overrides"] == {"attention": "triton"} and meta["kernel_source"] == "--kernels"
    for op in ("sparse_attention", "topk", "q_norm_rope", "kv_insert", "compressor_emit", "indexer_scores_cache"):
        assert meta["kernels"][op] == "triton", (op, meta["kernels"])
    assert meta["kernels"]["moe_experts"] == "reference" and meta["kernels"]["linear"] == "reference"
    assert any(line.startswith("attention backend: triton (forced; TRITON_INTERPRET=1 interpreter allowance")
               for line in meta["kernel_reasons"]), meta["kernel_reasons"]
    assert "sparse_attention=triton" in proc.stdout and "attention backend: triton" in proc.stdout
    (row,) = json.loads(out.read_text())["scenarios"]
    assert "error" not in row, row.get("error")
    # the CPU has no CUDA graphs: said in the JSON and the printed table, no graph number
    assert row["graph_s"] is None and row["graph_status"] == "not captured: device is cpu (CUDA graphs need a CUDA device)"
    assert "not captured: device is cpu" in proc.stdout


# ------------------------------------------------------------------------------------------ projection timing
def _row(eager_s: float, graph_s: float | None) -> dict:
    layer = {"owner": "layer 0", "kind": "csa", "time_s": 0.6 * eager_s, "bandwidth_floor_s": 0.1 * eager_s,
             "ratio_to_bandwidth_floor": 6.0, "ops_s": {"linear wq_b": 0.4 * eager_s, "other": 0.2 * eager_s}}
    head = {"owner": "head", "kind": "head", "time_s": 0.3 * eager_s, "bandwidth_floor_s": 0.05 * eager_s,
            "ops_s": {"linear head": 0.3 * eager_s}}
    return {"scenario": {"name": "decode b1 ctx64", "phase": "decode", "num_seqs": 1, "context_len": 64,
                         "new_tokens": 1},
            "eager_s": eager_s, "step_median_s": eager_s, "graph_median_s": graph_s,
            "graph_status": "replayed (bucket 1)" if graph_s else "not captured: device is cpu",
            "preamble_s": 0.1 * eager_s, "layers": [layer], "head": head}


def test_projection_uses_the_graph_step_when_there_is_one_and_says_which():
    full = get_config("tiny-all")  # 2 sliding, 2 csa, 2 hca; only csa measured here
    opts = LayersBenchOptions(config="tiny-all", num_layers=1, device="cpu", prefill_tokens=0, decode_batches=(1,),
                              contexts=(64,), reps=1, warmup=0, numerics="faithful", bandwidth_tb_s=1.0,
                              peak_tflops=1.0, seed=0)
    (eager,) = project([_row(0.010, None)], full, opts)
    (graph,) = project([_row(0.010, 0.004)], full, opts)
    # 6 layers (all timed as the csa one) + head + preamble
    assert eager["step_s"] == pytest.approx(6 * 0.006 + 0.003 + 0.001)
    assert graph["step_s"] == pytest.approx(0.4 * eager["step_s"])
    assert not eager["is_graph"] and eager["timing"] == "eager (no graph: not captured: device is cpu)"
    assert graph["is_graph"] and graph["timing"].startswith("CUDA-graph replay (4.00 ms vs eager 10.00 ms")
    assert graph["layer_ratio_max"] == pytest.approx(0.4 * 6.0)
    assert graph["bandwidth_floor_step_s"] == eager["bandwidth_floor_step_s"]  # floors do not move


# ------------------------------------------------------------------------------------------ device-built tables
def test_pooled_plain_tensor_rows_are_pool_rows_up_to_sign():
    config = get_config("tiny-all")
    spec = build_inventory(config).tensors["head.weight"]
    value = pooled_plain_tensor(spec, config, 3, torch.device("cpu"))
    assert value.shape == spec.shape and value.dtype == torch.bfloat16
    pool = random_plain_tensor(spec, config, 3)  # tiny: fewer rows than the pool, so the pool is the tensor
    matches = (value[:, None, :].abs() == pool[None, :, :].abs()).all(dim=-1)
    assert matches.any(dim=1).all()  # every row is a pool row with a sign
    assert (value == -pool[matches.float().argmax(dim=1)]).all(dim=-1).any()  # and some are flipped
    with pytest.raises(ValueError, match="is not one of"):
        pooled_plain_tensor(build_inventory(config).tensors["norm.weight"], config, 0, torch.device("cpu"))


# ------------------------------------------------------------------------------------------ the graph step's work
def test_engine_decode_path_on_bench_caches_is_the_eager_step():
    """The graph timing replays `DecodeGraphs` over the bench's caches (old positions aliased to a
    junk page): staged without capture here, it must compute exactly the eager step's logits, so
    `graph_s` and `eager_s` time the same work."""
    from mxserve.bench.layers.build import bench_config, layer_plan, random_weights
    from mxserve.bench.layers.cache import build_cache_state
    from mxserve.engine.cuda_graphs import DecodeGraphs
    from mxserve.model.decode_batch import DecodeGeometry
    from mxserve.model.forward_batch import ForwardBatch

    full = get_config("tiny-all")
    config = bench_config(full, layer_plan(full, 3))
    device = torch.device("cpu")
    model, _ = build_bench_model(config, random_weights(config, device, num_threads=1), device=device,
                                 numerics="faithful", overrides={}, source="test", max_model_len=200)
    num_seqs, context = 3, 70  # past the 32-token window: old window pages are the junk page
    state = build_cache_state(config, model.policy, num_seqs=num_seqs, context_len=context, new_tokens=1,
                              block_size=16, device=device)
    tokens = [5, 9, 11]
    eager = model.forward(ForwardBatch.from_chunks([[t] for t in tokens], list(range(num_seqs)), [context] * num_seqs,
                                                   logits_for="last", device=device), state)
    graphs = DecodeGraphs(model, state, DecodeGeometry.for_positions(config, 16, 200), device, capture=False)
    staged = graphs.run(tokens, list(range(num_seqs)), [context] * num_seqs, 4)  # padded to bucket 4
    assert staged.shape == eager.shape and torch.equal(staged, eager)


def test_projection_adds_marginal_layers_to_the_replayed_step():
    """With the marginal replayed cost of one more layer of each built kind, the projection is the
    replayed step (built layers + head + once-per-step work) plus that cost for every further layer;
    the layer ratio is the marginal against the layer's floor."""
    full = get_config("tiny-all")  # 2 sliding, 2 csa, 2 hca; one csa built
    opts = LayersBenchOptions(config="tiny-all", num_layers=1, device="cpu", prefill_tokens=0, decode_batches=(1,),
                              contexts=(64,), reps=1, warmup=0, numerics="faithful", bandwidth_tb_s=1.0,
                              peak_tflops=1.0, seed=0)
    row = _row(0.010, 0.004) | {"graph_marginal_s": {"csa": 0.0015}}
    (p,) = project([row], full, opts)
    assert p["is_marginal"] and p["timing"].startswith("CUDA-graph replay (4.00 ms for the built layers, served step) + the marginal")
    assert p["step_s"] == pytest.approx(0.004 + 5 * 0.0015)  # the built csa is in the step; 5 more layers
    assert p["layer_ratio_max"] == pytest.approx(0.0015 / 0.001)  # floor 0.1 * eager
    assert p["ops_s"]["head and once-per-step work"] == pytest.approx(0.004 - 0.0015)
    assert sum(p["ops_s"].values()) == pytest.approx(p["step_s"])
    # a marginal missing for a built kind: the eager-split graph projection, said so
    (q,) = project([_row(0.010, 0.004) | {"graph_marginal_s": {}}], full, opts)
    assert not q["is_marginal"] and q["timing"].startswith("CUDA-graph replay (4.00 ms vs eager")


def test_marginals_subtract_device_replays_when_both_steps_have_them(monkeypatch):
    """The marginal of a layer kind is the difference of device-only replay times (host-free) when
    the base row and the deeper step both have them, else of the served steps; the basis is named."""
    import mxserve.bench.layers.graphs as graphs

    class _Model:
        def __init__(self) -> None:
            self.layers = ["csa0", "hca0"]

    served = {3: 0.0020, 2: 0.0014}  # the served step moves with the host ...
    device = {3: 0.00095, 2: 0.00070}  # ... the replays do not
    monkeypatch.setattr(graphs, "time_graph_decode", lambda model, *a, **k: {
        "graph_median_s": served[len(model.layers)], "graph_device_median_s": device[len(model.layers)],
        "graph_status": "replayed"})
    args = dict(device=torch.device("cpu"), max_model_len=8, warmup=0, reps=1)
    base = {"graph_median_s": served[2], "graph_device_median_s": device[2]}
    out = graphs.time_graph_marginals(_Model(), None, [1], [4], ["csa", "hca"], base, **args)
    assert out["graph_marginal_basis"] == "device replays"
    assert out["graph_marginal_s"]["csa"] == pytest.approx(0.00025)
    base_served_only = {"graph_median_s": served[2], "graph_device_median_s": None}
    out = graphs.time_graph_marginals(_Model(), None, [1], [4], ["csa"], base_served_only, **args)
    assert out["graph_marginal_basis"] == "served steps"
    assert out["graph_marginal_s"]["csa"] == pytest.approx(0.0006)
