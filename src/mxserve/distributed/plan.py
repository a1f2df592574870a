"""The sharding plan: which slice of every weight each rank holds, decided from the config alone.

Tensor parallelism over N ranks (docs/parallelism.md):

* attention: query heads split whole (`wq_b` rows, `attn_sink`); the single KV head, `wq_a`,
  `wkv`, the compressors and the indexer are replicated (so are their caches). The grouped
  `wo_a`: with N <= o_groups each rank owns o_groups/N whole groups and `wo_b` is row-parallel
  over them; with N > o_groups each group spans N/o_groups ranks: a rank holds its heads' columns
  of its group's `wo_a` rows (a partial group output, summed inside the group), and a row slice
  (D·o_groups/N output features) of its group's `wo_b` columns;
* MoE: the router is replicated; experts are split along the intermediate dim (w1/w3 rows, w2
  columns) `moe_tp` ways, the largest divisor of N that keeps whole 128-blocks; when moe_tp < N
  the N/moe_tp ranks holding the same shard split the tokens instead. With expert parallelism
  the routed experts are partitioned whole (n_routed_experts/N per rank) and the shared expert
  follows the tensor-parallel rule;
* embedding and head: vocab-parallel (rows split).

Shard boundaries sit on 128-blocks: the FP8 weight block (128x128 UE8M0) and the 128-channel
activation-quantization block of the faithful numerics, so a shard's codes, scales and QAT blocks
are exactly the full weight's. A config that cannot split that way raises `ShardingError` naming
the config values, before any process starts.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass

from mxserve.config import ModelConfig

ACTIVATION_BLOCK = 128  # channels per FP8 activation-QAT scale (fake_quant_fp8_pow2(block=128))


class ShardingError(ValueError):
    """A model config that cannot be split over the requested ranks; the message names the values."""


@dataclass(frozen=True)
class ParallelConfig:
    tensor_parallel_size: int = 1  # ranks (processes, one device each)
    enable_expert_parallel: bool = False  # routed experts partitioned whole over the ranks

    def __post_init__(self) -> None:
        n = self.tensor_parallel_size
        if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
            raise ValueError(f"tensor_parallel_size={n!r} must be a positive integer")


@dataclass(frozen=True)
class Shard:
    """The part of a weight one rank holds: a row range and/or a column range (None = all)."""

    rows: tuple[int, int] | None = None
    cols: tuple[int, int] | None = None

    @property
    def is_full(self) -> bool:
        return self.rows is None and self.cols is None


FULL = Shard()
ABSENT = None  # a routed expert another rank owns (expert parallelism): not loaded here


_LAYER = re.compile(r"^layers\.\d+\.(.+)$")
_EXPERT = re.compile(r"^ffn\.experts\.(\d+)\.(w1|w2|w3)$")
_SHARED = re.compile(r"^ffn\.shared_experts\.(w1|w2|w3)$")


def _span(index: int, size: int) -> tuple[int, int]:
    return index * size, (index + 1) * size


@dataclass(frozen=True)
class ShardingPlan:
    config: ModelConfig
    parallel: ParallelConfig
    block: int  # shard boundaries are multiples of this (the weight block and the QAT block)
    heads_per_rank: int
    ranks_per_group: int  # > 1 when o_groups < N: each wo_a group spans this many ranks
    groups_per_rank: int  # >= 1 when o_groups >= N
    moe_tp: int  # ways the expert intermediate dim is split
    vocab_per_rank: int

    @property
    def world_size(self) -> int:
        return self.parallel.tensor_parallel_size

    @property
    def expert_parallel(self) -> bool:
        return self.parallel.enable_expert_parallel

    @property
    def moe_replicas(self) -> int:
        """Ranks holding the same expert shard; they split the tokens between them."""
        return self.world_size // self.moe_tp

    @property
    def experts_per_rank(self) -> int:
        return self.config.n_routed_experts // self.world_size if self.expert_parallel else self.config.n_routed_experts

    # ------------------------------------------------------------------ construction
    @classmethod
    def build(cls, config: ModelConfig, parallel: ParallelConfig) -> ShardingPlan:
        """Validate that `config` splits over `parallel` on whole blocks; raise ShardingError if not."""
        n, c = parallel.tensor_parallel_size, config
        q = c.quantization
        weight_block = max(q.weight_block_size) if q is not None else 1
        block = math.lcm(weight_block, ACTIVATION_BLOCK)
        where = f"tensor_parallel_size={n}"

        def need(ok: bool, why: str) -> None:
            if not ok:
                raise ShardingError(f"{where}: {why}")

        need(c.num_attention_heads % n == 0,
             f"num_attention_heads={c.num_attention_heads} is not divisible by {n} (query heads are split whole)")
        heads = c.num_attention_heads // n
        need(heads * c.head_dim % block == 0,
             f"{heads} heads x head_dim={c.head_dim} per rank is not a multiple of the {block}-row block of wq_b")
        g = c.o_groups
        need(g % n == 0 or n % g == 0,
             f"o_groups={g}: one of o_groups and {n} must divide the other (wo_a groups are split whole, "
             f"or each group over tensor_parallel_size/o_groups ranks)")
        if n <= g:
            groups, ranks_per_group = g // n, 1
            need(groups * c.o_lora_rank % block == 0,
                 f"{groups} wo_a groups x o_lora_rank={c.o_lora_rank} per rank is not a multiple of {block}")
        else:
            groups, ranks_per_group = 0, n // g
            need(c.o_lora_rank % block == 0, f"o_lora_rank={c.o_lora_rank} is not a multiple of {block}")
            need(c.hidden_size % ranks_per_group == 0 and (c.hidden_size // ranks_per_group) % block == 0,
                 f"hidden_size={c.hidden_size} over the {ranks_per_group} ranks sharing a wo_a group "
                 f"(o_groups={g}) is not a multiple of {block} rows of wo_b")
        need(c.vocab_size % n == 0, f"vocab_size={c.vocab_size} is not divisible by {n} (vocab-parallel head)")
        if parallel.enable_expert_parallel:
            need(c.n_routed_experts % n == 0,
                 f"n_routed_experts={c.n_routed_experts} is not divisible by {n} (expert parallelism)")
        inter = c.moe_intermediate_size
        moe_tp = max(d for d in range(1, n + 1) if n % d == 0 and inter % (d * block) == 0) if inter % block == 0 else 1
        return cls(c, parallel, block, heads, ranks_per_group, groups, moe_tp, c.vocab_size // n)

    def rank_config(self) -> ModelConfig:
        """The config as one rank's attention sees it: its own heads (and own whole groups)."""
        groups = self.groups_per_rank if self.ranks_per_group == 1 else 1
        return dataclasses.replace(self.config, num_attention_heads=self.heads_per_rank, o_groups=groups)

    # ------------------------------------------------------------------ per-rank facts
    def head_range(self, rank: int) -> tuple[int, int]:
        return _span(rank, self.heads_per_rank)

    def attention_group(self, rank: int) -> int:
        """The wo_a group a rank works on when groups span several ranks (ranks_per_group > 1)."""
        return rank // self.ranks_per_group

    def expert_range(self, rank: int) -> tuple[int, int]:
        """Global ids [first, last) of the routed experts this rank owns (all without EP)."""
        return _span(rank, self.experts_per_rank) if self.expert_parallel else (0, self.config.n_routed_experts)

    def moe_shard(self, rank: int) -> tuple[int, int]:
        """(intermediate shard index in [0, moe_tp), token replica index in [0, moe_replicas))."""
        return rank % self.moe_tp, rank // self.moe_tp

    def vocab_range(self, rank: int) -> tuple[int, int]:
        return _span(rank, self.vocab_per_rank)

    def shard(self, name: str, rank: int) -> Shard | None:
        """What `rank` holds of weight `name` (a linear prefix or a tensor name): FULL, a Shard, or
        ABSENT (None) for a routed expert another rank owns."""
        c = self.config
        if name in ("embed.weight", "head.weight"):
            return Shard(rows=self.vocab_range(rank))
        m = _LAYER.match(name)
        if m is None:
            return FULL
        leaf = m.group(1)
        d, r_dim = c.head_dim, c.o_lora_rank
        if leaf == "attn.wq_b":
            return Shard(rows=_span(rank, self.heads_per_rank * d))
        if leaf == "attn.attn_sink":
            return Shard(rows=self.head_range(rank))
        if leaf in ("attn.wo_a", "attn.wo_b"):
            if self.ranks_per_group == 1:
                span = _span(rank, self.groups_per_rank * r_dim)
                return Shard(rows=span) if leaf == "attn.wo_a" else Shard(cols=span)
            group, member = divmod(rank, self.ranks_per_group)
            if leaf == "attn.wo_a":
                return Shard(rows=_span(group, r_dim), cols=_span(member, self.heads_per_rank * d))
            return Shard(rows=_span(member, c.hidden_size // self.ranks_per_group), cols=_span(group, r_dim))
        expert = _EXPERT.match(leaf)
        shared = _SHARED.match(leaf)
        if expert is None and shared is None:
            return FULL
        if expert is not None and self.expert_parallel:
            first, last = self.expert_range(rank)
            return FULL if first <= int(expert.group(1)) < last else ABSENT
        proj = expert.group(2) if expert is not None else shared.group(1)  # type: ignore[union-attr]
        span = _span(self.moe_shard(rank)[0], c.moe_intermediate_size // self.moe_tp)
        return Shard(cols=span) if proj == "w2" else Shard(rows=span)

    def describe(self) -> str:
        """One line for the start-up log."""
        c, n = self.config, self.world_size
        if self.ranks_per_group == 1:
            out = f"{self.groups_per_rank} wo_a group(s)/rank"
        else:
            out = f"each wo_a group over {self.ranks_per_group} ranks"
        moe = (f"EP {self.experts_per_rank} experts/rank" if self.expert_parallel
               else f"experts split {self.moe_tp}-way")
        if self.expert_parallel:
            moe += f", shared expert split {self.moe_tp}-way"
        if self.moe_replicas > 1:
            moe += f" ({self.moe_replicas} ranks per intermediate shard split the tokens)"
        return (f"TP={n}: {self.heads_per_rank}/{c.num_attention_heads} heads/rank, {out}, {moe}, "
                f"vocab {self.vocab_per_rank}/rank")
