"""`mxserve verify`: the staged correctness probe (see docs/verification.md).

Prints each stage as PASS / FAIL / N/A / NOT RUN with its evidence, writes a JSON report and a
Markdown summary next to it, and exits 0 only if every stage passed (N/A counts as passing: it
states why there was nothing to check). Exit 1: a stage failed. Exit 2: bad options.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer

from mxserve.cli.errors import EXIT_BAD_INPUT, one_line_errors

EXIT_VERIFY_FAILED = 1
STAGE_NAMES = ("env", "checkpoint", "load", "kernels", "layers", "quality", "generate", "determinism", "oracle")


@one_line_errors
def verify(
    model: Annotated[Path | None, typer.Option("--model", help="Checkpoint directory; default: the packaged small model.")] = None,
    device: Annotated[str, typer.Option("--device", help="auto, cpu, cuda or cuda:N.")] = "auto",
    oracle: Annotated[str | None, typer.Option("--oracle", help="Also compare with an independent implementation: 'transformers'.")] = None,
    report: Annotated[Path, typer.Option("--report", help="JSON report path (a .md summary is written next to it).")] = Path("mxserve-verify.json"),
    full: Annotated[bool, typer.Option("--full", help="The whole battery: 50 repeats, 63 others decoding 32 tokens, full held-out text.")] = False,
    quick: Annotated[bool, typer.Option("--quick", help="The default CPU-friendly profile (see docs/verification.md).")] = False,
    validate: Annotated[bool, typer.Option("--validate", help="In-graph finite checks (cache readers, attention, MoE) naming layer and request.")] = False,
    fail_fast: Annotated[bool, typer.Option("--fail-fast", help="Stop at the first failing stage.")] = False,
    stages: Annotated[str | None, typer.Option("--stages", help=f"Comma-separated subset of {','.join(STAGE_NAMES)}.")] = None,
) -> None:
    """Prove this deployment computes DeepSeek-V4 correctly, or say exactly where it does not."""
    from mxserve.verify.report import Status
    from mxserve.verify.runner import run_verify
    from mxserve.verify.session import VerifyOptions

    if full and quick:
        typer.echo("error: --full and --quick exclude each other", err=True)
        raise typer.Exit(EXIT_BAD_INPUT)
    only = None
    if stages is not None:
        only = [s.strip() for s in stages.split(",") if s.strip()]
        unknown = sorted(set(only) - set(STAGE_NAMES))
        if unknown:
            typer.echo(f"error: unknown stage(s) {unknown}; known: {list(STAGE_NAMES)}", err=True)
            raise typer.Exit(EXIT_BAD_INPUT)
    try:
        options = VerifyOptions(model_dir=model, device=device, profile="full" if full else "quick", oracle=oracle,
                                validate=validate, fail_fast=fail_fast)
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(EXIT_BAD_INPUT) from None

    def echo(result) -> None:
        typer.echo(f"[{result.status.value:>7}] {result.name} ({result.seconds:.1f} s)")
        shown = result.evidence if result.status is not Status.NOT_RUN else result.evidence[:1]
        for line in shown:
            typer.echo(f"          {line}")

    command = "mxserve " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    result = run_verify(options, command=command, only=only, echo=echo)
    md_path = result.write(report)
    verdict = "PASS" if result.passed else f"FAIL: {', '.join(result.failed_stages) or 'stages not run'}"
    typer.echo(f"verify: {verdict} (report {report}, summary {md_path})")
    if not result.passed:
        raise typer.Exit(EXIT_VERIFY_FAILED)
