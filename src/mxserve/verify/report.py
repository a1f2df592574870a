"""Stage results and the verification report (JSON + Markdown), the product of `mxserve verify`.

Every stage returns a `StageResult`: a status, the evidence lines a human reads (each number
next to the threshold it was judged against) and the raw metrics a machine reads. Statuses:
PASS, FAIL, N/A (the stage has nothing to check on this deployment, and says why; it does not
fail the run) and NOT RUN (skipped after an earlier failure with --fail-fast, or not asked for).
The run passes only if no stage FAILed and every stage that must run did run.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any


class Status(StrEnum):
    PASS = "PASS"
    FAIL = "FAIL"
    NOT_APPLICABLE = "N/A"
    NOT_RUN = "NOT RUN"


@dataclass
class StageResult:
    name: str
    status: Status
    evidence: list[str] = field(default_factory=list)  # human-readable lines, thresholds stated
    metrics: dict[str, Any] = field(default_factory=dict)  # machine-readable numbers
    failures: list[str] = field(default_factory=list)  # one line per violated rule (empty unless FAIL)
    seconds: float = 0.0

    @classmethod
    def judged(cls, name: str, failures: list[str], evidence: list[str], metrics: dict[str, Any]) -> StageResult:
        """PASS when `failures` is empty, else FAIL; failures are also listed first in the evidence."""
        status = Status.FAIL if failures else Status.PASS
        return cls(name, status, [*failures, *evidence] if failures else evidence, metrics, failures)


@dataclass
class VerifyReport:
    model: str
    device: str
    profile: str  # "quick" or "full"
    command: str
    stages: list[StageResult] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        if not self.stages:
            return False
        for s in self.stages:
            if s.status is Status.FAIL or (s.status is Status.NOT_RUN and s.name not in _OPTIONAL_STAGES):
                return False
        return True

    @property
    def failed_stages(self) -> list[str]:
        return [s.name for s in self.stages if s.status is Status.FAIL]

    def stage(self, name: str) -> StageResult:
        for s in self.stages:
            if s.name == name:
                return s
        raise KeyError(f"no stage {name!r} in the report; stages: {[s.name for s in self.stages]}")

    def to_json(self) -> dict[str, Any]:
        return {
            "passed": self.passed, "failed_stages": self.failed_stages, "model": self.model, "device": self.device,
            "profile": self.profile, "command": self.command,
            "stages": [{**asdict(s), "status": s.status.value} for s in self.stages],
        }

    def to_markdown(self) -> str:
        verdict = "PASS" if self.passed else f"FAIL ({', '.join(self.failed_stages) or 'stages not run'})"
        lines = [f"# mxserve verify: {verdict}", "", f"- model: `{self.model}`", f"- device: {self.device}",
                 f"- profile: {self.profile}", f"- command: `{self.command}`", "",
                 "| stage | status | seconds | first evidence |", "|---|---|---|---|"]
        for s in self.stages:
            first = s.evidence[0] if s.evidence else ""
            lines.append(f"| {s.name} | {s.status.value} | {s.seconds:.1f} | {first.replace('|', '/')} |")
        for s in self.stages:
            lines += ["", f"## {s.name}: {s.status.value}", ""]
            lines += [f"- {line}" for line in s.evidence] or ["- (no evidence)"]
        return "\n".join(lines) + "\n"

    def write(self, json_path: Path) -> Path:
        """Write the JSON report and a Markdown summary next to it (same stem, .md); returns the .md path."""
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(self.to_json(), indent=1, default=str) + "\n")
        md_path = json_path.with_suffix(".md")
        md_path.write_text(self.to_markdown())
        return md_path


_OPTIONAL_STAGES = ("oracle",)  # runs only when asked for (--oracle); NOT RUN there is not a failure
