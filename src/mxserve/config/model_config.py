"""The DeepSeek-V4 model configuration, as the release `config.json` spells it.

This module owns the one typed view of a checkpoint's `config.json`: the keys DeepSeek ships
(release spelling, not transformers' renamed ones), validated once, with the per-layer schedule
derived from `compress_ratios` and `num_hash_layers`. It recognises both checkpoint generations
(../shared/docs/dsv4-0731.md): the preview (one MTP block, `compress_ratios` of
`num_hidden_layers + 1` entries) and 0731 (DSpark keys present, three draft stages, the stale
`num_nextn_predict_layers` ignored).

Unknown keys are kept verbatim in `extra` so a config read and written back loses nothing.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields
from enum import StrEnum
from pathlib import Path
from typing import Any


class ConfigError(ValueError):
    """A config.json value that mxserve cannot run; the message names the key and the value."""


class AttentionKind(StrEnum):
    SLIDING = "sliding"  # 128-token window only (compress ratio 0)
    CSA = "csa"  # window + top-k of 4:1 overlapping compressed entries chosen by the indexer
    HCA = "hca"  # window + all 128:1 compressed entries


class CheckpointLayout(StrEnum):
    PREVIEW = "preview"  # DeepSeek-V4-Flash (preview): one MTP block `mtp.0`
    V0731 = "0731"  # DeepSeek-V4-Flash-0731: a 3-stage DSpark draft in `mtp.{0,1,2}`


@dataclass(frozen=True)
class YarnScaling:
    """YaRN frequency interpolation for the compressed (CSA/HCA) layers' RoPE table."""

    factor: float = 16.0
    original_max_position_embeddings: int = 65536
    beta_fast: float = 32.0
    beta_slow: float = 1.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": "yarn",
            "factor": self.factor,
            "original_max_position_embeddings": self.original_max_position_embeddings,
            "beta_fast": self.beta_fast,
            "beta_slow": self.beta_slow,
        }


@dataclass(frozen=True)
class QuantizationConfig:
    """The release's `quantization_config`: FP8 e4m3 dense weights in 128x128 UE8M0 blocks."""

    fmt: str = "e4m3"
    scale_fmt: str = "ue8m0"
    weight_block_size: tuple[int, int] = (128, 128)
    activation_scheme: str = "dynamic"
    quant_method: str = "fp8"
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.fmt != "e4m3":
            raise ConfigError(f"quantization_config.fmt={self.fmt!r}: only 'e4m3' is supported")
        if self.scale_fmt != "ue8m0":
            raise ConfigError(f"quantization_config.scale_fmt={self.scale_fmt!r}: only 'ue8m0' is supported")
        if len(self.weight_block_size) != 2 or any(b <= 0 for b in self.weight_block_size):
            raise ConfigError(f"quantization_config.weight_block_size={list(self.weight_block_size)} is not 2 positive ints")

    def to_dict(self) -> dict[str, Any]:
        return {
            "activation_scheme": self.activation_scheme,
            "fmt": self.fmt,
            "quant_method": self.quant_method,
            "scale_fmt": self.scale_fmt,
            "weight_block_size": list(self.weight_block_size),
            **self.extra,
        }


@dataclass(frozen=True)
class DSparkConfig:
    """The 0731 DSpark draft: `dspark_*` keys (dsv4-0731.md §1)."""

    block_size: int = 5  # default draft block width K
    noise_token_id: int = 128799
    target_layer_ids: tuple[int, ...] = (40, 41, 42)  # main layers whose outputs feed the draft
    markov_rank: int = 256
    num_stages: int = 3  # `n_mtp_layers` lives outside config.json; 3 in the release


# Release config.json keys that map 1:1 onto ModelConfig fields (everything except the nested
# objects handled by hand below).
_SIMPLE_KEYS = (
    "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "head_dim", "qk_rope_head_dim", "q_lora_rank", "o_groups", "o_lora_rank", "sliding_window",
    "index_n_heads", "index_head_dim", "index_topk", "max_position_embeddings", "rope_theta",
    "compress_rope_theta", "n_routed_experts", "n_shared_experts", "num_experts_per_tok",
    "moe_intermediate_size", "routed_scaling_factor", "scoring_func", "topk_method", "norm_topk_prob",
    "swiglu_limit", "num_hash_layers", "hc_mult", "hc_sinkhorn_iters", "hc_eps", "rms_norm_eps",
    "bos_token_id", "eos_token_id", "tie_word_embeddings", "num_nextn_predict_layers", "expert_dtype",
    "hidden_act",
)


