"""Counting the launches of one decode step on the CPU: aten compute ops plus Triton launches.

On the H200 every aten op that computes (not a view, not an allocation) is one kernel launch, and
every Triton launcher call is one; in a CUDA-graph step each costs ~2-5 us whatever it does. The
CPU cannot time that, but it can count it: `LaunchCounter` is a `TorchDispatchMode` that counts
the aten ops reaching the dispatcher, and it wraps the Triton interpreter's `run` so a kernel
launch counts once under its name (the interpreter's own torch work inside it is not counted).

`decode_step_launches` builds a model with every Triton kernel (`build_engine_model`, as the
engine and `profile_decode.py` do), runs one warm-up decode step, then counts one step of
`decode_forward`, with the cache slot value checks off as they are on CUDA (they are host
read-backs the GPU path skips) and the CUDA paths of the slot maps and the shared-expert SwiGLU
switched on. The choosers see an sm_90 platform (`h200_platform`), so the linears, the MoE and its
shared expert take their Triton kernels as on the H200. What the count cannot see: kernels that
torch ops launch internally, and launch choices that depend on the GPU (e.g. the FP8 linear's
W8A8 path needs FP8 tensor cores: the CPU takes the weight-only one).

    TRITON_INTERPRET=1 PYTHONPATH=src:. python -m tests.model.launch_count default tiny-flash [--dry] [--sites]
"""

from __future__ import annotations

import contextlib
import sys
from collections import Counter
from collections.abc import Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from mxserve.kernels.chooser import ALL_TRITON

# aten ops that launch no kernel: allocations, metadata, aliasing (views are found by `is_view`)
_NO_KERNEL = frozenset({
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "detach", "alias", "lift_fresh",
    "_to_copy_no_op", "set_", "resize_", "_reshape_alias", "_unsafe_view", "view", "as_strided",
})


def launches_kernel(func) -> bool:
    """Whether this aten op is a device kernel on CUDA (views and allocations are not)."""
    return func.overloadpacket.__name__ not in _NO_KERNEL and not func.is_view


class LaunchCounter(TorchDispatchMode):
    """`aten` counts aten compute ops by name, `triton` Triton launches by kernel name."""

    def __init__(self) -> None:
        super().__init__()
        self.aten: Counter[str] = Counter()
        self.triton: Counter[str] = Counter()
        self._inside_triton = 0
        self.sites: Counter[str] | None = None  # set to a Counter to attribute aten ops to source lines

    def _site(self) -> str:
        import traceback

        frames = [f for f in traceback.extract_stack() if "/mxserve/" in f.filename]
        if not frames:
            return "?"
        f = frames[-1]
        return f"{f.filename.split('/mxserve/')[-1]}:{f.lineno} {f.line}"

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not self._inside_triton and launches_kernel(func):
            self.aten[func.overloadpacket.__name__] += 1
            if self.sites is not None:
                self.sites[f"{func.overloadpacket.__name__:12s} {self._site()}"] += 1
        return func(*args, **(kwargs or {}))

    @property
    def total(self) -> int:
        return sum(self.aten.values()) + sum(self.triton.values())

    @contextlib.contextmanager
    def counting_triton(self, *, execute: bool = True) -> Iterator[None]:
        """Count each outermost Triton launch once (autotuner and interpreter calls nest).
        `execute=False` counts without running the kernels (their outputs stay uninitialised): the
        decode step's launches do not depend on values (it is CUDA-graph capturable: no host
        branch reads a device value), and the interpreter is most of a counted step's time."""
        from triton.runtime.autotuner import Autotuner
        from triton.runtime.interpreter import InterpretedFunction

        originals = {cls: cls.run for cls in (InterpretedFunction, Autotuner)}
        counter = self

        def wrap(run):
            def counted(fn_self, *args, **kwargs):
                if counter._inside_triton == 0 and not kwargs.get("warmup", False):
                    counter.triton[getattr(fn_self, "__name__", None) or type(fn_self).__name__] += 1
                if not execute:
                    return None
                counter._inside_triton += 1
                try:
                    return run(fn_self, *args, **kwargs)
                finally:
                    counter._inside_triton -= 1
            return counted

        for cls, run in originals.items():
            cls.run = wrap(run)
        try:
            yield
        finally:
            for cls, run in originals.items():
                cls.run = run

    def report(self) -> str:
        rows = [*(("aten", k, v) for k, v in self.aten.items()), *(("triton", k, v) for k, v in self.triton.items())]
        lines = [f"{n:5d}  {kind:6s} {name}" for kind, name, n in sorted(rows, key=lambda r: -r[2])]
        return "\n".join([*lines, f"{self.total:5d}  total ({sum(self.aten.values())} aten, "
                                   f"{sum(self.triton.values())} triton)"])


# The CPU-side switches that make the interpreter take the paths CUDA takes by default
GPU_PATHS_ENV = {"MXSERVE_TRITON_PAGED_SLOTS": "1", "MXSERVE_TRITON_SHARED_SWIGLU": "1"}
OFF_SWITCHES = ("MXSERVE_TORCH_PAGED_SLOTS", "MXSERVE_TORCH_SHARED_SWIGLU")


