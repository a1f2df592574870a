"""Process groups and the three collectives tensor parallelism uses, all through torch.distributed.

`init_groups` joins the world group (gloo on the CPU, NCCL on GPUs) either from an explicit
`tcp://host:port` init method (workers spawned by the engine) or from torchrun's environment
(`env://`: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), then creates a gloo group for control
messages (Python objects travel over gloo even when the tensors use NCCL) and, when wo_a groups
span several ranks, one subgroup per wo_a group. No custom collective exists anywhere: partial
sums go through `all_reduce`, vocab shards through `all_gather`.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

import torch
import torch.distributed as dist

from mxserve.distributed.plan import ShardingPlan

# How long a collective may wait for a peer before failing (a crashed rank must not hang the rest
# forever; a slow first step on a large model must not trip it either).
COLLECTIVE_TIMEOUT = datetime.timedelta(minutes=10)


@dataclass
class ParallelGroups:
    rank: int
    world_size: int
    control: dist.ProcessGroup  # gloo: step messages from rank 0 to every rank
    attention_group: dist.ProcessGroup | None  # the ranks sharing this rank's wo_a group (N > o_groups)

    def all_reduce(self, tensor: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
        """In-place sum over `group` (default: every rank); returns `tensor`."""
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=group)
        return tensor

    def all_gather_last_dim(self, tensor: torch.Tensor) -> torch.Tensor:
        """Concatenate every rank's `tensor` along the last dim, in rank order."""
        parts = [torch.empty_like(tensor) for _ in range(self.world_size)]
        dist.all_gather(parts, tensor.contiguous())
        return torch.cat(parts, dim=-1)

    def broadcast_object(self, obj: object | None) -> object:
        """Rank 0's `obj` on every rank (over the gloo control group)."""
        box = [obj]
        dist.broadcast_object_list(box, src=0, group=self.control)
        return box[0]

    def gather_objects(self, obj: object) -> list[object]:
        """Every rank's `obj`, in rank order, on every rank."""
        out: list[object] = [None] * self.world_size
        dist.all_gather_object(out, obj, group=self.control)
        return out


def init_world(*, rank: int | None, world_size: int | None, init_method: str | None, backend: str) -> ParallelGroups:
    """Join the world group (`init_method=None`: torchrun's env) and create the gloo control group."""
    if init_method is None:
        dist.init_process_group(backend, timeout=COLLECTIVE_TIMEOUT)
    else:
        dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world_size,
                                timeout=COLLECTIVE_TIMEOUT)
    control = dist.new_group(backend="gloo", timeout=COLLECTIVE_TIMEOUT) if backend != "gloo" else dist.group.WORLD
    return ParallelGroups(dist.get_rank(), dist.get_world_size(), control, None)


def add_attention_groups(groups: ParallelGroups, plan: ShardingPlan, backend: str) -> None:
    """One subgroup per wo_a group when groups span several ranks (plan.ranks_per_group > 1)."""
    if plan.world_size != groups.world_size:
        raise RuntimeError(f"the process group has {groups.world_size} ranks, tensor_parallel_size is {plan.world_size}")
    if plan.ranks_per_group == 1:
        return
    # new_group is collective: every rank creates every subgroup, in the same order.
    for g in range(plan.world_size // plan.ranks_per_group):
        members = list(range(g * plan.ranks_per_group, (g + 1) * plan.ranks_per_group))
        group = dist.new_group(members, backend=backend, timeout=COLLECTIVE_TIMEOUT)
        if groups.rank in members:
            groups.attention_group = group


def destroy_groups() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