@dataclass(frozen=True)
class ModelConfig:
    """A validated DeepSeek-V4 config. Defaults are DeepSeek-V4-Flash's (spec §1.1)."""

    vocab_size: int = 129280
    hidden_size: int = 4096
    num_hidden_layers: int = 43
    num_attention_heads: int = 64
    num_key_value_heads: int = 1
    head_dim: int = 512
    qk_rope_head_dim: int = 64
    q_lora_rank: int = 1024
    o_groups: int = 8
    o_lora_rank: int = 1024
    sliding_window: int = 128
    index_n_heads: int = 64
    index_head_dim: int = 128
    index_topk: int = 512
    max_position_embeddings: int = 1048576
    rope_theta: float = 10000.0
    compress_rope_theta: float = 160000.0
    rope_scaling: YarnScaling | None = field(default_factory=YarnScaling)
    # One entry per layer (main layers first, then MTP/DSpark layers): 0, the CSA rate or the HCA rate.
    compress_ratios: tuple[int, ...] = (0, 0, *([4, 128] * 20), 4, 0)
    compress_rate_csa: int = 4  # the ratio that means "CSA" (overlapping windows + indexer)
    compress_rate_hca: int = 128  # the ratio that means "HCA" (no overlap, all entries)
    n_routed_experts: int = 256
    n_shared_experts: int = 1
    num_experts_per_tok: int = 6
    moe_intermediate_size: int = 2048
    routed_scaling_factor: float = 1.5
    scoring_func: str = "sqrtsoftplus"
    topk_method: str = "noaux_tc"
    norm_topk_prob: bool = True
    swiglu_limit: float = 10.0
    num_hash_layers: int = 3
    hc_mult: int = 4
    hc_sinkhorn_iters: int = 20
    hc_eps: float = 1e-6
    rms_norm_eps: float = 1e-6
    bos_token_id: int = 0
    eos_token_id: int = 1
    tie_word_embeddings: bool = False
    num_nextn_predict_layers: int = 1
    expert_dtype: str = "fp4"  # routed experts: "fp4" (MXFP4) or "fp8" (128x128 blocks)
    hidden_act: str = "silu"
    quantization: QuantizationConfig | None = field(default_factory=QuantizationConfig)
    dspark: DSparkConfig | None = None  # present only in the 0731 layout
    extra: dict[str, Any] = field(default_factory=dict)  # unknown keys, kept for round trips

    # ------------------------------------------------------------------ validation
    def __post_init__(self) -> None:
        def bad(key: str, why: str) -> ConfigError:
            return ConfigError(f"config.json: {key}={getattr(self, key)!r}: {why}")

        for key in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "head_dim",
                    "q_lora_rank", "o_groups", "o_lora_rank", "sliding_window", "n_routed_experts",
                    "num_experts_per_tok", "moe_intermediate_size", "hc_mult", "hc_sinkhorn_iters"):
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise bad(key, "must be a positive integer")
        if self.num_key_value_heads != 1:
            raise bad("num_key_value_heads", "DeepSeek-V4 has exactly one shared KV head")
        if self.qk_rope_head_dim <= 0 or self.qk_rope_head_dim % 2 or self.qk_rope_head_dim >= self.head_dim:
            raise bad("qk_rope_head_dim", f"must be even, positive and below head_dim={self.head_dim}")
        if self.num_attention_heads % self.o_groups:
            raise bad("o_groups", f"must divide num_attention_heads={self.num_attention_heads}")
        if self.num_experts_per_tok > self.n_routed_experts:
            raise bad("num_experts_per_tok", f"exceeds n_routed_experts={self.n_routed_experts}")
        if self.n_shared_experts not in (0, 1):
            raise bad("n_shared_experts", "DeepSeek-V4 has at most one shared expert")
        if self.scoring_func != "sqrtsoftplus":
            raise bad("scoring_func", "only 'sqrtsoftplus' is DeepSeek-V4's router")
        if self.hidden_act != "silu":
            raise bad("hidden_act", "only 'silu' (clamped SwiGLU) is supported")
        if self.expert_dtype not in ("fp4", "fp8"):
            raise bad("expert_dtype", "must be 'fp4' (MXFP4) or 'fp8'")
        if not 0 <= self.num_hash_layers <= self.num_hidden_layers:
            raise bad("num_hash_layers", f"must lie in [0, num_hidden_layers={self.num_hidden_layers}]")
        if self.compress_rate_csa <= 0 or self.compress_rate_hca <= 0 or self.compress_rate_csa == self.compress_rate_hca:
            raise ConfigError(
                f"config.json: compress_rate_csa={self.compress_rate_csa}, compress_rate_hca={self.compress_rate_hca}: "
                "must be positive and different"
            )
        allowed = {0, self.compress_rate_csa, self.compress_rate_hca}
        unknown = [(i, r) for i, r in enumerate(self.compress_ratios) if r not in allowed]
        if unknown:
            i, r = unknown[0]
            raise ConfigError(f"config.json: compress_ratios[{i}]={r} is none of {sorted(allowed)}")
        needed = self.num_hidden_layers + (self.dspark.num_stages if self.dspark else 0)
        if len(self.compress_ratios) < needed:
            raise ConfigError(
                f"config.json: compress_ratios has {len(self.compress_ratios)} entries, "
                f"needs at least {needed} ({self.num_hidden_layers} main layers"
                + (f" + {self.dspark.num_stages} DSpark stages)" if self.dspark else ")")
            )
        if self.dspark is not None:
            for layer_id in self.dspark.target_layer_ids:
                if not 0 <= layer_id < self.num_hidden_layers:
                    raise ConfigError(
                        f"config.json: dspark_target_layer_ids contains {layer_id}, outside "
                        f"[0, {self.num_hidden_layers}) main layers"
                    )
            if not 0 <= self.dspark.noise_token_id < self.vocab_size:
                raise ConfigError(f"config.json: dspark_noise_token_id={self.dspark.noise_token_id} outside the vocabulary")
            if self.dspark.block_size <= 0 or self.dspark.markov_rank <= 0:
                raise ConfigError("config.json: dspark_block_size and dspark_markov_rank must be positive")
        for i in range(self.num_hidden_layers):
            if self.attention_kind(i) is AttentionKind.CSA and self.index_topk <= 0:
                raise bad("index_topk", "CSA layers need a positive indexer top-k")

    # ------------------------------------------------------------------ derived schedule
    @property
    def layout(self) -> CheckpointLayout:
        return CheckpointLayout.V0731 if self.dspark is not None else CheckpointLayout.PREVIEW

    @property
    def nope_head_dim(self) -> int:
        return self.head_dim - self.qk_rope_head_dim

    @property
    def num_mtp_blocks(self) -> int:
        """Preview MTP blocks. 0731 carries `num_nextn_predict_layers` stale: it builds none."""
        return 0 if self.dspark is not None else self.num_nextn_predict_layers

    def kind_of_ratio(self, ratio: int) -> AttentionKind:
        if ratio == 0:
            return AttentionKind.SLIDING
        return AttentionKind.CSA if ratio == self.compress_rate_csa else AttentionKind.HCA

    def attention_kind(self, layer_id: int) -> AttentionKind:
        """Attention type of main layer `layer_id` (the first num_hidden_layers ratios)."""
        if not 0 <= layer_id < self.num_hidden_layers:
            raise IndexError(f"layer_id={layer_id} outside [0, {self.num_hidden_layers})")
        return self.kind_of_ratio(self.compress_ratios[layer_id])

    def compress_ratio(self, layer_id: int) -> int:
        return self.compress_ratios[layer_id]

    def is_hash_layer(self, layer_id: int) -> bool:
        """Hash-routed MoE (`tid2eid`) in the first `num_hash_layers` main layers only."""
        return layer_id < self.num_hash_layers

    @property
    def layer_kinds(self) -> tuple[AttentionKind, ...]:
        return tuple(self.attention_kind(i) for i in range(self.num_hidden_layers))

    # ------------------------------------------------------------------ (de)serialisation
    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> ModelConfig:
        """Build from a release-style config.json dict; raises ConfigError naming bad keys."""
        if not isinstance(raw, dict):
            raise ConfigError(f"config.json: expected a JSON object, got {type(raw).__name__}")
        data = dict(raw)
        model_type = data.pop("model_type", "deepseek_v4")
        if model_type != "deepseek_v4":
            raise ConfigError(f"config.json: model_type={model_type!r} is not 'deepseek_v4'")
        data.pop("architectures", None)
        kwargs: dict[str, Any] = {}
        field_types = {f.name: f.type for f in fields(cls)}
        for key in _SIMPLE_KEYS:
            if key in data:
                kwargs[key] = data.pop(key)
        for key in ("compress_rate_csa", "compress_rate_hca"):
            if key in data:
                kwargs[key] = data.pop(key)
        if "compress_ratios" in data:
            ratios = data.pop("compress_ratios")
            if not isinstance(ratios, list) or not all(isinstance(r, int) for r in ratios):
                raise ConfigError(f"config.json: compress_ratios={ratios!r} is not a list of integers")
            kwargs["compress_ratios"] = tuple(ratios)
        if "rope_scaling" in data:
            kwargs["rope_scaling"] = _parse_rope_scaling(data.pop("rope_scaling"))
        if "quantization_config" in data:
            q = data.pop("quantization_config")
            kwargs["quantization"] = _parse_quantization(q) if q is not None else None
        else:
            kwargs["quantization"] = None
        dspark_keys = {k: data.pop(k) for k in list(data) if k.startswith("dspark_")}
        if dspark_keys:
            kwargs["dspark"] = _parse_dspark(dspark_keys, data.pop("n_mtp_layers", 3))
        for key, value in list(kwargs.items()):
            expected = field_types.get(key)
            if expected in ("int", int) and (not isinstance(value, int) or isinstance(value, bool)):
                raise ConfigError(f"config.json: {key}={value!r} is not an integer")
            if expected in ("float", float) and (not isinstance(value, int | float) or isinstance(value, bool)):
                raise ConfigError(f"config.json: {key}={value!r} is not a number")
        kwargs["extra"] = data
        return cls(**kwargs)

    @classmethod
    def from_file(cls, path: str | Path) -> ModelConfig:
        path = Path(path)
        try:
            raw = json.loads(path.read_text())
        except FileNotFoundError:
            raise ConfigError(f"{path}: no such file") from None
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
        try:
            return cls.from_dict(raw)
        except TypeError as exc:  # e.g. a wrongly typed value reaching the dataclass
            raise ConfigError(f"{path}: {exc}") from None

    def to_dict(self) -> dict[str, Any]:
        """The release-style config.json dict (inverse of from_dict)."""
        out: dict[str, Any] = {"architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4"}
        out.update(self.extra)
        for key in _SIMPLE_KEYS:
            out[key] = getattr(self, key)
        out["compress_ratios"] = list(self.compress_ratios)
        if (self.compress_rate_csa, self.compress_rate_hca) != (4, 128):
            out["compress_rate_csa"] = self.compress_rate_csa
            out["compress_rate_hca"] = self.compress_rate_hca
        out["rope_scaling"] = self.rope_scaling.to_dict() if self.rope_scaling else None
        if self.quantization is not None:
            out["quantization_config"] = self.quantization.to_dict()
        if self.dspark is not None:
            out["dspark_block_size"] = self.dspark.block_size
            out["dspark_noise_token_id"] = self.dspark.noise_token_id
            out["dspark_target_layer_ids"] = list(self.dspark.target_layer_ids)
            out["dspark_markov_rank"] = self.dspark.markov_rank
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False) + "\n"


