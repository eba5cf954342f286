"""`train_embedding()`: a sentence-embedding model trained with a contrastive or similarity
loss (`objectives.contrastive`) on the shared `Trainer`, saved as whole sentence-transformers
directories (`SentenceEmbedder.save`).

Data: a pair table (`data.pairs.read_pairs`: ``anchor, positive[, negative...]`` rows for the
MNRL losses, ``sentence1, sentence2, score`` for CoSENT / cosine; ``stsb:train`` etc. for the
STS Benchmark; one text a line for SimCSE). Each micro-batch tokenizes every column apart (one
forward pass per column, as sentence-transformers). With an STS evaluation file the model is
scored (Spearman of cosine vs gold, `evaluation.metrics.evaluate_sts`) every ``eval_every``
steps and the best one kept in ``best/``.

Outputs in ``TrainConfig.output_dir``: ``run.json`` (`train.rundir.write_run_record`),
``metrics.jsonl``, ``checkpoint.pt``, ``model/`` and ``best/`` (sentence-transformers
directories with a model card) and ``final_metrics.json``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..checkpoints.adapters import LoraSpec, add_lora, lora_merged, save_adapter
from ..data.batching import IndexedBatches
from ..data.pairs import PairTable, read_pairs, resolve_pair_file
from ..data.validate import check_training_table
from ..errors import InputError
from ..evaluation.metrics import evaluate_sts
from ..files import write_text_atomic
from ..objectives.contrastive import LOSSES, EmbeddingLoss, build_loss, simcse_columns
from ..pipelines.embedding.embed import SentenceEmbedder
from ..pipelines.embedding.saving import model_card, public_name, training_hyperparameters
from ..resources.resolve import resolve_model
from ..train.distributed import init_distributed
from ..train.loop import TrainConfig, Trainer, unwrap
from ..train.rundir import locks_run_directory, seed_all, write_run_record
from .common import train_config
from .defaults import TRAIN_DEFAULTS

__all__ = ["EMBEDDING_TRAIN_DEFAULTS", "EmbeddingConfig", "train_embedding", "pair_batches"]

log = logging.getLogger(__name__)

# sentence-transformers' trainer defaults (`recipes.defaults.TRAIN_DEFAULTS["embedding"]`):
# transformers' AdamW (lr 5e-5, eps 1e-8, weight decay 0) and 10 % warm-up as its examples use.
EMBEDDING_TRAIN_DEFAULTS: dict[str, Any] = TRAIN_DEFAULTS["embedding"]


@dataclass
class EmbeddingConfig:
    """What to train (the optimisation lives in `TrainConfig`).

    Attributes:
        model: a sentence-transformers or Hugging Face directory (the starting weights).
        train_file: a pair table (see the module docstring) or ``stsb:train``.
        loss: one of `objectives.contrastive.LOSSES`.
        eval_file: STS pairs with scores (``stsb:dev``, or ``sentence1, sentence2, score``)
            for ``--eval-every`` and the best checkpoint; None: no evaluation.
        scale: the losses' similarity scale (MNRL, CoSENT).
        mini_batch_size: rows per mini-batch of ``cached_mnrl``.
        matryoshka_dims: wrap the loss in Matryoshka over these dimensions (empty: no).
        min_score: keep only rows whose label is at least this (e.g. STS pairs with score ≥ 4
            as MNRL positives; labels then dropped). None: keep all.
        max_seq_length: tokens per text (None: the model's).
        epochs: passes over the data; sets ``max_steps`` (None: ``TrainConfig.max_steps``).
        train_format: "sts" for STS Benchmark files given as paths (see `data.pairs`).
        shuffle: reshuffle the rows every epoch (seeded by ``TrainConfig.seed`` and the epoch);
            False keeps the file's order, e.g. data already shuffled or ordered for its
            in-batch negatives (sentence-transformers' trainer with a sequential sampler).
        lora: train a LoRA adapter (`checkpoints.adapters.add_lora`) instead of the whole
            model: only its A and B matrices train (the encoder and Dense layers frozen), and
            ``model/`` and ``best/`` are PEFT adapter directories (adapter_config.json,
            adapter_model.safetensors) of the encoder. None: train every weight.
        lora_merge: with ``lora``: save whole sentence-transformers directories with the
            update merged into the weights instead of adapters.
    """

    model: str | Path
    train_file: str | Path
    loss: str = "mnrl"
    eval_file: str | Path | None = None
    scale: float = 20.0
    mini_batch_size: int = 32
    matryoshka_dims: tuple[int, ...] = ()
    min_score: float | None = None
    max_seq_length: int | None = None
    epochs: float | None = 1.0
    train_format: str | None = None
    shuffle: bool = True
    lora: LoraSpec | None = None
    lora_merge: bool = False


def _prepare_table(cfg: EmbeddingConfig, table: PairTable, loss: EmbeddingLoss) -> PairTable:
    """The rows the loss trains on, checked by the one training-data validator
    (`data.validate.check_training_table`: refused or warned before the model loads)."""
    if cfg.loss == "simcse":
        table = PairTable(
            ("anchor", "positive"), simcse_columns(table.column(0)), lines=table.lines
        )
        check_training_table(table, cfg.train_file, loss.data_rules)
        return table
    if cfg.min_score is not None:
        if table.labels is None:
            raise InputError("min_score needs a label (or score) column")
        keep = [i for i, y in enumerate(table.labels) if y >= cfg.min_score]
        lines = [table.lines[i] for i in keep] if table.lines else None
        table = PairTable(table.columns, [table.rows[i] for i in keep], lines=lines)
        log.info("kept %d rows with a label >= %s", len(keep), cfg.min_score)
    loss.check_columns(len(table.columns))
    if loss.needs_labels and table.labels is None:
        raise InputError(f"the {cfg.loss} loss needs a label (or score) column")
    if not loss.needs_labels and table.labels is not None:
        table = PairTable(table.columns, table.rows, lines=table.lines)  # MNRL: no labels
    check_training_table(table, cfg.train_file, loss.data_rules)
    return table


def pair_batches(
    table: PairTable,
    model: SentenceEmbedder,
    batch_size: int,
    *,
    seed: int = 0,
    rank: int = 0,
    world_size: int = 1,
    shuffle: bool = True,
) -> IndexedBatches:
    """The training batch source: rows shuffled by (seed, epoch) (``shuffle`` False: in file
    order), every column tokenized apart: ``{"features": [column tensors...], "labels": (B,)
    float32}`` (labels when the table has them)."""
    items = list(range(len(table)))

    def collate(idx: list[int], rng: np.random.Generator) -> dict[str, Any]:
        del rng
        rows = [table.rows[i] for i in idx]
        batch: dict[str, Any] = {
            "features": [model.features([r[j] for r in rows]) for j in range(len(table.columns))]
        }
        if table.labels is not None:
            batch["labels"] = torch.tensor([table.labels[i] for i in idx], dtype=torch.float32)
        return batch

    return IndexedBatches(
        items, batch_size, collate, shuffle=shuffle, seed=seed, rank=rank, world_size=world_size
    )


def train_embedding(
    cfg: EmbeddingConfig, train: TrainConfig | None = None, **train_fields: Any
) -> dict[str, Any]:
    """Train a sentence-embedding model with the shared `Trainer` (see the module docstring).

    ``train`` is used as given except: ``batch_size`` (per process; under ``torchrun`` every
    process takes its own slice of each global batch) capped at the rows; ``max_steps`` from
    ``cfg.epochs`` when set; ``log_every`` 0 means a tenth of the run; with an eval file,
    ``eval_every`` 0 means once per epoch and the best STS Spearman is kept in ``best/`` and
    loaded at the end.

    Returns:
        {"train": trainer summary, "eval": STS metrics of the final (best) model or None,
         "loss", "rows", "seconds"}.

    Raises:
        ValueError (DataError, ...): an unknown loss, data that does not fit it.

    ``train``: the run's `TrainConfig`; or its fields as keywords (``output_dir=...``), which
    start from ``TRAIN_DEFAULTS["embedding"]`` as the command line does. The seed is applied before
    anything random is built, and the run directory is locked while the run writes it.
    """
    return _train_embedding(cfg, train_config("embedding", train, **train_fields))


@locks_run_directory
def _train_embedding(cfg: EmbeddingConfig, train: TrainConfig) -> dict[str, Any]:
    """`train_embedding` with its `TrainConfig` resolved, under the run directory's lock."""
    seed_all(train.seed)  # before the model (a fresh head, dropout) is built
    t0 = time.time()
    if cfg.loss not in LOSSES:
        raise InputError(f"unknown embedding loss {cfg.loss!r}; expected one of {LOSSES}")
    loss = build_loss(
        cfg.loss,
        scale=cfg.scale,
        mini_batch_size=cfg.mini_batch_size,
        matryoshka_dims=cfg.matryoshka_dims,
    )
    table = _prepare_table(cfg, read_pairs(cfg.train_file, format=cfg.train_format), loss)
    model = SentenceEmbedder.for_training(cfg.model, max_seq_length=cfg.max_seq_length)
    if cfg.lora is not None:
        adapted = add_lora(model.model, cfg.lora)  # freezes the rest of the encoder
        model.dense.requires_grad_(False)
        log.info("LoRA r=%d on %d modules", cfg.lora.r, len(adapted))
    eval_pairs = read_pairs(cfg.eval_file) if cfg.eval_file is not None else None
    if eval_pairs is not None and (eval_pairs.labels is None or len(eval_pairs.columns) != 2):
        raise InputError(f"{cfg.eval_file}: STS evaluation needs two text columns and a score")
    dist = init_distributed(train.device)
    batch_size = min(train.batch_size, len(table) // dist.world_size)
    source = pair_batches(
        table,
        model,
        batch_size,
        seed=train.seed,
        rank=dist.rank,
        world_size=dist.world_size,
        shuffle=cfg.shuffle,
    )
    steps = max(1, int(cfg.epochs * len(source))) if cfg.epochs is not None else train.max_steps
    card = {
        "base_model": str(cfg.model),
        "train_data": f"{public_name(cfg.train_file)} ({len(table)} rows, columns "
        f"{list(table.columns)})",
        "loss": cfg.loss
        + (f" (matryoshka {list(cfg.matryoshka_dims)})" if cfg.matryoshka_dims else ""),
    }

    def loss_fn(m, batch):
        return loss(m, batch)

    def eval_fn(m):
        enc = unwrap(m)
        return evaluate_sts(
            enc.encode, eval_pairs.column(0), eval_pairs.column(1), eval_pairs.labels
        )

    def save_fn(m, directory: Path) -> None:
        if cfg.lora is not None and not cfg.lora_merge:
            save_adapter(m.model, directory, base_model=public_name(cfg.model))
            return
        with lora_merged(m.model):
            m.save(directory, {**card, "steps": "see metrics.jsonl"})

    derived: dict[str, Any] = dict(max_steps=steps, batch_size=batch_size)
    if not train.log_every:
        derived["log_every"] = max(1, min(50, steps // 10))
    if eval_pairs is not None:
        if not train.eval_every:
            derived["eval_every"] = max(1, len(source))
        if train.metric_for_best is None:
            derived.update(
                metric_for_best="spearman", greater_is_better=True, load_best_at_end=True
            )
    config = dataclasses.replace(train, **derived)
    card["hyperparameters"] = training_hyperparameters(
        config, epochs=cfg.epochs, scale=cfg.scale, shuffle=cfg.shuffle
    )
    if dist.is_main:  # run.json: what repeats this run
        files = [cfg.train_file, *([cfg.eval_file] if cfg.eval_file is not None else [])]
        write_run_record(
            train.output_dir,
            {"embedding": cfg, "train": config},
            [resolve_pair_file(f)[0] for f in files] + [resolve_model(cfg.model)],
            train.seed,
        )
    summary = Trainer(
        model,
        loss_fn,
        source,
        config,
        eval_fn if eval_pairs is not None else None,
        dist=dist,
        save_fn=save_fn,
        save_fn_holds_weights=True,  # one copy of the weights in model/ and best/
    ).train()
    if not dist.is_main:
        return {"train": summary, "loss": cfg.loss, "rows": len(table)}
    result: dict[str, Any] = {"train": summary, "loss": cfg.loss, "rows": len(table)}
    out = Path(train.output_dir)
    if eval_pairs is not None:
        result["eval"] = eval_fn(model)
    final = {**card, "steps": summary.get("step")}
    cards = cfg.lora is None or cfg.lora_merge  # adapters (model/, best/): PEFT's files only
    if cards and (out / "model").is_dir():  # the last weights (metrics in metrics.jsonl)
        write_text_atomic(out / "model" / "README.md", model_card(model, final))
    if cards and (out / "best").is_dir():  # the weights `model` holds now (loaded at the end)
        best = {**final, "metrics": result.get("eval") or {}}
        write_text_atomic(out / "best" / "README.md", model_card(model, best))
    result["seconds"] = time.time() - t0
    write_text_atomic(out / "final_metrics.json", json.dumps(result, indent=2, default=str))
    return result
