"""How far the faithful numeric mode is from the exact one, on the same weights (issue 3 item 4).

The exact model greedily decodes a prompt; the faithful model is scored teacher-forced on the
same token stream (same contexts), and separately decodes greedily on its own. Reported: the
logits comparison (mean/max |Δ log p| in nats, argmax flips) and the first position where the
two free-running greedy streams diverge.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from mxserve.config import ModelConfig
from mxserve.formats import QuantizedWeight
from mxserve.model.deepseek_v4 import DeepseekV4Model
from mxserve.model.greedy import greedy_generate, teacher_forced_logits
from mxserve.model.numerics import NumericPolicy
from mxserve.verify.comparators import LogitsComparison, compare_logits, first_divergence


@dataclass(frozen=True)
class ModeDistance:
    comparison: LogitsComparison  # faithful vs exact, teacher-forced on exact's stream
    first_greedy_divergence: int | None  # index into the generated tokens; None = identical
    num_prompt_tokens: int
    num_generated_tokens: int


def measure_mode_distance(
    config: ModelConfig, weights: Mapping[str, torch.Tensor | QuantizedWeight], prompt: list[int], num_new: int,
    *, candidate: NumericPolicy | None = None,
) -> ModeDistance:
    """Distance of `candidate` (default: the faithful policy) from the exact mode."""
    exact = DeepseekV4Model(config, weights, numerics="exact")
    faithful = DeepseekV4Model(config, weights, numerics=candidate or NumericPolicy.for_mode("faithful"))
    exact_tokens, exact_logits = greedy_generate(exact, prompt, num_new)
    faithful_logits = teacher_forced_logits(faithful, exact_tokens, len(prompt))
    faithful_tokens, _ = greedy_generate(faithful, prompt, num_new)
    return ModeDistance(
        comparison=compare_logits(faithful_logits, exact_logits),
        first_greedy_divergence=first_divergence(exact_tokens[len(prompt):], faithful_tokens[len(prompt):]),
        num_prompt_tokens=len(prompt),
        num_generated_tokens=num_new,
    )
