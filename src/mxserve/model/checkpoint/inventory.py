"""The exact tensors a DeepSeek-V4 release checkpoint holds, derived from its config.

This module owns the release layout (dsv4-spec §6.3-6.5, dsv4-0731 §2.3): for a `ModelConfig`
it lists every tensor by name, safetensors dtype string and shape, grouped into

* **linears** (`LinearSpec`): a projection `<prefix>.weight` with a logical `[out, in]` shape and
  the format the release stores it in: FP8 e4m3 with 128x128 UE8M0 block scales in
  `<prefix>.scale`, MXFP4 (two e2m1 codes per I8 byte, one UE8M0 scale per 32 columns), or plain
  BF16 (compressor / indexer projections). A linear stored in BF16/F32 **without** a `.scale`
  sibling is accepted wherever the release has FP8/MXFP4: that is a full-precision checkpoint;
* **plain tensors** (`TensorSpec`): embeddings, norms, router weights and biases, `tid2eid`,
  attention sinks, mHC parameters, compressor position biases, DSpark heads.

The order of `Inventory.linears` and `Inventory.tensors` is the order the writer emits tensors:
globals, then layer by layer, then the MTP / DSpark blocks.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum

from mxserve.config import AttentionKind, ModelConfig

# safetensors dtype strings, as they appear in shard headers.
F8_E4M3 = "F8_E4M3"
F8_E8M0 = "F8_E8M0"
I8 = "I8"
U8 = "U8"
I64 = "I64"
BF16 = "BF16"
F16 = "F16"
F32 = "F32"

FULL_PRECISION_DTYPES = (BF16, F32, F16)  # what a full-precision linear may be stored in
MXFP4_GROUP = 32  # columns per UE8M0 scale in an MXFP4 expert weight


class ReleaseFormat(StrEnum):
    """How the release stores a linear's weight."""

    FP8_BLOCK = "fp8_block"  # F8_E4M3 [out, in] + F8_E8M0 scale [ceil(out/bo), ceil(in/bi)]
    MXFP4 = "mxfp4"  # I8 [out, in/2] (low nibble = even column) + F8_E8M0 scale [out, in/32]
    BF16 = "bf16"  # BF16 [out, in], no scale


