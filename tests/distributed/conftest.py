"""Rank processes (gloo on the CPU), spawned once per world size and rebuilt per case, and the
single-process reference models they are compared with (exact numerics, resident weights)."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

from mxserve import default_model_path
from mxserve.distributed import DistributedExecutor, ParallelConfig, WorkerSpec
from mxserve.model.checkpoint import CheckpointReader
from mxserve.model.deepseek_v4 import DeepseekV4Model


def worker_spec(model_dir: Path, n: int, ep: bool, numerics: str = "exact",
                kernel_overrides: dict[str, str] | None = None, max_model_len: int | None = None) -> WorkerSpec:
    """Resident decoded weights unless a linear backend is forced (as the engine decides)."""
    overrides = tuple(sorted((kernel_overrides or {}).items()))
    return WorkerSpec(str(model_dir), ParallelConfig(n, ep), numerics, None,
                      resident_weights="linear" not in dict(overrides), device="cpu", cpu_threads=1,
                      kernel_overrides=overrides, max_model_len=max_model_len)


@functools.cache
def reference_model(model_dir: Path, numerics: str = "exact") -> DeepseekV4Model:
    reader = CheckpointReader(model_dir)
    return DeepseekV4Model(reader.config, reader.load(progress=False, verify_manifest=False), numerics=numerics,
                           resident_weights=True)


class Ranks:
    """One executor per world size; `use(spec)` rebuilds the ranks only when the spec changes."""

    def __init__(self, n: int) -> None:
        self.executor = DistributedExecutor.spawn(worker_spec(default_model_path(), n, False))
        self.spec = worker_spec(default_model_path(), n, False)

    def use(self, spec: WorkerSpec) -> DistributedExecutor:
        if spec != self.spec:
            self.executor.rebuild(spec)
            self.spec = spec
        return self.executor


@pytest.fixture(scope="session")
def ranks2() -> Iterator[Ranks]:
    ranks = Ranks(2)
    yield ranks
    ranks.executor.close()


@pytest.fixture(scope="session")
def ranks4() -> Iterator[Ranks]:
    ranks = Ranks(4)
    yield ranks
    ranks.executor.close()
