"""Every malformed checkpoint is one line on stderr naming the file/tensor, exit code 2, no traceback."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from mxserve.cli.main import app
from tests.checkpoint.helpers import rewrite

runner = CliRunner()


def _inspect_fails(path: Path, *expected: str) -> str:
    result = runner.invoke(app, ["inspect", str(path)])
    assert result.exit_code == 2, result.output
    err = result.stderr.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("error: ") and "Traceback" not in result.output
    for text in expected:
        assert text in err, err
    return err


def _shard(path: Path) -> Path:
    return next(path.glob("model-*.safetensors"))


def test_good_checkpoint_inspects(tiny_all: Path):
    result = runner.invoke(app, ["inspect", str(tiny_all)])
    assert result.exit_code == 0, result.output
    assert "layout      preview (1 MTP block)" in result.stdout
    assert "SCHCHS | draft S" in result.stdout and "hhllll" in result.stdout
    assert "mxfp4 e2m1 codes" in result.stdout and "ue8m0 scales" in result.stdout
    assert "manifest    verified" in result.stdout


def test_0731_inspect_reports_the_draft(tiny_0731: Path):
    result = runner.invoke(app, ["inspect", str(tiny_0731)])
    assert result.exit_code == 0, result.output
    assert "0731 (DSpark draft: 3 stages" in result.stdout and "target layers [3, 4, 5]" in result.stdout
    assert "default block size 5" in result.stdout


def test_truncated_shard(tmp_path: Path, tiny_all: Path):
    path = shutil.copytree(tiny_all, tmp_path / "c")
    shard = _shard(path)
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) - 1000])
    _inspect_fails(path, shard.name, "truncated")


def test_missing_tensor(tmp_path: Path, tiny_all: Path):
    path = rewrite(tiny_all, tmp_path / "c", lambda t: t.pop("layers.2.attn.compressor.ape"))
    _inspect_fails(path, "layers.2.attn.compressor.ape", "missing")


def test_extra_tensor(tmp_path: Path, tiny_all: Path):
    path = rewrite(tiny_all, tmp_path / "c", lambda t: t.__setitem__("layers.0.attn.bogus", torch.zeros(3)))
    _inspect_fails(path, "layers.0.attn.bogus", "not expected", _shard(path).name)


def test_wrong_shape(tmp_path: Path, tiny_all: Path):
    path = rewrite(tiny_all, tmp_path / "c", lambda t: t.__setitem__("layers.1.attn.attn_sink", torch.zeros(7)))
    _inspect_fails(path, "layers.1.attn.attn_sink", "shape [7]", "expected [8]")


def test_wrong_dtype(tmp_path: Path, tiny_all: Path):
    def edit(t):
        t["layers.1.ffn.gate.tid2eid"] = t["layers.1.ffn.gate.tid2eid"].to(torch.int32)

    path = rewrite(tiny_all, tmp_path / "c", edit)
    _inspect_fails(path, "layers.1.ffn.gate.tid2eid", "dtype I32", "expected I64")


def test_wrong_dtype_of_a_packed_weight(tmp_path: Path, tiny_all: Path):
    def edit(t):
        t["layers.0.attn.wkv.weight"] = t["layers.0.attn.wkv.weight"].view(torch.uint8).view(torch.float8_e5m2)

    path = rewrite(tiny_all, tmp_path / "c", edit)
    _inspect_fails(path, "layers.0.attn.wkv.weight", "F8_E5M2")


def test_tampered_bytes_with_manifest(tmp_path: Path, tiny_all: Path):
    path = shutil.copytree(tiny_all, tmp_path / "c")
    shard = _shard(path)
    data = bytearray(shard.read_bytes())
    data[-5] ^= 0x01  # inside the data section: the header still parses
    shard.write_bytes(bytes(data))
    _inspect_fails(path, shard.name, "SHA-256")


def test_nan_scale_byte(tmp_path: Path, tiny_all: Path):
    def edit(t):
        scale = t["layers.3.ffn.experts.6.w3.scale"].view(torch.uint8).clone()
        scale[5, 2] = 255
        t["layers.3.ffn.experts.6.w3.scale"] = scale.view(torch.float8_e8m0fnu)

    path = rewrite(tiny_all, tmp_path / "c", edit)
    _inspect_fails(path, "layers.3.ffn.experts.6.w3.scale", "NaN scale byte 255", "[5, 2]")


def test_config_promises_more_layers_than_the_weights(tmp_path: Path, tiny_all: Path):
    def edit_config(c):
        c["num_hidden_layers"] = 7
        c["compress_ratios"] = [0, 4, 16, 4, 16, 0, 4, 0]

    path = rewrite(tiny_all, tmp_path / "c", edit_config=edit_config)
    _inspect_fails(path, "num_hidden_layers=7", "layers.6", "mismatch")


def test_config_promises_more_experts_than_the_weights(tmp_path: Path, tiny_all: Path):
    def edit_config(c):
        c["n_routed_experts"] = 16

    path = rewrite(tiny_all, tmp_path / "c", edit_config=edit_config)
    _inspect_fails(path, "n_routed_experts=16", "mismatch")


def test_missing_dir(tmp_path: Path):
    _inspect_fails(tmp_path / "nowhere", "nowhere", "no such checkpoint directory")


def test_malformed_config_json(tmp_path: Path, tiny_all: Path):
    path = shutil.copytree(tiny_all, tmp_path / "c")
    (path / "config.json").write_text('{"hidden_size": 256,')
    _inspect_fails(path, "config.json", "not valid JSON")


def test_missing_draft_tensor_0731(tmp_path: Path, tiny_0731: Path):
    path = rewrite(tiny_0731, tmp_path / "c", lambda t: t.pop("mtp.2.markov_head.markov_w2.weight"))
    _inspect_fails(path, "mtp.2.markov_head.markov_w2.weight", "missing")


def test_misshaped_draft_tensor_0731(tmp_path: Path, tiny_0731: Path):
    path = rewrite(tiny_0731, tmp_path / "c", lambda t: t.__setitem__("mtp.0.main_norm.weight", torch.ones(3)))
    _inspect_fails(path, "mtp.0.main_norm.weight", "shape [3]")


@pytest.mark.parametrize(("key", "value", "expected"), [
    ("compress_ratios", [0, 4, 16, 4, 16, 0, 0], "compress_ratios"),
    ("dspark_target_layer_ids", [3, 4, 6], "dspark_target_layer_ids"),
])
def test_bad_0731_config(tmp_path: Path, tiny_0731: Path, key: str, value: object, expected: str):
    path = shutil.copytree(tiny_0731, tmp_path / "c")
    config = json.loads((path / "config.json").read_text())
    config[key] = value
    (path / "config.json").write_text(json.dumps(config))
    _inspect_fails(path, expected)


def test_real_entry_point_quickstart(tmp_path: Path):
    """The README quickstart through the installed `mxserve` script, as a subprocess."""
    exe = Path(sys.executable).parent / "mxserve"
    out = tmp_path / "mxserve-tiny"
    made = subprocess.run([str(exe), "random-checkpoint", str(out), "--config", "tiny-all"], capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    shown = subprocess.run([str(exe), "inspect", str(out)], capture_output=True, text=True)
    assert shown.returncode == 0 and "tensors     585 in 1 shard(s)" in shown.stdout, shown.stderr
    broken = subprocess.run([str(exe), "inspect", str(tmp_path / "absent")], capture_output=True, text=True)
    assert broken.returncode == 2 and "Traceback" not in broken.stderr
    assert broken.stderr.count("\n") == 1 and "absent" in broken.stderr


def test_every_serve_flag_is_in_the_server_docs_and_back():
    """docs/server.md's flag table and `mxserve serve`'s options name the same flags."""
    import re

    import typer.main

    serve = typer.main.get_command(app).commands["serve"]
    cli = {opt for param in serve.params for opt in param.opts if opt.startswith("--")}
    table = (Path(__file__).parents[2] / "docs" / "server.md").read_text().split("## Flags")[1].split("\n## ")[0]
    documented = set(re.findall(r"^\| `(--[a-z-]+)", table, re.MULTILINE))
    assert cli == documented, f"undocumented: {sorted(cli - documented)}; not options: {sorted(documented - cli)}"


def test_help_explains_each_command():
    for command in ("inspect", "convert", "random-checkpoint"):
        result = runner.invoke(app, [command, "--help"])
        assert result.exit_code == 0 and len(result.stdout) > 300, command


@pytest.mark.parametrize("command", ["serve", "run"])
@pytest.mark.parametrize(("value", "expected"), [
    ("linear", "--kernel-overrides: 'linear' is not op=backend"),
    ("moe=fast", "kernel_overrides['moe']='fast': unknown backend"),
    ("gemm=triton", "unknown op 'gemm'"),
])
def test_bad_kernel_overrides_are_one_line_and_exit_2(tiny_all: Path, command, value, expected):
    """Nothing loads: the value is checked before the checkpoint is read."""
    result = runner.invoke(app, [command, "--model", str(tiny_all), "--device", "cpu", "--kernel-overrides", value,
                                 *(["hello"] if command == "run" else [])])
    assert result.exit_code == 2, result.output
    err = result.stderr.strip()
    assert err.startswith("error: ") and expected in err and "Traceback" not in result.output, err
