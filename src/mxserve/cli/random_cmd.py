"""`mxserve random-checkpoint DIR --config NAME`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mxserve.cli.errors import one_line_errors, show_progress
from mxserve.model.checkpoint.writer import parse_size
from mxserve.testing import TINY_CONFIGS, random_checkpoint


@one_line_errors
def random_checkpoint_cmd(
    path: Annotated[Path, typer.Argument(help="Directory to write (created).")],
    config: Annotated[str, typer.Option(help=f"Named config: {', '.join(TINY_CONFIGS)}.")] = "tiny-all",
    seed: Annotated[int, typer.Option(help="Random seed (same seed, same bytes).")] = 0,
    max_shard_size: Annotated[str, typer.Option(help="Largest shard, e.g. 4GB, 500MB.")] = "4GB",
) -> None:
    """Write a release-layout checkpoint with realistic random weights (no transformers needed).

    Tensors are generated, quantized (FP8 blocks, MXFP4 experts) and written one at a time, so
    even `--config flash` (~160 GB) needs only one shard of memory.
    """
    out = random_checkpoint(config, path, seed, max_shard_bytes=parse_size(max_shard_size), progress=show_progress())
    typer.echo(f"wrote {config} checkpoint (seed {seed}) to {out}")
