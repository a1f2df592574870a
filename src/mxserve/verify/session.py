"""What one `mxserve verify` run shares between its stages: the options and the loaded engine.

`VerifyOptions` is what the user chose (frozen); `VerifySession` holds what the stages build
once and reuse (checkpoint reader, loaded weights, the engine under test, the in-graph
validation observer) so the battery, quality and determinism stages all test the *same*
deployment object, built the way `LLM(...)` builds it for users.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROFILES = ("quick", "full")


@dataclass(frozen=True)
class VerifyOptions:
    model_dir: Path | None = None  # None = the packaged default model
    device: str = "auto"
    profile: str = "quick"  # "quick" (default, CPU-friendly) or "full" (the whole battery, 50 repeats)
    oracle: str | None = None  # None or "transformers"
    validate: bool = False  # in-graph finite checks (FiniteCheckObserver) during every engine stage
    fail_fast: bool = False  # stop at the first failing stage (the rest are NOT RUN)
    max_num_seqs: int = 64  # the determinism stage runs 64 requests at once

    def __post_init__(self) -> None:
        if self.profile not in PROFILES:
            raise ValueError(f"VerifyOptions.profile={self.profile!r}: must be one of {PROFILES}")
        if self.oracle not in (None, "transformers"):
            raise ValueError(f"VerifyOptions.oracle={self.oracle!r}: only 'transformers' is available")

    @property
    def is_full(self) -> bool:
        return self.profile == "full"

    def resolved_model_dir(self) -> Path:
        if self.model_dir is not None:
            return Path(self.model_dir)
        from mxserve import default_model_path

        return Path(default_model_path())


@dataclass
class VerifySession:
    options: VerifyOptions
    reader: Any = None  # CheckpointReader, set by the checkpoint stage
    weights: dict[str, Any] | None = None  # the loaded (packed) weights the checkpoint stage inspected
    llm: Any = None  # the LLM under test, set by the load stage
    observer: Any = None  # FiniteCheckObserver when --validate
    load_log: list[str] = field(default_factory=list)  # engine start-up lines (cache plan, linear backend)
    battery: Any = None  # BatteryResult, set by the generate stage, read by determinism

    @property
    def model_dir(self) -> Path:
        return self.options.resolved_model_dir()

    @property
    def tokenizer(self):
        return self.llm.tokenizer

    @property
    def config(self):
        return self.llm.engine.model_config
