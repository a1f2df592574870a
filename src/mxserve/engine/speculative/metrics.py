"""Speculative decoding counters (vLLM's names and definitions).

Per verify (one request, one step with k >= 1 drafts): k drafts proposed, a accepted, a + 1
tokens emitted. Mean acceptance length = emitted tokens per verify = 1 + accepted / verifies;
acceptance rate = accepted / proposed; `accepted_per_position[i]` counts verifies whose draft i
was accepted (the acceptance curve over the block).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SpecDecodeStats:
    num_verifies: int = 0  # request-steps that verified at least one draft token
    num_draft_tokens: int = 0  # draft tokens proposed (and verified)
    num_accepted_tokens: int = 0  # draft tokens accepted
    accepted_per_position: list[int] = field(default_factory=list)  # [K] verifies that accepted draft i

    def record(self, num_drafts: int, num_accepted: int) -> None:
        if not 0 <= num_accepted <= num_drafts:
            raise ValueError(f"SpecDecodeStats.record: {num_accepted=} outside [0, {num_drafts=}]")
        self.num_verifies += 1
        self.num_draft_tokens += num_drafts
        self.num_accepted_tokens += num_accepted
        if len(self.accepted_per_position) < num_drafts:
            self.accepted_per_position.extend([0] * (num_drafts - len(self.accepted_per_position)))
        for i in range(num_accepted):
            self.accepted_per_position[i] += 1

    @property
    def mean_acceptance_length(self) -> float:
        """Tokens emitted per verify (1 when nothing is ever accepted; 0 before any verify)."""
        return 1.0 + self.num_accepted_tokens / self.num_verifies if self.num_verifies else 0.0

    @property
    def acceptance_rate(self) -> float:
        return self.num_accepted_tokens / self.num_draft_tokens if self.num_draft_tokens else 0.0

    def as_dict(self) -> dict[str, float | int | list[int]]:
        return {
            "num_verifies": self.num_verifies, "num_draft_tokens": self.num_draft_tokens,
            "num_accepted_tokens": self.num_accepted_tokens, "mean_acceptance_length": self.mean_acceptance_length,
            "acceptance_rate": self.acceptance_rate, "accepted_per_position": list(self.accepted_per_position),
        }
