"""Run the Triton kernels under the interpreter when there is no GPU (CI), so the same tests
exercise the real kernel code on the CPU. Must happen before the kernel module is imported."""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
