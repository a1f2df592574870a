"""The compressor step of a CSA/HCA layer (spec §3.4.3) and of a CSA indexer (§3.4.4).

Per token it stores one fp32 state row `[a_t | z_t + ape[p mod m]]` at the token's position
(state cache, slot per position). When the token at position m·s + m − 1 is processed, entry s
is emitted by pooling the rows of its receptive field: HCA (no overlap) the m rows of window s;
CSA (overlap) the previous window's A halves then window s's B halves (2m rows; rows before
position 0 are absent: logit −inf, value 0). The pooled vector is RMS-normed, rotated at
position m·s (the window's FIRST token) with the compress table, and written to the entry cache.

Rows are stored before any entry is pooled, and pooling reads them back from the state cache,
so a chunk boundary anywhere gives the same entries as one long prefill (spec §12 item 20).
The emit step (pool → norm → RoPE → encode → insert) is one op, `kernels.compressor_emit`
(a fused Triton kernel, or the unfused twin `fused_ref.compressor_emit_ref` by default).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mxserve.config import AttentionKind, ModelConfig
from mxserve.kernels.linear import Weight
from mxserve.model.fused_ref import compressor_emit_ref
from mxserve.model.kernel_set import REFERENCE_KERNELS, KernelSet
from mxserve.model.kv_state import Pool


@dataclass(frozen=True)
class CompressorWeights:
    wkv: Weight  # [c·d, D]
    wgate: Weight  # [c·d, D]
    ape: torch.Tensor  # [m, c·d] fp32 position bias added to the gate logits
    norm: torch.Tensor  # [d]


@dataclass(frozen=True)
class CompressorSpec:
    ratio: int  # m
    overlap: bool  # CSA-style overlapping windows (c = 2) vs HCA (c = 1)
    dim: int  # d, the entry width

    @property
    def width(self) -> int:  # c·d
        return (2 if self.overlap else 1) * self.dim


@dataclass(frozen=True)
class CompressorSite:
    """One compressor of a layer: its math (`spec`) and the pools its rows and entries live in."""

    spec: CompressorSpec
    state_pool: Pool
    entry_pool: Pool


def kind_compressor_site(cfg: ModelConfig, kind: AttentionKind) -> CompressorSite:
    """The own compressor of a CSA or HCA layer of `cfg`."""
    if kind is AttentionKind.CSA:
        return CompressorSite(CompressorSpec(cfg.compress_rate_csa, overlap=True, dim=cfg.head_dim),
                              Pool.CSA_STATE, Pool.CSA)
    if kind is AttentionKind.HCA:
        return CompressorSite(CompressorSpec(cfg.compress_rate_hca, overlap=False, dim=cfg.head_dim),
                              Pool.HCA_STATE, Pool.HCA)
    raise ValueError(f"a {kind.value} layer has no compressor")


def indexer_compressor_site(cfg: ModelConfig) -> CompressorSite:
    """A CSA layer's indexer compressor (its keys live in the indexer cache)."""
    return CompressorSite(CompressorSpec(cfg.compress_rate_csa, overlap=True, dim=cfg.index_head_dim),
                          Pool.INDEXER_STATE, Pool.INDEXER)


@dataclass(frozen=True)
class CompressorAddresses:
    """Where one step's compressor rows go and which entries they complete: index math only, no
    data. The decode path computes it once per step and hands it to every layer of the kind
    (`mxserve.model.decode_addresses`); the per-chunk path computes it per call."""

    state_slots: torch.Tensor  # [T] int64 slot of each token's state row
    entry_slots: torch.Tensor  # [T] int64 slot of the entry the token completes, −1 if none
    entry_positions: torch.Tensor  # [T] int64 RoPE position m·s of that entry (its window's first token)
    row_slots: torch.Tensor  # [T, R] int64 state slots of that entry's receptive field, −1 before position 0


def compressor_addresses(
    positions: torch.Tensor, spec: CompressorSpec, *, state_slots_of, entry_slots_of,
) -> CompressorAddresses:
    """The addresses of T tokens at `positions` [T] (no host sync, a fixed shape).

    `state_slots_of(pos [T, ...]) -> slots [T, ...]`, `entry_slots_of(s [T]) -> slots [T]` map
    positions/entries to global cache slots (−1 for negative indices), row t's with row t's
    tables: one sequence's tables for a chunk, each row's own for a decode batch
    (`mxserve.model.decode_batch.paged_slots`); positions need not be contiguous across rows then.
    """
    m = spec.ratio
    completes = (positions + 1).remainder(m) == 0
    entry_ids = torch.div(positions + 1, m, rounding_mode="floor") - 1  # [T]
    entry_slots = torch.where(completes, entry_slots_of(entry_ids), -1)
    current = entry_ids[:, None] * m + torch.arange(m, device=positions.device)[None, :]  # [T, m] window s
    row_positions = torch.cat((current - m, current), dim=1) if spec.overlap else current
    return CompressorAddresses(state_slots_of(positions), entry_slots, entry_ids * m, state_slots_of(row_positions))


def compressor_step(
    x: torch.Tensor,
    positions: torch.Tensor,
    weights: CompressorWeights,
    spec: CompressorSpec,
    addresses: CompressorAddresses,
    *,
    state_cache,
    entry_cache,
    inv_freq: torch.Tensor,
    rms_eps: float,
    out_dtype: torch.dtype,
    round_pooled_to_bf16: bool,
    kernels: KernelSet = REFERENCE_KERNELS,
) -> None:
    """Process T tokens: x [T, D] (normed block input), positions [T], their `addresses`
    (`compressor_addresses` of these positions and tables)."""
    a = kernels.linear(x, weights.wkv)  # fp32 [T, c·d] (the release computes these in fp32)
    z = kernels.linear(x, weights.wgate)
    kernels.compressor_state_write(state_cache, addresses.state_slots, a, z, weights.ape, positions, spec.ratio)

    emit_args = dict(ratio=spec.ratio, overlap=spec.overlap, norm_weight=weights.norm, eps=rms_eps,
                     inv_freq=inv_freq, out_dtype=out_dtype, round_pooled_to_bf16=round_pooled_to_bf16,
                     entry_cache=entry_cache)
    if kernels.compressor_emit is None:
        compressor_emit_ref(state_cache, addresses.row_slots, addresses.entry_slots, addresses.entry_positions,
                            compress_pool=kernels.compress_pool, **emit_args)
    else:
        kernels.compressor_emit(state_cache, addresses.row_slots, addresses.entry_slots, addresses.entry_positions,
                                **emit_args)
