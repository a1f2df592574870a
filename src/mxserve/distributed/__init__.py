"""Tensor and expert parallelism through torch.distributed (docs/parallelism.md).

Layers, bottom to top: `plan` (which slice of each weight a rank holds; ShardingError when a
config cannot split on whole 128-blocks), `shards` (cutting those slices out of the memory-mapped
checkpoint), `groups` (process groups; all_reduce / all_gather only), `rank_kernels` (a rank's
kernel choices over its own shards), `tp_model` (one rank's forward), `worker` (a rank process),
`executor` (the driver's side, used by the engine).
"""

from mxserve.distributed.executor import (
    DistributedExecutor,
    RemoteCacheState,
    RemoteModel,
    WorkerError,
    log_rank_kernel_choices,
)
from mxserve.distributed.plan import ParallelConfig, Shard, ShardingError, ShardingPlan
from mxserve.distributed.worker import RankReport, WorkerSpec

__all__ = [
    "DistributedExecutor",
    "ParallelConfig",
    "RankReport",
    "RemoteCacheState",
    "RemoteModel",
    "Shard",
    "ShardingError",
    "ShardingPlan",
    "WorkerError",
    "WorkerSpec",
    "log_rank_kernel_choices",
]
