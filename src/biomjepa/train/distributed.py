"""torch.distributed helpers: init from torchrun's environment, DDP wrap, log all-reduce.

Launch with ``torchrun --nproc_per_node=N -m biomjepa.train CONFIG.yaml``: torchrun sets ``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``; without them the run is a
single process. The backend is NCCL on CUDA and gloo on CPU.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")  # noqa: RUF009 (immutable)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world > 1


def pick_device(name: str = "auto", local_rank: int = 0) -> torch.device:
    """``auto`` → ``cuda:LOCAL_RANK`` when available, else CPU."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda":
        return torch.device("cuda", local_rank)
    return torch.device(name)


def init_distributed(device: str = "auto") -> DistInfo:
    """Join the process group described by torchrun's env vars (no-op for a single process)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank, local = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    dev = pick_device(device, local)
    if world > 1 and not dist.is_initialized():
        if dev.type == "cuda":
            torch.cuda.set_device(dev)
        dist.init_process_group("nccl" if dev.type == "cuda" else "gloo")
    return DistInfo(rank, world, local, dev)


def wrap_ddp(model: torch.nn.Module, info: DistInfo) -> torch.nn.Module:
    """``DistributedDataParallel`` around ``model`` when ``world > 1``, else ``model``."""
    if not info.enabled:
        return model
    ids = [info.device.index] if info.device.type == "cuda" else None
    return torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)


def all_reduce_mean(values: dict[str, float], info: DistInfo) -> dict[str, float]:
    """Mean of a dict of floats over ranks (identity for one process)."""
    if not info.enabled or not values:
        return values
    keys = sorted(values)
    t = torch.tensor([float(values[k]) for k in keys], dtype=torch.float64, device=info.device)
    dist.all_reduce(t)
    return dict(zip(keys, (t / info.world).tolist()))


def all_reduce_(tensor: torch.Tensor, info: DistInfo, op: str = "sum") -> torch.Tensor:
    """In-place all-reduce (``sum`` or ``max``) when distributed."""
    if info.enabled:
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
    return tensor


def broadcast_object(obj, info: DistInfo, src: int = 0):
    """Rank ``src``'s ``obj`` (picklable) on every rank; ``obj`` itself for one process."""
    if not info.enabled:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src, device=info.device if info.device.type == "cuda" else None)
    return box[0]


def barrier(info: DistInfo) -> None:
    if info.enabled:
        dist.barrier()


def cleanup(info: DistInfo) -> None:
    if info.enabled and dist.is_initialized():
        dist.destroy_process_group()
