"""Speculative decoding with the 0731 DSpark draft: lossless verification and exact rollback.

`SpeculativeModelRunner` replaces the engine's `ModelRunner` when `EngineConfig.speculative_config`
is set; `verify` holds the acceptance rules (greedy, standard rejection sampling, block
verification), `probs` the sampler's distributions as vectors, `rollback` the target cache
snapshot/restore, `metrics` the proposed/accepted counters. See docs/speculative.md.
"""

from mxserve.engine.speculative.metrics import SpecDecodeStats
from mxserve.engine.speculative.runner import DraftProposal, SpeculativeModelRunner

__all__ = ["DraftProposal", "SpecDecodeStats", "SpeculativeModelRunner"]
