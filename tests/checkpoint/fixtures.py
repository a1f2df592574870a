"""Tiny random checkpoints written once per test process and shared by tests/checkpoint and tests/cli.

Tests never modify them in place (they copy or rewrite first).
"""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from pathlib import Path

from mxserve.testing import random_checkpoint


@functools.cache
def shared_checkpoint(name: str, seed: int) -> Path:
    root = Path(tempfile.mkdtemp(prefix="mxserve-test-"))
    atexit.register(shutil.rmtree, root, True)
    return random_checkpoint(name, root / name, seed=seed, progress=False)
