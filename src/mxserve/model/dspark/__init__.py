"""The DSpark speculative draft of DeepSeek-V4-Flash-0731 (../shared/docs/dsv4-0731.md §3.2).

`DSparkDraft` binds the `mtp.{0,1,2}.*` weights and computes, for a batch of sequences, the
draft's base logits over a block of K positions plus the sequential Markov bias; the engine
(`mxserve.engine.speculative`) samples the drafts and verifies them against the target.
`DraftWindows` are the three stages' context-KV caches (fp8_ds_mla in faithful mode), written
for committed positions only.
"""

from mxserve.model.dspark.draft import DSparkDraft
from mxserve.model.dspark.windows import DraftWindows

__all__ = ["DSparkDraft", "DraftWindows"]
