"""`mxserve convert SRC DST --to {release,transformers}`."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from mxserve.cli.errors import one_line_errors, show_progress
from mxserve.model.checkpoint import convert_checkpoint
from mxserve.model.checkpoint.writer import parse_size


class Target(StrEnum):
    release = "release"
    transformers = "transformers"


@one_line_errors
def convert(
    src: Annotated[Path, typer.Argument(help="Source checkpoint directory (either layout).")],
    dst: Annotated[Path, typer.Argument(help="Destination directory (must not hold a checkpoint).")],
    to: Annotated[Target, typer.Option("--to", help="Layout to write.")],
    quantize: Annotated[bool | None, typer.Option(
        "--quantize/--no-quantize",
        help="release: quantize with the release's format per tensor (default) or keep full precision.",
    )] = None,
    max_shard_size: Annotated[str, typer.Option(help="Largest shard, e.g. 4GB, 500MB.")] = "4GB",
) -> None:
    """Convert between transformers' DeepseekV4 layout and the release layout.

    --to release quantizes like the release (FP8 e4m3 128x128 blocks for dense linears, MXFP4
    for routed experts, BF16/F32 elsewhere); with --no-quantize weights stay in full precision
    (packed inputs are dequantized exactly). --to transformers writes transformers' state-dict
    names in full precision (experts packed as gate_up_proj / down_proj). Tokenizer files are
    copied; the output carries a SHA-256 manifest.
    """
    out = convert_checkpoint(src, dst, to=to.value, quantize=quantize,
                             max_shard_bytes=parse_size(max_shard_size), progress=show_progress())
    typer.echo(f"wrote {to.value} checkpoint to {out}")
