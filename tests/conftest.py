"""Suite-wide settings.

One intra-op thread: the models under test are tiny, so their ops are dispatch-bound, and
OpenMP's spinning threads turn any contention for the 2 CI cores into 10-20x slowdowns (measured:
the 0731 layout test takes 7.7 s with one thread and 149 s with two on a loaded machine).
Results do not depend on it: the reference model is bit-identical across thread counts by
construction (fp64 accumulation). Set before torch is imported so CLI subprocesses inherit it.
"""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import torch

torch.set_num_threads(1)

# Without a GPU, Triton kernels run under the interpreter. `@triton.jit` reads TRITON_INTERPRET when
# a kernel module is imported, and any test that imports `mxserve.kernels` imports them, so this
# must be set before collection reaches any test module (a per-folder conftest is too late).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


# Session-wide tiny checkpoints (written once per process, never modified: tests copy before editing).
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from tests.checkpoint.fixtures import shared_checkpoint  # noqa: E402


@pytest.fixture(scope="session")
def tiny_all() -> Path:
    return shared_checkpoint("tiny-all", 1)


@pytest.fixture(scope="session")
def tiny_0731() -> Path:
    return shared_checkpoint("tiny-0731", 2)
