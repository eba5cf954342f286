"""What the recipes share: the document split, fixed evaluation batches, the MLM data pipeline
(documents → split → tokenize → instances → collate → batches), sizing a config for a
tokenizer, and the run finish (tokenizer beside the weights, a JSON summary).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..config import EncoderConfig
from ..data.batching import IndexedBatches
from ..data.corpora import read_documents
from ..errors import ArgumentTypeError, InputError
from ..files import write_text_atomic
from ..objectives.instances import Instance, SpecialIds, token_matched_batch_size
from ..objectives.masking import MaskingConfig
from ..objectives.phrase_masking import annotate_phrases
from ..objectives.pretraining import (
    MLMCollator,
    build_instances,
    static_maskings,
    tokenize_documents,
)
from ..train.config import TrainConfig
from ..train.distributed import DistInfo

__all__ = [
    "train_config",
    "split_documents",
    "fixed_eval_batches",
    "finish_run",
    "config_for_tokenizer",
    "MLMData",
    "mlm_data",
    "save_pretrained",
]


def split_documents(
    docs: Sequence[Any], eval_documents: int, seed: int
) -> tuple[list[Any], list[Any]]:
    """(train, held-out) documents: a seeded shuffle, min(eval_documents, max(2, N/10)) held out.

    Raises:
        ValueError: fewer than two documents would be left for training.
    """
    order = np.random.default_rng(seed).permutation(len(docs))
    n_eval = min(eval_documents, max(2, len(docs) // 10))
    if len(docs) - n_eval < 2:
        raise InputError(f"the corpus has {len(docs)} documents; need at least {n_eval + 2}")
    return [docs[i] for i in order[n_eval:]], [docs[i] for i in order[:n_eval]]


def fixed_eval_batches(
    instances: Sequence[Any],
    masking: MaskingConfig,
    collate: MLMCollator,
    batch_size: int,
    limit: int,
    seed: int,
    **common: Any,
) -> list[dict]:
    """At most ``limit`` held-out batches masked once with ``seed``, so every evaluation scores
    the same positions. ``common``: ``vocab_size``, ``mask_token_id``, ``special_ids`` of
    `static_maskings`. Each batch is a dict of (B, T) int64 tensors (see `MLMCollator`)."""
    fixed = static_maskings(instances, masking, 1, seed=seed, **common)
    return [
        collate(fixed[i : i + batch_size], np.random.default_rng(0))
        for i in range(0, len(fixed), batch_size)
    ][:limit]


def finish_run(
    output_dir: str | Path, tokenizer: Any, summary: dict[str, Any], file: str = "summary.json"
) -> None:
    """Save the tokenizer beside the run's ``model/`` and ``best/`` directories and write
    ``summary`` as JSON to ``output_dir/file`` atomically (call on the main process only)."""
    out = Path(output_dir)
    for sub in ("model", "best"):
        if (out / sub).is_dir():
            tokenizer.save_pretrained(out / sub)
    write_text_atomic(out / file, json.dumps(summary, indent=2, default=str))


def save_pretrained(model: Any, directory: Path) -> None:
    """The `Trainer`'s ``save_fn`` of every recipe: ``model.save_pretrained(directory)``."""
    model.save_pretrained(directory)


def config_for_tokenizer(
    config: EncoderConfig,
    tokenizer: Any,
    max_length: int,
    *,
    vocab_size: int | None = None,
    **fields: Any,
) -> EncoderConfig:
    """``config`` sized for ``tokenizer`` and instances of ``max_length`` tokens: its padding
    id, ``vocab_size`` (default: the tokenizer's), a position table of at least ``max_length``
    positions (plus the family's offset), and any other ``fields``.

    Raises:
        ValueError: the resulting config is invalid (see `EncoderConfig`).
    """
    return config.replace(
        vocab_size=tokenizer.vocab_size if vocab_size is None else vocab_size,
        pad_token_id=tokenizer.pad_token_id,
        max_position_embeddings=max(
            config.max_position_embeddings, max_length + config.position_offset
        ),
        **fields,
    )


@dataclass
class MLMData:
    """The output of `mlm_data`: the train batch source, fixed held-out batches, the instances
    behind them and the collator."""

    source: IndexedBatches
    eval_batches: list[dict]
    train_instances: list[Instance]
    eval_instances: list[Instance]
    collate: MLMCollator
    batch_size: int


