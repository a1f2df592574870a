"""Stages `checkpoint` (manifest, inventory, scale bytes sane) and `load` (the engine under test).

`checkpoint` FAILS on any `CheckpointError` from `CheckpointReader.validate()` (missing, extra,
misshaped or mistyped tensors, NaN scale bytes, a manifest whose SHA-256 does not match) and on
implausible scale bytes in the weights as loaded: a UE8M0 byte of 255 (NaN), or a byte more than
`MAX_SCALE_SPREAD_BINADES` away from its tensor's median (a trained weight does not span 2^16 in
one tensor; a flipped high bit does). A checkpoint WITHOUT a manifest passes this stage with
that fact stated: byte-level corruption inside the plausible range is then left to the numeric
stages (`layers`, `quality`, `generate`), which is what they are for.

`load` builds the engine exactly as `LLM(...)` does and FAILS when that raises, when the
checkpoint ships no tokenizer (the text stages could not judge output), or when the embedding
or LM head decodes to non-finite values.
"""

from __future__ import annotations

import logging
import time

import torch

from mxserve.formats import QuantizedWeight
from mxserve.kernels.linear import dequantized
from mxserve.model.checkpoint import CheckpointError, CheckpointReader
from mxserve.verify.report import StageResult
from mxserve.verify.session import VerifySession

MAX_SCALE_SPREAD_BINADES = 16


def run_checkpoint(session: VerifySession) -> StageResult:
    failures: list[str] = []
    evidence: list[str] = []
    try:
        reader = CheckpointReader(session.model_dir)
        reader.validate()
    except CheckpointError as exc:
        return StageResult.judged("checkpoint", [f"checkpoint invalid: {' '.join(str(exc).split())}"], [], {})
    manifest = reader.manifest_status
    evidence.append(f"manifest: {manifest}" + ("" if manifest.startswith("verified") else
                    " — file integrity unchecked; numeric stages must catch corrupted bytes"))
    evidence.append("inventory: every tensor's name, dtype and shape match the config")
    weights = reader.load(progress=False)
    session.reader, session.weights = reader, weights
    quantized = {name: w for name, w in weights.items() if isinstance(w, QuantizedWeight)}
    bad: list[str] = []
    for name, w in quantized.items():
        scales = w.scales.to(torch.int32)
        if bool((scales == 255).any()):
            bad.append(f"{name}: {int((scales == 255).sum())} NaN scale bytes (255)")
            continue
        median = int(scales.flatten().median())
        spread = int((scales - median).abs().max())
        if spread > MAX_SCALE_SPREAD_BINADES:
            at = tuple(int(i) for i in ((scales - median).abs() == spread).nonzero()[0])
            bad.append(f"{name}: scale byte {int(scales[at])} at {list(at)} is {spread} binades from the "
                       f"tensor median {median} (rule: <= {MAX_SCALE_SPREAD_BINADES})")
    if bad:
        failures.append(f"{len(bad)} quantized tensors with implausible scale bytes; first: {bad[0]}")
    by_layout: dict[str, int] = {}
    for w in quantized.values():
        by_layout[w.layout.value] = by_layout.get(w.layout.value, 0) + 1
    evidence.append(f"scale bytes: {len(quantized)} quantized tensors {by_layout}; rule: no 255, within "
                    f"{MAX_SCALE_SPREAD_BINADES} binades of each tensor's median")
    metrics = {"manifest": manifest, "num_tensors": len(weights), "quantized_by_layout": by_layout,
               "bad_scale_tensors": bad[:20]}
    return StageResult.judged("checkpoint", failures, evidence, metrics)


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def run_load(session: VerifySession) -> StageResult:
    from mxserve.engine.llm import LLM
    from mxserve.verify.observers import FiniteCheckObserver

    opts = session.options
    collect = _Collect()
    engine_logger = logging.getLogger("mxserve.engine")
    engine_logger.addHandler(collect)
    old_level = engine_logger.level
    engine_logger.setLevel(logging.INFO)
    started = time.monotonic()
    try:
        session.llm = LLM(str(session.model_dir), device=opts.device, numerics="faithful", progress=False,
                          max_num_seqs=opts.max_num_seqs)
    except (CheckpointError, ValueError, RuntimeError) as exc:
        return StageResult.judged("load", [f"engine failed to start: {' '.join(str(exc).split())}"], [], {})
    finally:
        engine_logger.removeHandler(collect)
        engine_logger.setLevel(old_level)
    load_s = time.monotonic() - started
    session.load_log = collect.lines
    failures: list[str] = []
    if session.llm.tokenizer is None:
        failures.append("the checkpoint ships no tokenizer.json: generated text cannot be judged")
    model = session.llm.engine.model
    if opts.validate:
        session.observer = FiniteCheckObserver()
        model.observer = session.observer
    head = dequantized(model.head)  # tensor, packed or resident: one fp32 view
    for name, tensor in (("embed.weight", model.embed), ("head", head)):
        if not bool(torch.isfinite(tensor).all()):
            failures.append(f"{name} decodes to {int((~torch.isfinite(tensor)).sum())} non-finite values")
    evidence = [f"engine started in {load_s:.1f} s (numerics faithful, device {session.llm.engine.device})",
                *session.load_log,
                f"in-graph validation (--validate): {'on' if opts.validate else 'off'}"]
    return StageResult.judged("load", failures, evidence, {"load_s": round(load_s, 2), "log": session.load_log})
