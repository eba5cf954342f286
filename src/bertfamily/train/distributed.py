"""Data-parallel helpers so that one command runs alone or under ``torchrun``.

``torchrun --nproc_per_node=K ...`` sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` and
``MASTER_ADDR/PORT``; `init_distributed` reads them and starts the process group (gloo on CPU,
nccl on CUDA). Without them it returns a single-process `DistInfo` and starts nothing. Only
rank 0 logs, writes metrics and saves checkpoints (`DistInfo.is_main`).

Two kinds of data parallelism (`PARALLEL_KINDS`): DistributedDataParallel (every rank holds the
whole model; gradients all-reduced) and FSDP2 (`shard_model`: ``fully_shard`` on each encoder
layer and on the root, so each rank holds 1/world of the parameters, gradients and optimizer
state; a layer's parameters are all-gathered just before it runs and freed after). Checkpoints
of both are the same full, unsharded state dicts (`full_state_dicts`,
`load_full_state_dicts`, on torch.distributed.checkpoint's ``state_dict`` helpers), so a run
resumes under either kind and any number of processes.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ..errors import InputError
from ..modules.encoder import Encoder
from ..runtime import MAX_PROCESSES, env_int

__all__ = [
    "DistInfo",
    "init_distributed",
    "cleanup_distributed",
    "all_gather_objects",
    "broadcast_object",
    "all_reduce_mean",
    "all_reduce_sum",
    "shard_range",
    "PARALLEL_KINDS",
    "shard_model",
    "is_sharded",
    "set_gradient_sync",
    "full_state_dicts",
    "load_full_state_dicts",
]

#: "ddp": DistributedDataParallel; "fsdp": FSDP2 ``fully_shard`` (`shard_model`).
PARALLEL_KINDS = ("ddp", "fsdp")

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DistInfo:
    """Where this process sits: ``rank`` in [0, ``world_size``), its ``device``."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")

    @property
    def is_main(self) -> bool:
        """True on rank 0."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        """True when more than one process runs."""
        return self.world_size > 1


def init_distributed(device: str = "auto") -> DistInfo:
    """Start (or join) the process group described by the torchrun environment variables.

    Args:
        device: "auto" (CUDA if available, else CPU), "cpu" or "cuda".

    Returns:
        The process's `DistInfo`; ``world_size`` 1 and no process group outside torchrun.

    Raises:
        InputError: unknown ``device``, "cuda" without a GPU, or ``WORLD_SIZE`` / ``RANK`` /
            ``LOCAL_RANK`` not a whole number in range (`runtime.env_int`).
    """
    if device not in ("auto", "cpu", "cuda"):
        raise InputError(f"device must be 'auto', 'cpu' or 'cuda', got {device!r}")
    use_cuda = torch.cuda.is_available() if device == "auto" else device == "cuda"
    if use_cuda and not torch.cuda.is_available():
        raise InputError("device='cuda' but torch.cuda.is_available() is False")
    world = env_int("WORLD_SIZE", 1, minimum=1, maximum=MAX_PROCESSES)
    rank = env_int("RANK", 0, maximum=world - 1)
    local = env_int("LOCAL_RANK", 0, maximum=MAX_PROCESSES)
    if use_cuda:
        torch.cuda.set_device(local)
        dev = torch.device("cuda", local)
    else:
        dev = torch.device("cpu")
    if world > 1 and not dist.is_initialized():
        backend = "nccl" if use_cuda else "gloo"
        dist.init_process_group(backend=backend, rank=rank, world_size=world)
        logger.info("process group: %s, rank %d of %d", backend, rank, world)
    if dist.is_initialized():
        rank, world = dist.get_rank(), dist.get_world_size()
    return DistInfo(rank=rank, world_size=world, local_rank=local, device=dev)


def cleanup_distributed() -> None:
    """Destroy the process group if one is running, once every process has reached this point
    (a barrier first: a process that tore its group down while another's last collective was
    still in flight aborted the other, 'terminate called without an active exception', seen
    once in CI under load)."""
    if dist.is_initialized():
        if dist.get_world_size() > 1:
            dist.barrier()
        dist.destroy_process_group()


def all_gather_objects(obj: Any) -> list[Any]:
    """[obj of rank 0, obj of rank 1, ...]; ``[obj]`` when not distributed."""
    if not (dist.is_initialized() and dist.get_world_size() > 1):
        return [obj]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def broadcast_object(obj: Any, src: int = 0) -> Any:
    """Rank ``src``'s ``obj`` on every rank (identity when not distributed)."""
    if not (dist.is_initialized() and dist.get_world_size() > 1):
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def all_reduce_mean(values: dict[str, float], device: torch.device) -> dict[str, float]:
    """Average each float of ``values`` over ranks (same keys on every rank)."""
    if not values or not (dist.is_initialized() and dist.get_world_size() > 1):
        return dict(values)
    keys = sorted(values)
    t = torch.tensor([float(values[k]) for k in keys], dtype=torch.float64, device=device)
    dist.all_reduce(t)
    t /= dist.get_world_size()
    return dict(zip(keys, t.tolist()))


