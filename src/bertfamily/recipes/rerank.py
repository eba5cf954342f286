"""`train_reranker()`: a cross-encoder (query and passage in one input, one relevance logit)
trained on the shared `Trainer` with a loss of `objectives.ranking` (sentence-transformers'
CrossEncoder losses): binary cross-entropy on (query, passage, label in [0, 1]) rows
(``bce``, the default), ListNet over each query's graded passages (``listnet``), or in-batch
negatives over (query, positive[, negative...]) rows (``mnrl``).

Data: a pair table (`data.pairs.read_pairs`) in the layout of the loss; ``stsb:train`` gives the
STS Benchmark's pairs with score / 5 (the graded labels sentence-transformers' STS-B
cross-encoder example trains on). With an evaluation file (two text columns and a label) the
Spearman correlation of the sigmoid scores with the labels is measured every ``eval_every``
steps and the best model kept in ``best/``.

Outputs in ``TrainConfig.output_dir``: ``run.json``, ``metrics.jsonl``, ``checkpoint.pt``,
``model/`` and ``best/`` (Hugging Face sequence-classification directories with one output and the
tokenizer, which sentence-transformers' ``CrossEncoder`` loads; `pipelines.cross_encoder`
scores with them) and ``final_metrics.json``.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..data.pairs import PairTable, read_pairs, resolve_pair_file
from ..data.validate import check_training_table
from ..errors import InputError
from ..evaluation.metrics import regression_metrics
from ..files import write_text_atomic
from ..objectives.ranking import MODEL_INPUTS, RERANK_LOSSES, build_rerank_loss
from ..pipelines.embedding.saving import cross_encoder_card, public_name, training_hyperparameters
from ..pipelines.embedding.sentence_modules import read_sentence_modules
from ..pipelines.reranking.cross_encoder import pair_logits
from ..pretrained import from_pretrained
from ..tokenization.tokenizer import load_tokenizer
from ..train.distributed import init_distributed
from ..train.loop import TrainConfig, Trainer, unwrap
from ..train.rundir import locks_run_directory, seed_all, write_run_record
from .common import finish_run, save_pretrained, train_config

__all__ = ["RERANK_LOSSES", "RerankConfig", "train_reranker"]


@dataclass
class RerankConfig:
    """What to train (the optimisation lives in `TrainConfig`).

    Attributes:
        model: the starting encoder (a Hugging Face or sentence-transformers directory; its
            encoder weights are used, a one-output head is initialised).
        train_file: (query, passage, label) rows (see the module docstring).
        loss: one of `objectives.ranking.RERANK_LOSSES` ("bce", "listnet", "mnrl").
        eval_file: scored pairs for ``eval_every`` (Spearman) and the best checkpoint.
        max_length: tokens per (query, passage) input.
        epochs: passes over the data; sets ``max_steps`` (None: ``TrainConfig.max_steps``).
        train_format: "sts" for STS Benchmark files given as paths.
        shuffle: reshuffle the rows (listnet: the queries) every epoch (False: the file's
            order).
        num_negatives: ``mnrl``: in-batch negatives per query (None: all).
        scale: ``mnrl``: the scale of the sigmoid scores.
    """

    model: str | Path
    train_file: str | Path
    loss: str = "bce"
    eval_file: str | Path | None = None
    max_length: int = 256
    epochs: float | None = 1.0
    train_format: str | None = None
    shuffle: bool = True
    num_negatives: int | None = 4
    scale: float = 10.0


def _eval_pairs(spec) -> PairTable:
    table = read_pairs(spec)
    if len(table.columns) != 2 or table.labels is None:
        raise InputError(f"{spec}: reranker evaluation needs two text columns and a label column")
    return table


def train_reranker(
    cfg: RerankConfig, train: TrainConfig | None = None, **train_fields: Any
) -> dict[str, Any]:
    """Train a cross-encoder with the shared `Trainer` (see the module docstring).

    ``train`` as given except: ``batch_size`` capped at the rows, ``max_steps`` from
    ``cfg.epochs`` when set, ``log_every`` 0 = a tenth of the run, with an eval file
    ``eval_every`` 0 = once per epoch and the best Spearman kept and loaded at the end.

    Returns:
        {"train": trainer summary, "eval": {"spearman", "pearson"} or None, "loss", "rows",
         "seconds"}.

    ``train``: the run's `TrainConfig`; or its fields as keywords (``output_dir=...``), which
    start from ``TRAIN_DEFAULTS["rerank"]`` as the command line does: sentence-transformers'
    ``CrossEncoderTrainer`` settings, its warm-up included (``transformers_warmup``), so that
    from the same weights and rows every step equals its run
    (tests/training/test_rerank_trainer_parity.py). The seed is applied before anything random
    is built, and the run directory is locked while the run writes it.
    """
    return _train_reranker(cfg, train_config("rerank", train, **train_fields))


@locks_run_directory
def _train_reranker(cfg: RerankConfig, train: TrainConfig) -> dict[str, Any]:
    """`train_reranker` with its `TrainConfig` resolved, under the run directory's lock."""
    seed_all(train.seed)  # before the model (a fresh head, dropout) is built
    t0 = time.time()
    if cfg.loss not in RERANK_LOSSES:
        raise InputError(f"unknown rerank loss {cfg.loss!r}; expected one of {RERANK_LOSSES}")
    loss = build_rerank_loss(cfg.loss, num_negatives=cfg.num_negatives, scale=cfg.scale)
    table = read_pairs(cfg.train_file, format=cfg.train_format)
    loss.check(table, cfg.train_file)
    check_training_table(table, cfg.train_file, loss.data_rules)  # the one data validator
    eval_table = _eval_pairs(cfg.eval_file) if cfg.eval_file is not None else None
    base = read_sentence_modules(Path(cfg.model)).model_dir  # a sentence-transformers dir's encoder
    tok = load_tokenizer(base)
    model = from_pretrained(
        base, heads=["classify"], new_heads=True, label_names=("score",), problem_type="regression"
    )
    model.train()
    max_length = min(cfg.max_length, model.config.max_sequence_length)

    def tokenize(queries: list[str], passages: list[str]) -> dict[str, Any]:
        enc = tok(queries, passages, max_length=max_length)
        return {k: v for k, v in enc.items() if k in MODEL_INPUTS}

    dist = init_distributed(train.device)
    batch_size = min(train.batch_size, loss.units(table) // dist.world_size)
    source = loss.batches(
        table,
        tokenize,
        batch_size,
        shuffle=cfg.shuffle,
        seed=train.seed,
        rank=dist.rank,
        world_size=dist.world_size,
    )
    steps = max(1, int(cfg.epochs * len(source))) if cfg.epochs is not None else train.max_steps

    def loss_fn(m, batch):
        return loss(m, batch)

    def eval_fn(m):
        pairs = list(zip(eval_table.column(0), eval_table.column(1)))
        logits = pair_logits(unwrap(m), tok, pairs, max_length=max_length, batch_size=64)
        met = regression_metrics(eval_table.labels, 1.0 / (1.0 + np.exp(-logits)))
        return {"spearman": met["spearman"], "pearson": met["pearson"]}

    derived: dict[str, Any] = dict(max_steps=steps, batch_size=batch_size)
    if not train.log_every:
        derived["log_every"] = max(1, min(50, steps // 10))
    if eval_table is not None:
        if not train.eval_every:
            derived["eval_every"] = max(1, len(source))
        if train.metric_for_best is None:
            derived.update(
                metric_for_best="spearman", greater_is_better=True, load_best_at_end=True
            )
    config = dataclasses.replace(train, **derived)
    if dist.is_main:  # run.json: what repeats this run
        files = [cfg.train_file, *([cfg.eval_file] if cfg.eval_file is not None else [])]
        write_run_record(
            train.output_dir,
            {"rerank": cfg, "train": config},
            [resolve_pair_file(f)[0] for f in files] + [base],
            train.seed,
        )
    summary = Trainer(
        model,
        loss_fn,
        source,
        config,
        eval_fn if eval_table is not None else None,
        dist=dist,
        save_fn=save_pretrained,
        save_fn_holds_weights=True,  # one copy of the weights in model/ and best/
    ).train()
    if not dist.is_main:
        return {"train": summary, "loss": cfg.loss, "rows": len(table)}
    result: dict[str, Any] = {"train": summary, "loss": cfg.loss, "rows": len(table)}
    if eval_table is not None:
        result["eval"] = eval_fn(model)
    result["seconds"] = time.time() - t0
    finish_run(train.output_dir, tok, result, file="final_metrics.json")
    card = {
        "base_model": str(cfg.model),
        "train_data": f"{public_name(cfg.train_file)} ({len(table)} rows)",
        "loss": cfg.loss,
        "steps": summary.get("step"),
        "hyperparameters": training_hyperparameters(
            config, epochs=cfg.epochs, max_length=max_length, scale=cfg.scale
        ),
    }
    out = Path(train.output_dir)
    held = "best" if config.load_best_at_end else "model"  # the weights `eval` measured
    for sub in ("model", "best"):
        if (out / sub).is_dir():
            metrics = result.get("eval") if sub == held else None
            text = cross_encoder_card({**card, "metrics": metrics}, max_length=max_length)
            write_text_atomic(out / sub / "README.md", text)
    return result
