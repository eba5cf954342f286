"""One training run of a tiny MLM model for the scale tests (tests/training/test_scale.py): the same
model, data and global batch whatever the number of processes, so runs on 1 or 2 processes, DDP
or FSDP, must end with the same weights.

Run alone, under ``torch.multiprocessing`` (`spawn_entry`) or under torchrun::

    torchrun --nnodes=2 --node-rank=R --nproc-per-node=1 --rdzv-backend=c10d \\
        --rdzv-endpoint=localhost:PORT tests/scale_worker.py OUT --parallel fsdp

Writes OUT/model/model_state.pt (the Trainer's final weights), OUT/model/saved_by_fn.pt
(`save_fn`'s copy) and OUT/metrics.jsonl (train and eval losses).
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from bertfamily import build_model
from bertfamily.config import EncoderConfig
from bertfamily.train import IndexedBatches, TrainConfig, Trainer
from bertfamily.train.distributed import cleanup_distributed, init_distributed
from helpers import mlm_loss, torchrun_env

V, T, N = 99, 8, 32
GLOBAL_BATCH = 4


def tiny_model() -> torch.nn.Module:
    """tiny-bert (L=2, H=32) with an MLM head, dropout off (ranks draw different masks)."""
    torch.manual_seed(0)
    cfg = EncoderConfig.from_preset(
        "tiny-bert", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, use_pooler=False
    )
    return build_model(cfg, heads=["mlm"])


def dataset() -> list[dict]:
    rng = np.random.default_rng(0)
    return [{"input_ids": rng.integers(5, V, T), "labels": rng.integers(5, V, T)} for _ in range(N)]


loss_fn = mlm_loss  # tests/helpers.py


def eval_fn(model) -> dict[str, float]:
    """The loss on the first 8 examples (rank 0, on the plain model under FSDP)."""
    rows = dataset()[:8]
    batch = {k: torch.as_tensor(np.stack([r[k] for r in rows])) for k in rows[0]}
    return {"loss": loss_fn(model, batch)[0].item()}


def save_fn(model, directory) -> None:
    """What a recipe's save_fn does with the (plain) model: here its state dict again."""
    torch.save(model.state_dict(), directory / "saved_by_fn.pt")


def run(out_dir: str, parallel: str = "ddp", max_steps: int = 4, resume: bool = False) -> dict:
    """Train ``max_steps`` steps (2 micro-batches each) on this process's share of the global
    batch; the process group comes from the torchrun variables (none: one process)."""
    torch.set_num_threads(1)
    info = init_distributed("cpu")
    src = IndexedBatches(
        dataset(),
        GLOBAL_BATCH // info.world_size,
        seed=5,
        rank=info.rank,
        world_size=info.world_size,
    )
    cfg = TrainConfig(
        output_dir=out_dir,
        max_steps=max_steps,
        grad_accum_steps=2,
        learning_rate=1e-3,
        schedule="constant",  # the learning rate does not depend on max_steps: a run of 2
        # steps resumed to 4 is the run of 4
        log_every=1,
        save_every=1,
        eval_every=2,
        progress=False,
        device="cpu",
        parallel=parallel,
        resume=resume,
    )
    summary = Trainer(tiny_model(), loss_fn, src, cfg, eval_fn, info, save_fn).train()
    cleanup_distributed()
    return summary


def spawn_entry(rank: int, world: int, port: int, *args) -> None:
    """``torch.multiprocessing.spawn`` target: torchrun's variables for ``rank``, then `run`."""
    torchrun_env(rank, world, port)
    run(*args)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("out_dir")
    p.add_argument("--parallel", default="ddp")
    p.add_argument("--max-steps", type=int, default=4)
    p.add_argument("--resume", action="store_true")
    a = p.parse_args()
    run(a.out_dir, a.parallel, a.max_steps, a.resume)