def _parse_rope_scaling(raw: Any) -> YarnScaling | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ConfigError(f"config.json: rope_scaling={raw!r} is not an object")
    kind = raw.get("type", raw.get("rope_type"))
    if kind != "yarn":
        raise ConfigError(f"config.json: rope_scaling.type={kind!r}: only 'yarn' is DeepSeek-V4's scaling")
    if any(k in raw for k in ("mscale", "mscale_all_dim")):
        raise ConfigError("config.json: rope_scaling carries mscale keys; DeepSeek-V4 applies no mscale")
    try:
        scaling = YarnScaling(
            factor=float(raw["factor"]),
            original_max_position_embeddings=int(raw["original_max_position_embeddings"]),
            beta_fast=float(raw.get("beta_fast", 32)),
            beta_slow=float(raw.get("beta_slow", 1)),
        )
    except KeyError as exc:
        raise ConfigError(f"config.json: rope_scaling is missing {exc.args[0]!r}") from None
    if not (scaling.factor >= 1 and math.isfinite(scaling.factor)):
        raise ConfigError(f"config.json: rope_scaling.factor={scaling.factor} must be >= 1")
    return scaling


def _parse_quantization(raw: Any) -> QuantizationConfig:
    if not isinstance(raw, dict):
        raise ConfigError(f"config.json: quantization_config={raw!r} is not an object")
    data = dict(raw)
    known = {k: data.pop(k) for k in ("fmt", "scale_fmt", "activation_scheme", "quant_method") if k in data}
    block = data.pop("weight_block_size", [128, 128])
    if not isinstance(block, list | tuple) or len(block) != 2:
        raise ConfigError(f"config.json: quantization_config.weight_block_size={block!r} is not [rows, cols]")
    return QuantizationConfig(weight_block_size=(int(block[0]), int(block[1])), extra=data, **known)


def _parse_dspark(keys: dict[str, Any], num_stages: Any) -> DSparkConfig:
    known = {"dspark_block_size", "dspark_noise_token_id", "dspark_target_layer_ids", "dspark_markov_rank"}
    unknown = sorted(set(keys) - known)
    if unknown:
        raise ConfigError(f"config.json: unknown DSpark key(s) {unknown}")
    missing = sorted(known - set(keys))
    if missing:
        raise ConfigError(f"config.json: DSpark layout is missing {missing}")
    targets = keys["dspark_target_layer_ids"]
    if not isinstance(targets, list) or not targets or not all(isinstance(t, int) for t in targets):
        raise ConfigError(f"config.json: dspark_target_layer_ids={targets!r} is not a non-empty list of integers")
    return DSparkConfig(
        block_size=int(keys["dspark_block_size"]),
        noise_token_id=int(keys["dspark_noise_token_id"]),
        target_layer_ids=tuple(targets),
        markov_rank=int(keys["dspark_markov_rank"]),
        num_stages=int(num_stages),
    )
