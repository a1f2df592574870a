"""How every command reports a bad checkpoint or config: one line on stderr, exit code 2. An
engine process that cannot start (`mxserve serve --engine-process`) is reported the same way:
exit code 2 when its cause was a bad checkpoint or config, 1 otherwise (out of memory, killed)."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import typer

from mxserve.config import ConfigError
from mxserve.engine.engine_client import EngineStartError
from mxserve.model.checkpoint import CheckpointError

P = ParamSpec("P")
R = TypeVar("R")

EXIT_BAD_INPUT = 2
EXIT_START_FAILED = 1


def one_line_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Turn CheckpointError / ConfigError into `error: <message>` on stderr and exit code 2."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except (CheckpointError, ConfigError) as exc:
            message = " ".join(str(exc).split())
            typer.echo(f"error: {message}", err=True)
            raise typer.Exit(EXIT_BAD_INPUT) from None
        except EngineStartError as exc:
            typer.echo(f"error: {' '.join(str(exc).split())}", err=True)
            raise typer.Exit(EXIT_BAD_INPUT if exc.bad_input else EXIT_START_FAILED) from None

    return wrapper


def show_progress() -> bool:
    """Progress bars only on an interactive terminal (they would clutter logs and error output)."""
    return sys.stderr.isatty()
