"""Session-wide tiny checkpoints (written once per process, never modified: tests copy before editing)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.checkpoint.fixtures import shared_checkpoint


@pytest.fixture(scope="session")
def tiny_all() -> Path:
    return shared_checkpoint("tiny-all", 1)


@pytest.fixture(scope="session")
def tiny_0731() -> Path:
    return shared_checkpoint("tiny-0731", 2)
