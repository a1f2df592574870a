"""Test and benchmark support: named configs and random release-layout checkpoints."""

from mxserve.testing.random_checkpoint import random_checkpoint, random_plain_tensor
from mxserve.testing.tiny_configs import TINY_CONFIGS, get_config

__all__ = ["TINY_CONFIGS", "get_config", "random_checkpoint", "random_plain_tensor"]
