"""Training: the shared loop (`Trainer`, `TrainConfig`), optimizer groups, schedules, positionable
batch sources and data-parallel helpers. Nothing read back from a run directory runs code
(`RunDirectoryError` names a file that cannot be used)."""

from ..data.batching import BatchSource, IndexedBatches, as_batch_source, default_collate
from .distributed import DistInfo, cleanup_distributed, init_distributed
from .loop import TrainConfig, Trainer, TrainState, unwrap
from .optim import build_optimizer, param_groups
from .rundir import RunDirectoryError, read_metrics
from .schedules import build_scheduler, lr_factor

__all__ = [
    "BatchSource",
    "IndexedBatches",
    "as_batch_source",
    "default_collate",
    "DistInfo",
    "cleanup_distributed",
    "init_distributed",
    "TrainConfig",
    "Trainer",
    "TrainState",
    "unwrap",
    "RunDirectoryError",
    "read_metrics",
    "build_optimizer",
    "param_groups",
    "build_scheduler",
    "lr_factor",
]
