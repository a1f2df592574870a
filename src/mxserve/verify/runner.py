"""Run the verification stages in order and collect the report (`mxserve verify`).

Order: env → checkpoint → load → kernels → layers → quality → generate → determinism → oracle.
`quality` runs before `generate` (the issue lists it after): it is one prefill, far cheaper
than the battery, and it is the stage that catches weight-level faults, so a broken deployment
fails fast. A stage that raises is a FAIL whose evidence is the exception (a crash is a
finding, not a reason to lose the report). With `fail_fast` the stages after the first failure
are NOT RUN; stages that need the engine are NOT RUN when `load` failed.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Sequence

from mxserve.verify.report import StageResult, Status, VerifyReport
from mxserve.verify.session import VerifyOptions, VerifySession

StageFn = Callable[[VerifySession], StageResult]

ENGINE_STAGES = ("kernels", "layers", "quality", "generate", "determinism", "oracle")


def stage_table(options: VerifyOptions) -> list[tuple[str, StageFn]]:
    from mxserve.verify.stage_checkpoint import run_checkpoint, run_load
    from mxserve.verify.stage_determinism import run_determinism
    from mxserve.verify.stage_env import run_env
    from mxserve.verify.stage_generate import run_generate
    from mxserve.verify.stage_kernels import run_kernels
    from mxserve.verify.stage_layers import run_layers
    from mxserve.verify.stage_quality import run_quality

    stages: list[tuple[str, StageFn]] = [
        ("env", run_env), ("checkpoint", run_checkpoint), ("load", run_load), ("kernels", run_kernels),
        ("layers", run_layers), ("quality", run_quality), ("generate", run_generate),
        ("determinism", run_determinism),
    ]
    if options.oracle == "transformers":
        from mxserve.verify.oracle import run_oracle

        stages.append(("oracle", run_oracle))
    return stages


def run_verify(options: VerifyOptions, *, command: str = "mxserve verify", only: Sequence[str] | None = None,
               echo: Callable[[StageResult], None] | None = None) -> VerifyReport:
    """Run every stage (or only those named in `only`, the rest NOT RUN); `echo` sees each result."""
    session = VerifySession(options)
    report = VerifyReport(model=str(session.model_dir), device=options.device, profile=options.profile,
                          command=command)
    stop_reason: str | None = None
    for name, fn in stage_table(options):
        if only is not None and name not in only:
            result = StageResult(name, Status.NOT_RUN, ["not selected (--stages)"])
        elif stop_reason is not None:
            result = StageResult(name, Status.NOT_RUN, [stop_reason])
        elif name in ENGINE_STAGES and session.llm is None:
            result = StageResult(name, Status.NOT_RUN, ["the engine did not load"])
        else:
            started = time.monotonic()
            try:
                result = fn(session)
            except Exception as exc:  # a crash inside a stage is its verdict, with the traceback as evidence
                tail = traceback.format_exc().strip().splitlines()[-6:]
                result = StageResult.judged(name, [f"stage raised {type(exc).__name__}: {' '.join(str(exc).split())}"],
                                            tail, {})
            result.seconds = round(time.monotonic() - started, 2)
            if result.status is Status.FAIL and options.fail_fast:
                stop_reason = f"not run: --fail-fast after {name} failed"
        report.stages.append(result)
        if echo is not None:
            echo(result)
    return report