@contextlib.contextmanager
def gpu_like_checks() -> Iterator[None]:
    """Cache slot value checks off, as on CUDA (they are host read-backs there only on request), and
    the Triton slot maps and shared-expert SwiGLU that CUDA runs (off switches cleared)."""
    import os

    import mxserve.kernels.cache._bytes as bytes_mod
    import mxserve.kernels.cache.page_layout as layout_mod

    saved = layout_mod.value_checks_enabled, bytes_mod.value_checks_enabled
    saved_env = {k: os.environ.get(k) for k in (*GPU_PATHS_ENV, *OFF_SWITCHES)}
    layout_mod.value_checks_enabled = bytes_mod.value_checks_enabled = lambda slots: False
    os.environ.update(GPU_PATHS_ENV)
    for k in OFF_SWITCHES:
        os.environ.pop(k, None)
    try:
        yield
    finally:
        layout_mod.value_checks_enabled, bytes_mod.value_checks_enabled = saved
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def h200_platform() -> Iterator[None]:
    """The kernel choosers see an sm_90 CUDA platform, so they pick what the H200 runs (the
    launchers then run under the interpreter on the CPU tensors)."""
    import mxserve.model.kernel_selection as selection
    from mxserve.kernels.chooser import Platform

    saved = Platform.probe, selection._shared_backend

    def shared_backend(model, moe_backends, linear_forced):  # its one device test, answered for CUDA
        backend, why = saved[1](model, moe_backends, linear_forced)
        return ("triton", why) if why.startswith("shared-expert weights are on cpu") else (backend, why)

    Platform.probe = classmethod(lambda cls, device: cls("cuda", (9, 0), False, True))
    selection._shared_backend = shared_backend
    try:
        yield
    finally:
        Platform.probe, selection._shared_backend = saved


def _model_and_weights(which: str):
    from mxserve.bench.layers.build import bench_config, random_weights
    from mxserve.config import AttentionKind
    from mxserve.testing.tiny_configs import get_config

    if which == "default":
        from mxserve import default_model_path
        from mxserve.model.checkpoint import CheckpointReader

        reader = CheckpointReader(default_model_path())
        return reader.config, reader.load(progress=False)
    if which == "tiny-flash":  # the Flash profile's shape of step (a CSA and an HCA layer + head), tiny-all sizes
        config = bench_config(get_config("tiny-all"), (AttentionKind.CSA, AttentionKind.HCA))
        return config, random_weights(config, torch.device("cpu"), seed=0, num_threads=1)
    raise ValueError(f"unknown model {which!r}: default or tiny-flash")


def decode_step_launches(which: str, *, batch: int = 1, context: int = 40, execute: bool = True,
                         sites: bool = False) -> LaunchCounter:
    """The launches of one decode step (`decode_forward`, `batch` rows at position `context`);
    `execute=False`: the Triton kernels are counted, not run (see `counting_triton`); `sites`: also
    attribute the aten ops to their source lines (`LaunchCounter.sites`)."""
    from mxserve.bench.layers.cache import build_cache_state
    from mxserve.model.decode_batch import DecodeGeometry, build_decode_batch
    from mxserve.model.kernel_selection import build_engine_model

    device = torch.device("cpu")
    config, weights = _model_and_weights(which)
    max_len = context + 2
    with h200_platform():
        model, _ = build_engine_model(config, weights, device=device, numerics="faithful", kv_cache_dtype=None,
                                      overrides=ALL_TRITON, max_model_len=max_len)
    state = build_cache_state(config, model.policy, num_seqs=batch, context_len=context, new_tokens=2,
                              block_size=16, device=device)
    for caches in state.layers:  # the fixed-shape (CUDA) forms of the cache reads and writes
        for cache in (caches.window, caches.compressed, caches.indexer):
            if cache is not None and hasattr(cache, "sync_free"):
                cache.sync_free = True
    geometry = DecodeGeometry.for_positions(config, state.block_size, max_len)
    seqs = list(range(batch))
    counter, warm_up = LaunchCounter(), LaunchCounter()
    if sites:
        counter.sites = Counter()
    with torch.no_grad(), gpu_like_checks():
        for step, c in enumerate((warm_up, counter)):  # the warm-up: autotuners, expert stacking
            decode = build_decode_batch([3] * batch, seqs, [context + step] * batch, state, geometry, num_rows=batch)
            with c.counting_triton(execute=execute), c:
                model.decode_forward(decode, state, geometry)
    return counter


if __name__ == "__main__":
    names = [a for a in sys.argv[1:] if not a.startswith("--")] or ["tiny-flash", "default"]
    for name in names:
        print(f"[{name}] one decode step, batch 1")
        c = decode_step_launches(name, execute="--dry" not in sys.argv, sites="--sites" in sys.argv)
        print(c.report())
        for site, n in sorted((c.sites or {}).items(), key=lambda kv: kv[0].split()[1]):
            print(f"{n:5d}  {site}")
