"""Optional stage `oracle` (--oracle transformers): transformers' DeepseekV4ForCausalLM on the
dequantized weights against mxserve's `exact` reference, full uncached prefill of a real prompt.

transformers is an independent implementation of the same math (no QAT simulation, so it matches
mxserve's `exact` mode, not `faithful`: docs/transformers-findings.md). The weights are the
checkpoint's own, dequantized to fp32 and mapped through the checkpoint layer's name map
(`hf_names`) and config translation (`release_to_hf_config`). FAILS when a transformers
parameter is left unset, when the worst position's max relative logits error exceeds
MAX_REL_LOGITS (the CI oracle gate of docs/numerics.md), or when any argmax differs.
N/A for models whose fp32 copy would exceed MAX_ORACLE_PARAMS parameters.
"""

from __future__ import annotations

import torch

from mxserve.formats import QuantizedWeight
from mxserve.model.checkpoint import CheckpointReader
from mxserve.model.checkpoint.hf_config import release_to_hf_config
from mxserve.model.checkpoint.hf_names import (
    BLOCK_NAMES,
    EXPERTS_DOWN,
    EXPERTS_GATE_UP,
    GLOBAL_NAMES,
    HF_LAYER_PREFIX,
    RELEASE_EXPERT,
)
from mxserve.model.deepseek_v4 import DeepseekV4Model
from mxserve.model.forward_batch import ForwardBatch
from mxserve.verify.comparators import compare_logits
from mxserve.verify.report import StageResult, Status
from mxserve.verify.session import VerifySession
from mxserve.verify.texts import heldout_prompt

MAX_REL_LOGITS = 1e-4
MAX_ORACLE_PARAMS = 2_000_000_000
ORACLE_PROMPT_TOKENS = 96


def _fp32(weights: dict, release_name: str) -> torch.Tensor | None:
    for key in (release_name, release_name.removesuffix(".weight")):
        w = weights.get(key)
        if w is not None:
            return w.dequantize(torch.float32) if isinstance(w, QuantizedWeight) else w.float()
    return None


def hf_state_dict(config, weights: dict) -> dict[str, torch.Tensor]:
    """Release-named checkpoint weights → transformers' state-dict names, fp32."""
    out = {hf: _fp32(weights, release) for release, hf in GLOBAL_NAMES.items()}
    for i in range(config.num_hidden_layers):
        prefix, hf_prefix = f"layers.{i}.", f"{HF_LAYER_PREFIX}{i}."
        for release, hf in BLOCK_NAMES.items():
            out[hf_prefix + hf] = _fp32(weights, prefix + release)
        experts = range(config.n_routed_experts)
        w1, w2, w3 = ([_fp32(weights, prefix + RELEASE_EXPERT.format(e=e, w=w)) for e in experts] for w in ("w1", "w2", "w3"))
        out[hf_prefix + EXPERTS_GATE_UP] = torch.stack([torch.cat((a, b)) for a, b in zip(w1, w3, strict=True)])
        out[hf_prefix + EXPERTS_DOWN] = torch.stack(w2)
    return {k: v for k, v in out.items() if v is not None}


def run_oracle(session: VerifySession) -> StageResult:
    from transformers import DeepseekV4Config, DeepseekV4ForCausalLM

    cfg = session.config
    weights = session.weights if session.weights is not None else CheckpointReader(session.model_dir).load(progress=False)
    num_params = sum(w.shape[-1] * w.shape[-2] if isinstance(w, QuantizedWeight) else w.numel() for w in weights.values())
    if num_params > MAX_ORACLE_PARAMS:
        return StageResult("oracle", Status.NOT_APPLICABLE,
                           [f"n/a: {num_params / 1e9:.1f} B parameters; the fp32 oracle runs up to {MAX_ORACLE_PARAMS / 1e9:.0f} B"])
    hf = DeepseekV4ForCausalLM(DeepseekV4Config(**release_to_hf_config(cfg, dtype="float32"))).float().eval()
    result = hf.load_state_dict(hf_state_dict(cfg, weights), strict=False)
    failures = [f"transformers parameters not set from the checkpoint: {result.missing_keys[:5]}"] if result.missing_keys else []
    prompt = heldout_prompt(session, ORACLE_PROMPT_TOKENS)
    with torch.no_grad():
        hf_logits = hf(input_ids=torch.tensor([prompt]), use_cache=False).logits[0].float()
    exact = DeepseekV4Model(cfg, weights, numerics="exact")
    state = exact.new_cache_state(max_sequences=1, max_positions=len(prompt) + 1)
    ours = exact.forward(ForwardBatch.from_chunks([prompt], ["oracle"], [0]), state)
    c = compare_logits(ours, hf_logits)
    if not c.max_rel_logit_delta <= MAX_REL_LOGITS:
        failures.append(f"max relative logits error {c.max_rel_logit_delta:.3g} > {MAX_REL_LOGITS}")
    if c.num_argmax_flips:
        failures.append(f"{c.num_argmax_flips} argmax flips vs transformers, first at position {c.first_flip_position} "
                        f"(margin {c.first_flip_reference_margin_nats} nats)")
    evidence = [f"{len(prompt)}-token held-out prompt, uncached prefill; mxserve exact vs transformers "
                f"DeepseekV4ForCausalLM on the dequantized weights",
                f"max rel logits {c.max_rel_logit_delta:.3g} (gate {MAX_REL_LOGITS}), max |Δ log p| "
                f"{c.max_abs_logprob_delta_nats:.3g} nats, argmax flips {c.num_argmax_flips}, min cosine {c.min_cosine:.7f}"]
    return StageResult.judged("oracle", failures, evidence, {"logits": c.as_row(), "missing": result.missing_keys,
                                                             "unexpected": result.unexpected_keys})
