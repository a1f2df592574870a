"""Shared helpers for the verify tests (they run `mxserve verify` on the packaged default model)."""

from __future__ import annotations

import pytest

from mxserve.verify.session import VerifyOptions


@pytest.fixture
def fast_options() -> VerifyOptions:
    """The default (quick) profile on the CPU, stopping at the first failing stage."""
    return VerifyOptions(device="cpu", fail_fast=True, validate=True)
