"""EngineConfig: everything `LLM(...)`, `mxserve run` and `mxserve serve` let a user choose.

Frozen and validated once; each component receives only the part it needs (the scheduler gets a
SchedulerConfig built from it). Derived values (pages that fit, per-token bytes) are computed
by the engine at start-up and never written back here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from mxserve.config.speculative_config import SpeculativeConfig

NUMERICS = ("faithful", "exact")
KV_CACHE_DTYPES = ("fp8_ds_mla", "bf16", "fp32")
DEVICES = ("auto", "cpu", "cuda")
# op → backends a user may force. "reference-resident" = the reference linear on weights decoded
# once at load (bit-identical, 8 B/parameter); chosen automatically for small models on the CPU.
KERNEL_BACKENDS: dict[str, tuple[str, ...]] = {
    # "triton": linear_fp8_block's Triton kernel on FP8_BLOCK layers (CUDA), chosen per layer by
    # mxserve.kernels.chooser; off unless forced until it passes the issue-9 gates
    "linear": ("reference", "reference-resident", "triton"),
    # MoE block per layer (mxserve.kernels.moe.chooser): router + grouped MXFP4 experts widened to
    # bf16 ("triton": split decode launches where they apply; "triton-fused": the fused kernel at
    # every size, the same bits), FP8 activations on FP8 tensor cores ("triton-w4a8", faithful,
    # sm_89+), or experts repacked MXFP4 -> FP8 block at first use ("triton-repack"); off unless
    # forced (issue 10)
    "moe": ("reference", "triton", "triton-fused", "triton-w4a8", "triton-repack"),
    # every fused attention op at once (mxserve.kernels.attention_chooser: q RMS + RoPE, window-KV
    # insert, compressor emit, indexer scores, top-k, sparse attention); off unless forced (issue 11)
    "attention": ("reference", "triton"),
    # the hyper-connections hc_pre / hc_post / hc_head at once (mxserve.kernels.hyper_connection:
    # fp64 mixes + Sinkhorn in 3 launches per hc_pre instead of ~140 torch ops); off unless forced
    "hc": ("reference", "triton"),
}


@dataclass(frozen=True)
class EngineConfig:
    model: str | None = None  # checkpoint directory; None = the packaged default model
    device: str = "auto"  # "auto" (cuda when available), "cpu", "cuda" or "cuda:N"
    numerics: str = "faithful"  # "faithful" (release QAT simulation) or "exact" (fp32 oracle mode)
    kv_cache_dtype: str | None = None  # None = the numeric mode's default (fp8_ds_mla / fp32)
    max_model_len: int = 4096  # tokens (prompt + output) per request
    max_num_seqs: int = 64  # requests running at once
    max_num_batched_tokens: int = 2048  # token budget per step (decodes + prefill chunks)
    long_prefill_token_threshold: int = 1024  # most prompt tokens one request takes per step
    block_size: int = 64  # cache entries per page, every pool
    kv_cache_memory: int | None = None  # bytes for all caches; None = sized from the device (see docs)
    gpu_memory_utilization: float = 0.9  # fraction of free GPU memory the caches may take when sizing
    kernel_overrides: dict[str, str] = field(default_factory=dict)  # op name → backend ("reference", ...)
    # True: never try CUDA-graph decode. False: one-token decode steps replay a graph per batch bucket
    # when the selected kernels never sync with the host (the all-Triton set on a GPU; the reference
    # kernels sync, so those steps run eager and the log says why: engine/cuda_graphs.py)
    enforce_eager: bool = False
    seed: int = 0  # seeds requests that bring none (per-request seeds are drawn from it)
    cpu_threads: int | None = None  # torch intra-op threads on the CPU; None = auto (1 for small models)
    tensor_parallel_size: int = 1  # ranks (one process per device, CPU ranks on the CPU); docs/parallelism.md
    enable_expert_parallel: bool = False  # routed experts partitioned whole over the ranks (else split like dense)
    # DSpark speculative decoding (docs/speculative.md): a SpeculativeConfig, its dict or JSON
    # string (`{"method": "dspark", "num_speculative_tokens": 7}`); None = off. Parsed once below.
    speculative_config: SpeculativeConfig | dict | str | None = None

    def __post_init__(self) -> None:
        def bad(name: str, why: str) -> ValueError:
            return ValueError(f"EngineConfig.{name}={getattr(self, name)!r}: {why}")

        for name in ("max_model_len", "max_num_seqs", "max_num_batched_tokens", "long_prefill_token_threshold",
                     "block_size", "tensor_parallel_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise bad(name, "must be a positive integer")
        if not isinstance(self.enforce_eager, bool):
            raise bad("enforce_eager", "must be True or False")
        if not isinstance(self.enable_expert_parallel, bool):
            raise bad("enable_expert_parallel", "must be True or False")
        if self.numerics not in NUMERICS:
            raise bad("numerics", f"must be one of {NUMERICS}")
        if self.kv_cache_dtype is not None and self.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise bad("kv_cache_dtype", f"must be one of {KV_CACHE_DTYPES}")
        if not (self.device in DEVICES or self.device.startswith("cuda:")):
            raise bad("device", f"must be one of {DEVICES} or 'cuda:N'")
        if self.kv_cache_memory is not None and (
            not isinstance(self.kv_cache_memory, int) or isinstance(self.kv_cache_memory, bool) or self.kv_cache_memory <= 0
        ):
            raise bad("kv_cache_memory", "must be a positive number of bytes")
        if not (isinstance(self.gpu_memory_utilization, int | float) and 0 < self.gpu_memory_utilization <= 1
                and math.isfinite(self.gpu_memory_utilization)):
            raise bad("gpu_memory_utilization", "must lie in (0, 1]")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool):
            raise bad("seed", "must be an integer")
        if self.cpu_threads is not None and (
            not isinstance(self.cpu_threads, int) or isinstance(self.cpu_threads, bool) or self.cpu_threads <= 0
        ):
            raise bad("cpu_threads", "must be a positive integer (or None for auto)")
        object.__setattr__(self, "speculative_config", SpeculativeConfig.parse(self.speculative_config))
        for op, backend in self.kernel_overrides.items():
            if op not in KERNEL_BACKENDS:
                raise ValueError(f"EngineConfig.kernel_overrides: unknown op {op!r}; known ops: {sorted(KERNEL_BACKENDS)}")
            if backend not in KERNEL_BACKENDS[op]:
                raise ValueError(
                    f"EngineConfig.kernel_overrides[{op!r}]={backend!r}: unknown backend; available: "
                    f"{list(KERNEL_BACKENDS[op])}"
                )

    def replace(self, **changes: Any) -> EngineConfig:
        from dataclasses import replace

        return replace(self, **changes)
