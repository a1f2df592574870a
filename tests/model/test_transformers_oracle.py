"""The reference model equals transformers' DeepseekV4ForCausalLM on the same weights (exact mode).

Our side: a prefill of a >= 300-token prompt and 32 greedy decode steps through the paged caches.
Oracle: transformers' full uncached forward over prompt + generated tokens. Per position,
max|ours − hf| / max|hf| <= 1e-4.
"""

from __future__ import annotations

import pytest
import torch

from mxserve.model.deepseek_v4 import DeepseekV4Model
from mxserve.model.forward_batch import ForwardBatch
from tests.model.hf_oracle import build_hf_model, hf_full_logits, hf_to_release_weights
from tests.model.oracle_configs import ORACLE_CONFIGS

PROMPT_LEN, NUM_GREEDY, REL_TOL = 300, 32, 1e-4


def relative_error_per_position(ours: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    return (ours - ref).abs().amax(dim=-1) / ref.abs().amax(dim=-1)


@pytest.mark.parametrize("name", sorted(ORACLE_CONFIGS))
def test_prefill_and_greedy_decode_match_transformers(name):
    cfg = ORACLE_CONFIGS[name]
    hf = build_hf_model(cfg, seed=1234)
    model = DeepseekV4Model(cfg, hf_to_release_weights(hf), numerics="exact")
    gen = torch.Generator().manual_seed(7)
    prompt = torch.randint(2, cfg.vocab_size, (PROMPT_LEN,), generator=gen).tolist()

    state = model.new_cache_state(max_sequences=1, max_positions=PROMPT_LEN + NUM_GREEDY + 1)
    per_position = [model.forward(ForwardBatch.from_chunks([prompt], [0], [0]), state)]
    tokens = list(prompt)
    for _ in range(NUM_GREEDY):
        tokens.append(int(per_position[-1][-1].argmax()))
        step = ForwardBatch.from_chunks([[tokens[-1]]], [0], [len(tokens) - 1])
        per_position.append(model.forward(step, state))
    ours = torch.cat(per_position)  # logits for positions 0 .. len(tokens)-1

    ref = hf_full_logits(hf, tokens)
    rel = relative_error_per_position(ours, ref)
    worst = int(rel.argmax())
    assert float(rel.max()) <= REL_TOL, (
        f"{name}: worst relative error {float(rel.max()):.3e} at position {worst} "
        f"(tokens {len(tokens)}); first over tolerance at {int((rel > REL_TOL).nonzero()[0])}"
    )
    # the greedy continuation we produced is also HF's greedy continuation
    hf_greedy = ref[PROMPT_LEN - 1 : -1].argmax(dim=-1).tolist()
    assert hf_greedy == tokens[PROMPT_LEN:], f"{name}: greedy tokens differ from transformers'"
