"""Stage `env`: devices, versions, capabilities and the kernels the engine will use.

FAILS when the requested device is not available, or when the host is big-endian (every cache
and weight format is little-endian). Everything else is evidence for the report.
"""

from __future__ import annotations

import os
import platform
import sys
from importlib import metadata

import torch

from mxserve.config.engine_config import KERNEL_BACKENDS
from mxserve.verify.report import StageResult
from mxserve.verify.session import VerifySession


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def selected_backends(device: str) -> dict[str, str]:
    """Backend each op will run with (before the engine loads): the references, except what
    MXSERVE_KERNEL_OVERRIDES forces; linear runs as 'reference-resident' (decoded once) for small
    CPU models; forced Triton linear/moe are chosen per layer and attention once at load (the
    kernels stage lists what the engine actually chose)."""
    from mxserve.kernels.chooser import parse_overrides_env

    forced = parse_overrides_env()
    selected = {op: backends[0] if op != "linear" else "reference / reference-resident"
                for op, backends in KERNEL_BACKENDS.items()}
    if forced.get("linear") == "triton":
        selected["linear"] = "triton per layer where it fits (forced), reference elsewhere"
    if forced.get("moe", "reference") != "reference":  # chosen per layer at load (mxserve.model.kernel_selection)
        selected["moe"] = f"{forced['moe']} per layer where it fits (forced), reference elsewhere"
    if forced.get("attention", "reference") != "reference":
        selected["attention"] = "triton where it fits (forced; CUDA, or the interpreter under TRITON_INTERPRET=1)"
    if forced.get("hc", "reference") != "reference":
        selected["hc"] = "triton where it fits (forced; CUDA, or the interpreter under TRITON_INTERPRET=1)"
    return selected


def run_env(session: VerifySession) -> StageResult:
    device = session.options.device
    failures: list[str] = []
    cuda = torch.cuda.is_available()
    if device.startswith("cuda") and not cuda:
        failures.append(f"--device {device} asked for, but torch sees no CUDA device")
    if sys.byteorder != "little":
        failures.append(f"host byte order is {sys.byteorder}; checkpoint and cache formats are little-endian")
    evidence = [
        f"python {platform.python_version()}, torch {torch.__version__}, triton {_version('triton')}, "
        f"transformers {_version('transformers')}, mxserve {_version('mxserve')}",
        f"CPU: {os.cpu_count()} cores, torch threads {torch.get_num_threads()}; CUDA available: {cuda}",
    ]
    metrics: dict = {"torch": torch.__version__, "cuda_available": cuda, "cpu_count": os.cpu_count(),
                     "kernels": selected_backends(device)}
    if cuda:
        for i in range(torch.cuda.device_count()):
            name, cap = torch.cuda.get_device_name(i), torch.cuda.get_device_capability(i)
            evidence.append(f"cuda:{i} {name}, capability {cap[0]}.{cap[1]}")
            metrics.setdefault("gpus", []).append({"name": name, "capability": list(cap)})
    evidence.append("kernels: " + ", ".join(f"{op}={b}" for op, b in metrics["kernels"].items()))
    return StageResult.judged("env", failures, evidence, metrics)
