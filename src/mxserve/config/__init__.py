"""Frozen, validated configuration: the model's config.json view and (later) the engine's."""

from mxserve.config.model_config import (
    AttentionKind,
    CheckpointLayout,
    ConfigError,
    DSparkConfig,
    ModelConfig,
    QuantizationConfig,
    YarnScaling,
)

__all__ = [
    "AttentionKind",
    "CheckpointLayout",
    "ConfigError",
    "DSparkConfig",
    "ModelConfig",
    "QuantizationConfig",
    "YarnScaling",
]