def mlm_data(
    corpus: Sequence[str | Path],
    tokenizer: Any,
    train: TrainConfig,
    dist: DistInfo,
    *,
    kind: str,
    max_length: int,
    masking: MaskingConfig,
    eval_documents: int,
    eval_batches: int,
    short_seq_prob: float = 0.1,
    static_copies: int = 0,
    sbo: bool = False,
    chinese_words: bool = False,
    split_sentences: bool = False,
    text_field: str = "text",
    match_tokens: bool = True,
    phrases: str | None = None,
    eval_corpus: Sequence[str | Path] = (),
) -> MLMData:
    """Corpus files → documents → (train, held-out) split (`split_documents`, seed
    ``train.seed``; with ``eval_corpus``, every corpus document trains and the held-out
    documents are those of the ``eval_corpus`` files) → tokenized segments → instances of
    ``kind`` ("nsp" | "sop" | "packed" | "doc_packed") → masked, padded batches.

    With ``kind="doc_packed"`` (DOC-SENTENCES) and ``match_tokens``, the training batch grows
    to hold as many tokens on average as ``train.batch_size`` FULL-SENTENCES instances of the
    same documents (`token_matched_batch_size`, Liu et al. 2019 §4.2); ``MLMData.batch_size``
    is the size used. ``phrases`` ("english" | "chinese") adds a chunker's phrases to every
    line as spans for the "entity" masking strategy (ERNIE phrase-level masking,
    `objectives.phrase_masking.annotate_phrases`).

    Training batches come from an `IndexedBatches` over the train instances (or over
    ``static_copies`` fixed maskings of them) with ``train.batch_size`` per process, sharded by
    ``dist``; held-out batches are masked once (`fixed_eval_batches`, at most
    ``eval_batches``). Batch fields: see `bertfamily.objectives.pretraining`.

    Raises:
        ValueError: an unreadable or too small corpus, an unknown kind.
    """

    def documents(paths: Sequence[str | Path]) -> list:
        found = [
            d
            for path in paths
            for d in read_documents(path, text_field=text_field, split=split_sentences)
        ]
        return annotate_phrases(found, phrases) if phrases is not None else found

    docs = documents(corpus)
    if eval_corpus:  # a fixed held-out set (e.g. People's Daily's held-out articles)
        train_docs, eval_docs = docs, documents(eval_corpus)
    else:
        train_docs, eval_docs = split_documents(docs, eval_documents, train.seed)
    special = SpecialIds(cls=tokenizer.cls_token_id, sep=tokenizer.sep_token_id)
    seg_train = tokenize_documents(train_docs, tokenizer, chinese_words=chinese_words)
    seg_eval = tokenize_documents(eval_docs, tokenizer, chinese_words=chinese_words)
    train_inst = build_instances(seg_train, kind, max_length, special, train.seed, short_seq_prob)
    eval_inst = build_instances(seg_eval, kind, max_length, special, train.seed + 1, short_seq_prob)
    batch_size = train.batch_size
    if kind == "doc_packed" and match_tokens and train_inst:
        full = build_instances(seg_train, "packed", max_length, special)
        batch_size = token_matched_batch_size(train.batch_size, full, train_inst)
    common = dict(
        vocab_size=tokenizer.vocab_size,
        mask_token_id=tokenizer.mask_token_id,
        special_ids=tokenizer.all_special_ids,
    )
    dataset = (
        static_maskings(train_inst, masking, static_copies, seed=train.seed, **common)
        if static_copies
        else train_inst
    )
    collate = MLMCollator(masking, pad_token_id=tokenizer.pad_token_id, sbo=sbo, **common)
    source = IndexedBatches(
        dataset,
        batch_size,
        collate,
        seed=train.seed,
        rank=dist.rank,
        world_size=dist.world_size,
    )
    fixed = fixed_eval_batches(
        eval_inst, masking, collate, train.batch_size, eval_batches, train.seed + 2, **common
    )
    return MLMData(source, fixed, train_inst, eval_inst, collate, batch_size)


def train_config(recipe: str, train: TrainConfig | None = None, **fields: Any) -> TrainConfig:
    """The `TrainConfig` of a ``recipe`` run: ``train`` itself when given (then no ``fields``),
    else ``TRAIN_DEFAULTS[recipe]`` with ``fields`` (TrainConfig field names, ``output_dir``
    among them) on top — what the command line builds from its options.

    Raises:
        ArgumentTypeError: both ``train`` and fields, or a field TrainConfig does not have.
        InputError: no ``output_dir``.
    """
    from .defaults import TRAIN_DEFAULTS

    if train is not None:
        if fields:
            raise ArgumentTypeError(
                f"give either a TrainConfig or its fields, not both (got {sorted(fields)})"
            )
        return train
    if "output_dir" not in fields:
        raise InputError(f"{recipe}: give output_dir (where the run writes)")
    known = {f.name for f in dataclasses.fields(TrainConfig)}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise ArgumentTypeError(
            f"{recipe}: unknown training fields {unknown}; known: {sorted(known)}"
        )
    return TrainConfig(**{**TRAIN_DEFAULTS[recipe], **fields})
