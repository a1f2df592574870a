"""`mxserve inspect DIR`: what a checkpoint is, and whether it is whole."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mxserve.cli.errors import one_line_errors, show_progress
from mxserve.config import AttentionKind, ModelConfig
from mxserve.model.checkpoint import CheckpointReader

_KIND_LETTER = {AttentionKind.SLIDING: "S", AttentionKind.CSA: "C", AttentionKind.HCA: "H"}


def _human_bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.1f} {unit}" if unit != "B" else f"{n} B"
        value /= 1024
    return f"{n} B"


def describe_config(c: ModelConfig) -> list[str]:
    """The config summary and compact layer schedule, one string per line."""
    n = c.num_hidden_layers
    if c.dspark is not None:
        d = c.dspark
        layout = (f"0731 (DSpark draft: {d.num_stages} stages mtp.0-{d.num_stages - 1}, target layers "
                  f"{list(d.target_layer_ids)}, default block size {d.block_size}, markov rank {d.markov_rank})")
    else:
        layout = f"preview ({c.num_mtp_blocks} MTP block{'s' if c.num_mtp_blocks != 1 else ''})"
    kinds = c.layer_kinds
    attention = "".join(_KIND_LETTER[k] for k in kinds)
    extra = [c.kind_of_ratio(r) for r in c.compress_ratios[n:]]
    moe = "".join("h" if c.is_hash_layer(i) else "l" for i in range(n))
    counts = ", ".join(f"{sum(k is kind for k in kinds)} {kind.value}" for kind in AttentionKind)
    return [
        f"layout      {layout}",
        f"model       {n} layers, hidden {c.hidden_size}, vocab {c.vocab_size}, "
        f"{c.num_attention_heads} heads x {c.head_dim} (rope {c.qk_rope_head_dim}), q_lora {c.q_lora_rank}, "
        f"wo {c.o_groups} groups x {c.o_lora_rank}, window {c.sliding_window}, hc {c.hc_mult}",
        f"compress    CSA ratio {c.compress_rate_csa} (indexer {c.index_n_heads} x {c.index_head_dim}, "
        f"top-{c.index_topk}), HCA ratio {c.compress_rate_hca}",
        f"moe         {c.n_routed_experts} experts top-{c.num_experts_per_tok} + {c.n_shared_experts} shared, "
        f"intermediate {c.moe_intermediate_size}, experts {c.expert_dtype}, {c.num_hash_layers} hash layers",
        f"attention   {attention}" + (f" | draft {''.join(_KIND_LETTER[k] for k in extra)}" if extra else "")
        + f"   (S sliding, C CSA, H HCA: {counts})",
        f"routing     {moe}   (h hash tid2eid, l learned bias)",
    ]


@one_line_errors
def inspect(
    path: Annotated[Path, typer.Argument(help="Checkpoint directory (config.json + safetensors shards).")],
    verify: Annotated[bool, typer.Option("--verify/--no-verify",
                                         help="Re-hash the files listed in mxserve-manifest.json.")] = True,
    scan: Annotated[bool, typer.Option("--scan/--no-scan",
                                       help="Read scale bytes (NaN 255) and tid2eid ranges, not just headers.")] = True,
) -> None:
    """Summarise a release-layout DeepSeek-V4 checkpoint and check it against its config.

    Prints the layout (preview or 0731 with its DSpark draft), the dimensions, the per-layer
    schedule of attention types and MoE routing, the bytes stored per format, the tensor count
    and the manifest status. Every tensor's name, dtype and shape is checked against the
    inventory derived from config.json; a problem is one line on stderr and exit code 2.
    """
    reader = CheckpointReader(path)
    reader.validate(verify_manifest=verify, check_values=scan, progress=show_progress())
    lines = [f"checkpoint  {path}", *describe_config(reader.config)]
    by_format = reader.bytes_by_format()
    total = sum(by_format.values())
    lines.append(f"tensors     {reader.num_tensors} in {len(reader.files.shard_names)} shard(s), {_human_bytes(total)}")
    for kind, nbytes in sorted(by_format.items(), key=lambda kv: -kv[1]):
        lines.append(f"  {kind:<18} {_human_bytes(nbytes):>12}  ({nbytes} B)")
    lines.append(f"manifest    {reader.manifest_status}")
    lines.append(f"checks      names/dtypes/shapes ok{', scales ok' if scan else ''}")
    typer.echo("\n".join(lines))