def all_reduce_sum(values: dict[str, float], device: torch.device) -> dict[str, float]:
    """Sum each number of ``values`` over ranks (same keys on every rank), in float64 (exact
    for counts below 2**53)."""
    if not values or not (dist.is_initialized() and dist.get_world_size() > 1):
        return {k: float(v) for k, v in values.items()}
    keys = sorted(values)
    t = torch.tensor([float(values[k]) for k in keys], dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return dict(zip(keys, t.tolist()))


def shard_range(n: int, rank: int, world_size: int) -> range:
    """The contiguous slice of ``range(n)`` owned by ``rank``: equal parts of ``n // world``
    items (a remainder is dropped so every rank does the same amount of work).

    Raises:
        ValueError: rank outside [0, world_size) or ``n < world_size``.
    """
    if not 0 <= rank < world_size:
        raise InputError(f"rank {rank} outside [0, world_size={world_size})")
    if n < world_size:
        raise InputError(f"cannot shard {n} items over {world_size} processes")
    per = n // world_size
    return range(rank * per, (rank + 1) * per)


def shard_model(model: nn.Module, info: DistInfo) -> nn.Module:
    """Shard ``model`` in place with FSDP2 over all ranks of the process group: one
    ``fully_shard`` unit per unique encoder layer (each `Encoder` of the model, an ALBERT
    shared layer once), then the root (embeddings, heads, the rest). Parameters become DTensors
    sharded on dim 0; build the optimizer afterwards.

    Returns:
        ``model`` itself (now also an ``FSDPModule``: ``set_requires_gradient_sync``,
        ``unshard``).

    Raises:
        ValueError: no process group is running (FSDP needs torchrun or an initialised group).
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    if not dist.is_initialized():
        raise InputError("FSDP needs a process group: launch with torchrun")
    mesh = init_device_mesh(info.device.type, (dist.get_world_size(),))
    for module in model.modules():
        if isinstance(module, Encoder):
            for layer in module.layers:
                fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def is_sharded(model: nn.Module) -> bool:
    """Whether ``model`` was sharded by `shard_model` (FSDP2)."""
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def set_gradient_sync(wrapped: nn.Module, sync: bool):
    """A context in which backward passes reduce gradients over ranks (``sync``) or only
    accumulate them locally (gradient accumulation's first micro-batches): DDP's ``no_sync``,
    FSDP2's ``set_requires_gradient_sync``; a null context for a single process."""
    if is_sharded(wrapped):
        wrapped.set_requires_gradient_sync(sync)
        return contextlib.nullcontext()
    if sync or not isinstance(wrapped, nn.parallel.DistributedDataParallel):
        return contextlib.nullcontext()
    return wrapped.no_sync()


def full_state_dicts(
    model: nn.Module, optimizer: torch.optim.Optimizer | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The model's and optimizer's full (unsharded) state dicts on the CPU, optimizer state
    keyed by parameter name, for a plain, DDP-inner or FSDP2-sharded ``model``.

    A collective call under FSDP (every rank must call it); there only rank 0 gets the
    tensors, the other ranks empty dicts. ``optimizer`` None: ``{}`` for it.
    """
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
    model_state = get_model_state_dict(model, options=opts)
    optim_state = (
        {} if optimizer is None else get_optimizer_state_dict(model, optimizer, options=opts)
    )
    return model_state, optim_state


def load_full_state_dicts(
    model: nn.Module,
    model_state: dict[str, Any],
    optimizer: torch.optim.Optimizer | None = None,
    optim_state: dict[str, Any] | None = None,
) -> None:
    """Load what `full_state_dicts` returned into ``model`` (plain or FSDP2-sharded: each rank
    keeps its shard of the full tensors) and ``optimizer`` (when given). Every rank passes the
    full dicts.

    Raises:
        RuntimeError / KeyError / ValueError: the dicts do not fit the model or optimizer
            (torch's messages).
    """
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    opts = StateDictOptions(full_state_dict=True, strict=True)
    set_model_state_dict(model, model_state, options=opts)
    if optimizer is not None and optim_state is not None:
        set_optimizer_state_dict(model, optimizer, optim_state, options=opts)
