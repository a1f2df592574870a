"""Tensor-parallel ranks run the kernels chosen through `kernel_overrides` (prep for issue 15):
TP=2 gloo CPU ranks with attention / MoE (and linear) forced to Triton — under the interpreter
allowance (TRITON_INTERPRET=1) — equal one process with the same overrides in exact numerics:
logits of every row within 1e-5 relative, identical argmax and greedy tokens (2 per sequence,
batched). Each rank chooses over its own
shards and reports its choices with their reasons; the driver logs rank 0's.

On the CPU the linear chooser has no interpreter allowance (its Triton candidate needs an NVIDIA
GPU), so linear=triton gives every layer the reference with that reason — on the ranks as in one
process; the GPU check (gpu_tp_check.py) runs the Triton linears too."""

from __future__ import annotations

import logging
import os

import pytest
import torch

from mxserve import LLM
from mxserve.distributed import DistributedExecutor, RemoteModel, log_rank_kernel_choices
from mxserve.kernels.chooser import Platform
from mxserve.model.checkpoint import CheckpointReader
from mxserve.model.deepseek_v4 import DeepseekV4Model
from mxserve.model.forward_batch import ForwardBatch
from mxserve.model.kernel_selection import (
    choose_linear_per_layer,
    linear_dispatch_set,
    with_moe_and_attention,
)
from mxserve.model.numerics import NumericPolicy
from tests.distributed.conftest import worker_spec

pytest.importorskip("triton")
ON_CPU = not torch.cuda.is_available()
pytestmark = pytest.mark.skipif(ON_CPU and os.environ.get("TRITON_INTERPRET") != "1",
                                reason="forced Triton on the CPU needs the interpreter")

OVERRIDES = {"attention": "triton", "moe": "triton", "linear": "triton"}
MAX_MODEL_LEN = 64
REL_TOL = 1e-5


def _one_process(model_dir) -> DeepseekV4Model:
    """The single-process model with the engine's selection code and the same overrides."""
    reader = CheckpointReader(model_dir)
    weights = reader.load(progress=False, verify_manifest=False)
    device = torch.device("cpu")
    choices = choose_linear_per_layer(weights, Platform.probe(device), o_groups=reader.config.o_groups,
                                      faithful=False, forced="triton")
    model = DeepseekV4Model(reader.config, weights, numerics="exact", kernels=linear_dispatch_set(weights, choices))
    model.set_kernels(with_moe_and_attention(model, model.kernels, device=device, overrides=OVERRIDES,
                                             max_model_len=MAX_MODEL_LEN))
    return model


def _greedy_steps(model, vocab: int) -> tuple[list[torch.Tensor], list[list[int]]]:
    """A batched prefill of two sequences (6 tokens: a CSA entry emitted; and 2), then one decode
    of each with its greedy token: (logits of every row per step, each sequence's 2 greedy tokens).
    Small on purpose: the interpreter costs ~1 s per layer and step here."""
    gen = torch.Generator().manual_seed(5)
    prompts = [torch.randint(2, vocab, (n,), generator=gen).tolist() for n in (6, 2)]
    state = model.new_cache_state(max_sequences=2, max_positions=8, block_size=16)
    logits, tokens = [], [[], []]
    chunks, starts = prompts, [0, 0]
    for _ in range(2):
        out = model.forward(ForwardBatch.from_chunks(chunks, ["a", "b"], starts), state)
        logits.append(out)
        last = torch.tensor([len(c) for c in chunks]).cumsum(0) - 1
        for seq, token in enumerate(out[last].argmax(-1).tolist()):
            tokens[seq].append(token)
        starts = [s + len(c) for s, c in zip(starts, chunks, strict=True)]
        chunks = [[t[-1]] for t in tokens]
    return logits, tokens


def _max_rel(ours: torch.Tensor, ref: torch.Tensor) -> float:
    return float(((ours - ref).abs().amax(dim=-1) / ref.abs().amax(dim=-1)).max())


@pytest.mark.parametrize("ep", [True], ids=["tp2-ep"])
def test_tp2_with_forced_triton_kernels_equals_one_process(ep, ranks2, tiny_all, caplog):
    executor = ranks2.use(worker_spec(tiny_all, 2, ep, kernel_overrides=OVERRIDES, max_model_len=MAX_MODEL_LEN))
    reference = _one_process(tiny_all)
    config = reference.config

    # every rank chose the Triton attention and MoE over its own shards, saying why; linear fell
    # back to the reference on the CPU with the chooser's reason
    how = "forced; TRITON_INTERPRET=1 interpreter allowance"
    for report in executor.reports:
        log = "\n".join(report.kernel_log)
        assert f"attention backend: triton ({how}" in log, log
        assert f"moe backend: triton for all {config.num_hidden_layers} layers ({how}" in log, log
        assert "linear kernel choices per layer: {'reference':" in log, log
        assert "needs an NVIDIA GPU, device is cpu" in log, log
    with caplog.at_level(logging.INFO, logger="mxserve.engine"):
        log_rank_kernel_choices(executor.reports)
    assert f"rank 0: attention backend: triton ({how}" in caplog.text

    remote = RemoteModel(config, NumericPolicy.for_mode("exact"), executor)
    logits, tokens = _greedy_steps(remote, config.vocab_size)
    ref_logits, ref_tokens = _greedy_steps(reference, config.vocab_size)
    assert tokens == ref_tokens
    for step, (ours, ref) in enumerate(zip(logits, ref_logits, strict=True)):
        assert _max_rel(ours, ref) <= REL_TOL, f"step {step}: max rel {_max_rel(ours, ref):.2e}"
        assert torch.equal(ours.argmax(-1), ref.argmax(-1)), f"step {step}"


def test_the_driver_sends_the_resolved_overrides_to_the_ranks(tiny_all, monkeypatch):
    """The engine no longer refuses kernel_overrides with TP: the config's overrides over the
    environment's reach the ranks' WorkerSpec, resident decoded weights off (linear forced)."""

    class Stop(Exception):
        pass

    sent = []

    def start(spec):
        sent.append(spec)
        raise Stop  # no ranks needed: the spec is what the ranks would get

    monkeypatch.setattr(DistributedExecutor, "start", staticmethod(start))
    monkeypatch.setenv("MXSERVE_KERNEL_OVERRIDES", "moe=triton,attention=reference")
    with pytest.raises(Stop):
        LLM(str(tiny_all), device="cpu", numerics="exact", max_model_len=64, tensor_parallel_size=2,
            enable_expert_parallel=True, kernel_overrides={"attention": "triton", "linear": "triton"}, progress=False)
    (spec,) = sent
    assert dict(spec.kernel_overrides) == {"attention": "triton", "linear": "triton", "moe": "triton"}
    assert spec.max_model_len == 64 and not spec.resident_weights
    monkeypatch.setenv("MXSERVE_KERNEL_OVERRIDES", "moe=cutlass")
    with pytest.raises(ValueError, match="moe='cutlass': unknown backend"):
        LLM(str(tiny_all), device="cpu", tensor_parallel_size=2, progress=False)
    assert len(sent) == 1  # refused before any rank starts