@dataclass(frozen=True)
class LinearSpec:
    """One projection of the release layout: `<prefix>.weight` (+ `<prefix>.scale`)."""

    prefix: str  # e.g. "layers.0.attn.wq_a"
    out_features: int
    in_features: int
    release_format: ReleaseFormat
    block: tuple[int, int] = (128, 128)  # FP8 scale block (rows, cols); unused otherwise

    @property
    def weight_name(self) -> str:
        return f"{self.prefix}.weight"

    @property
    def scale_name(self) -> str:
        return f"{self.prefix}.scale"

    @property
    def logical_shape(self) -> tuple[int, int]:
        return (self.out_features, self.in_features)

    @property
    def is_quantized(self) -> bool:
        return self.release_format is not ReleaseFormat.BF16

    def release_tensors(self) -> list[tuple[str, str, tuple[int, ...]]]:
        """(name, dtype, shape) of the tensors the release stores for this linear."""
        out, inp = self.out_features, self.in_features
        if self.release_format is ReleaseFormat.FP8_BLOCK:
            bo, bi = self.block
            return [
                (self.weight_name, F8_E4M3, (out, inp)),
                (self.scale_name, F8_E8M0, (math.ceil(out / bo), math.ceil(inp / bi))),
            ]
        if self.release_format is ReleaseFormat.MXFP4:
            return [
                (self.weight_name, I8, (out, inp // 2)),
                (self.scale_name, F8_E8M0, (out, inp // MXFP4_GROUP)),
            ]
        return [(self.weight_name, BF16, (out, inp))]


@dataclass(frozen=True)
class TensorSpec:
    """One plain (never quantized) tensor: its release dtype and shape, and the dtypes accepted."""

    name: str
    dtype: str  # the release dtype, what the writer emits
    shape: tuple[int, ...]
    accepted_dtypes: tuple[str, ...] = ()  # besides `dtype` (e.g. F32 for full-precision copies)

    def accepts(self, dtype: str) -> bool:
        return dtype == self.dtype or dtype in self.accepted_dtypes


@dataclass(frozen=True)
class Inventory:
    """Every tensor a checkpoint for `config` must hold, in write order."""

    linears: dict[str, LinearSpec]  # by prefix
    tensors: dict[str, TensorSpec]  # by full name

    def release_tensors(self) -> Iterator[tuple[str, str, tuple[int, ...]]]:
        """(name, dtype, shape) of the release layout: linears' tensors, then plain tensors."""
        for spec in self.linears.values():
            yield from spec.release_tensors()
        for t in self.tensors.values():
            yield t.name, t.dtype, t.shape

    def num_release_tensors(self) -> int:
        return sum(1 for _ in self.release_tensors())

    def linear_of(self, name: str) -> LinearSpec | None:
        """The linear a tensor name belongs to (`<prefix>.weight` / `<prefix>.scale`), if any."""
        prefix, _, leaf = name.rpartition(".")
        if leaf in ("weight", "scale"):
            return self.linears.get(prefix)
        return None


def _float_spec(name: str, dtype: str, shape: tuple[int, ...]) -> TensorSpec:
    # A full-precision checkpoint may keep BF16 tensors in F32 (e.g. a transformers export whose
    # norms are fp32); F32 tensors stay F32.
    return TensorSpec(name, dtype, shape, (F32,) if dtype == BF16 else ())


class _Builder:
    def __init__(self, config: ModelConfig) -> None:
        self.c = config
        q = config.quantization
        self.block = tuple(q.weight_block_size) if q is not None else (128, 128)
        self.linears: dict[str, LinearSpec] = {}
        self.tensors: dict[str, TensorSpec] = {}

    def linear(self, prefix: str, out: int, inp: int, fmt: ReleaseFormat) -> None:
        self.linears[prefix] = LinearSpec(prefix, out, inp, fmt, self.block)  # type: ignore[arg-type]

    def tensor(self, name: str, dtype: str, *shape: int) -> None:
        self.tensors[name] = _float_spec(name, dtype, tuple(shape)) if dtype in (BF16, F32) else TensorSpec(
            name, dtype, tuple(shape)
        )

    def hc(self, prefix: str, site: str, rows: int) -> None:
        """mHC parameters `hc_<site>_{fn,base,scale}` (rows = (2+hc)*hc for blocks, hc for heads)."""
        c = self.c
        self.tensor(f"{prefix}hc_{site}_fn", F32, rows, c.hc_mult * c.hidden_size)
        self.tensor(f"{prefix}hc_{site}_base", F32, rows)
        self.tensor(f"{prefix}hc_{site}_scale", F32, 3 if site in ("attn", "ffn") else 1)

    def block_tensors(self, prefix: str, ratio: int, is_hash: bool) -> None:
        """One V4 decoder block (`layers.i.` or `mtp.s.`) with compress ratio `ratio`."""
        c = self.c
        fp8, h = ReleaseFormat.FP8_BLOCK, c.hidden_size
        kind = c.kind_of_ratio(ratio)
        self.tensor(f"{prefix}attn_norm.weight", BF16, h)
        self.tensor(f"{prefix}ffn_norm.weight", BF16, h)
        mix_rows = (2 + c.hc_mult) * c.hc_mult
        self.hc(prefix, "attn", mix_rows)
        self.hc(prefix, "ffn", mix_rows)
        a = f"{prefix}attn."
        self.tensor(f"{a}q_norm.weight", BF16, c.q_lora_rank)
        self.tensor(f"{a}kv_norm.weight", BF16, c.head_dim)
        self.tensor(f"{a}attn_sink", F32, c.num_attention_heads)
        self.linear(f"{a}wq_a", c.q_lora_rank, h, fp8)
        self.linear(f"{a}wq_b", c.num_attention_heads * c.head_dim, c.q_lora_rank, fp8)
        self.linear(f"{a}wkv", c.head_dim, h, fp8)
        self.linear(f"{a}wo_a", c.o_groups * c.o_lora_rank, c.num_attention_heads * c.head_dim // c.o_groups, fp8)
        self.linear(f"{a}wo_b", h, c.o_groups * c.o_lora_rank, fp8)
        if kind is not AttentionKind.SLIDING:
            overlap = 2 if kind is AttentionKind.CSA else 1  # CSA projects two series (A | B)
            self.linear(f"{a}compressor.wkv", overlap * c.head_dim, h, ReleaseFormat.BF16)
            self.linear(f"{a}compressor.wgate", overlap * c.head_dim, h, ReleaseFormat.BF16)
            self.tensor(f"{a}compressor.ape", F32, ratio, overlap * c.head_dim)
            self.tensor(f"{a}compressor.norm.weight", BF16, c.head_dim)
        if kind is AttentionKind.CSA:
            ix = f"{a}indexer."
            self.linear(f"{ix}wq_b", c.index_n_heads * c.index_head_dim, c.q_lora_rank, fp8)
            self.linear(f"{ix}weights_proj", c.index_n_heads, h, ReleaseFormat.BF16)
            self.linear(f"{ix}compressor.wkv", 2 * c.index_head_dim, h, ReleaseFormat.BF16)
            self.linear(f"{ix}compressor.wgate", 2 * c.index_head_dim, h, ReleaseFormat.BF16)
            self.tensor(f"{ix}compressor.ape", F32, ratio, 2 * c.index_head_dim)
            self.tensor(f"{ix}compressor.norm.weight", BF16, c.index_head_dim)
        f = f"{prefix}ffn."
        self.tensor(f"{f}gate.weight", BF16, c.n_routed_experts, h)
        if is_hash:
            self.tensor(f"{f}gate.tid2eid", I64, c.vocab_size, c.num_experts_per_tok)
        else:
            self.tensor(f"{f}gate.bias", F32, c.n_routed_experts)
        inter = c.moe_intermediate_size
        if c.n_shared_experts:
            self.linear(f"{f}shared_experts.w1", inter, h, fp8)
            self.linear(f"{f}shared_experts.w2", h, inter, fp8)
            self.linear(f"{f}shared_experts.w3", inter, h, fp8)
        expert_fmt = ReleaseFormat.MXFP4 if c.expert_dtype == "fp4" else fp8
        for e in range(c.n_routed_experts):
            self.linear(f"{f}experts.{e}.w1", inter, h, expert_fmt)
            self.linear(f"{f}experts.{e}.w2", h, inter, expert_fmt)
            self.linear(f"{f}experts.{e}.w3", inter, h, expert_fmt)

    def head(self, prefix: str) -> None:
        """Final norm + HyperHead collapse (`norm.weight`, `hc_head_*`)."""
        self.tensor(f"{prefix}norm.weight", BF16, self.c.hidden_size)
        self.hc(prefix, "head", self.c.hc_mult)

    def build(self) -> Inventory:
        c = self.c
        h, n = c.hidden_size, c.num_hidden_layers
        self.tensor("embed.weight", BF16, c.vocab_size, h)
        if not c.tie_word_embeddings:
            self.tensor("head.weight", BF16, c.vocab_size, h)
        self.head("")
        for i in range(n):
            self.block_tensors(f"layers.{i}.", c.compress_ratios[i], c.is_hash_layer(i))
        for j in range(c.num_mtp_blocks):  # preview MTP (spec §6.5): never hash-routed
            p = f"mtp.{j}."
            self.block_tensors(p, c.compress_ratios[n + j] if n + j < len(c.compress_ratios) else 0, False)
            self.tensor(f"{p}enorm.weight", BF16, h)
            self.tensor(f"{p}hnorm.weight", BF16, h)
            self.linear(f"{p}e_proj", h, h, ReleaseFormat.FP8_BLOCK)
            self.linear(f"{p}h_proj", h, h, ReleaseFormat.FP8_BLOCK)
            self.head(p)
        if c.dspark is not None:  # 0731 DSpark draft (dsv4-0731 §2.3)
            d = c.dspark
            for s in range(d.num_stages):
                p = f"mtp.{s}."
                self.block_tensors(p, c.compress_ratios[n + s], False)
                if s == 0:
                    self.linear(f"{p}main_proj", h, len(d.target_layer_ids) * h, ReleaseFormat.FP8_BLOCK)
                    self.tensor(f"{p}main_norm.weight", BF16, h)
                if s == d.num_stages - 1:
                    self.head(p)
                    # Markov / confidence dtypes are UNCONFIRMED for 0731: accept BF16 and F32.
                    self.tensors[f"{p}markov_head.markov_w1.weight"] = TensorSpec(
                        f"{p}markov_head.markov_w1.weight", BF16, (c.vocab_size, d.markov_rank), (F32,))
                    self.tensors[f"{p}markov_head.markov_w2.weight"] = TensorSpec(
                        f"{p}markov_head.markov_w2.weight", BF16, (c.vocab_size, d.markov_rank), (F32,))
                    self.tensors[f"{p}confidence_head.proj.weight"] = TensorSpec(
                        f"{p}confidence_head.proj.weight", F32, (1, h + d.markov_rank), (BF16,))
        return Inventory(self.linears, self.tensors)


def build_inventory(config: ModelConfig) -> Inventory:
    """The release-layout inventory for `config` (preview MTP or 0731 DSpark per `config.layout`)."""
    return _Builder(config).build()
