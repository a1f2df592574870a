"""Each injected fault makes `verify` fail, and the report names the stage and the evidence.

One test per fault in `mxserve.verify.faults`; each runs the default (quick) profile with
--fail-fast --validate in-process under the fault, so the run stops at the first stage that
catches it. Also: the faults restore what they patched, and a corrupted checkpoint without a
manifest is caught by the numeric stages.
"""

from __future__ import annotations

import json
import shutil
import struct

import pytest

from mxserve import default_model_path
from mxserve.kernels.cache import PagedKVCache
from mxserve.model.checkpoint import CheckpointReader
from mxserve.verify import faults
from mxserve.verify.runner import run_verify
from mxserve.verify.session import VerifyOptions

# fault → (stage that must catch it, text its failure evidence must contain)
EXPECTED = {
    "corrupt_scale_bytes": ("layers", "mean |Δ log p|"),
    "token_interleaved_cache_reader": ("layers", "layer 0 window cache reader: "),
    "swapped_e2m1_nibbles": ("layers", "mean |Δ log p|"),
    "fnuz_read_as_ocp": ("quality", "held-out NLL"),
    "wrong_swiglu_clamp": ("layers", "diverges from the exact reference"),
    "nan_in_layer": ("layers", "first non-finite value: layer 3"),
    "decode_position_off_by_one": ("generate", "decode diverges from prefill at generated token"),
}


@pytest.mark.parametrize("fault", sorted(faults.FAULTS))
def test_fault_fails_verify_naming_stage_and_evidence(fault, fast_options, tmp_path):
    stage, evidence = EXPECTED[fault]
    with faults.FAULTS[fault]():
        report = run_verify(fast_options)
    assert not report.passed
    assert report.failed_stages == [stage], report.to_markdown()[:3000]
    failures = report.stage(stage).failures
    assert any(evidence in f for f in failures), failures
    md = report.write(tmp_path / "report.json")  # the artifact names the stage and the evidence too
    assert f"## {stage}: FAIL" in md.read_text() and evidence in md.read_text()
    assert json.loads((tmp_path / "report.json").read_text())["failed_stages"] == [stage]


def test_faults_restore_what_they_patch():
    original_read, original_load = PagedKVCache.read, CheckpointReader.load
    with faults.token_interleaved_cache_reader(), faults.corrupt_scale_bytes():
        assert PagedKVCache.read is not original_read and CheckpointReader.load is not original_load
    assert PagedKVCache.read is original_read and CheckpointReader.load is original_load
    assert "read" not in PagedKVCache.__dict__  # the inherited method is not copied down


def _xor_tensor_bytes(shard, name: str, mask: int) -> None:
    """Flip bits of one tensor's stored bytes in place (safetensors: u64 header length, JSON, data)."""
    raw = bytearray(shard.read_bytes())
    header_len = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8 : 8 + header_len])
    start, stop = header[name]["data_offsets"]
    base = 8 + header_len
    for i in range(base + start, base + stop):
        raw[i] ^= mask
    shard.write_bytes(bytes(raw))


def test_corrupted_checkpoint_without_manifest_is_caught_by_numeric_stages(tmp_path):
    copy = tmp_path / "model"
    shutil.copytree(default_model_path(), copy, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    (copy / "mxserve-manifest.json").unlink()
    index = json.loads((copy / "model.safetensors.index.json").read_text())["weight_map"]
    corrupted = [n for n in index if n.startswith("layers.2.") and n.endswith(".scale")]
    for name in corrupted:
        _xor_tensor_bytes(copy / index[name], name, 0x08)  # every scale x2^±8: inside the plausible range
    report = run_verify(VerifyOptions(model_dir=copy, device="cpu"),
                        only=("checkpoint", "load", "layers", "quality"))
    checkpoint = report.stage("checkpoint")
    assert checkpoint.status.value == "PASS" and "manifest: absent" in checkpoint.evidence[0]
    numeric_failures = [s for s in ("layers", "quality") if s in report.failed_stages]
    assert numeric_failures, report.to_markdown()
    assert not report.passed
