"""The `mxserve` command line: one typer app, one small module per command."""

from __future__ import annotations

import logging
import sys

import typer

from mxserve.cli.bench import bench_app
from mxserve.cli.convert_cmd import convert
from mxserve.cli.inspect_cmd import inspect
from mxserve.cli.random_cmd import random_checkpoint_cmd
from mxserve.cli.run_cmd import run
from mxserve.cli.serve_cmd import serve
from mxserve.cli.verify_cmd import verify

app = typer.Typer(
    name="mxserve",
    help="DeepSeek-V4 in its release formats (MXFP4, FP8 block-scaled) on hardware without native FP4/FP8.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.command("run")(run)
app.command("serve")(serve)
app.command("inspect")(inspect)
app.command("convert")(convert)
app.command("random-checkpoint")(random_checkpoint_cmd)
app.command("verify")(verify)
app.add_typer(bench_app, name="bench")


def main() -> None:
    # Engine start-up lines (cache plan, chosen kernels) go to stderr, message only.
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    app()


if __name__ == "__main__":
    main()
