"""`train_colbert()`: a late-interaction (ColBERT) model trained from any of our encoders on the
shared `Trainer` with a loss of `objectives.late_interaction` (PyLate's ``Contrastive`` and
``Distillation``), saved as a directory that PyLate loads (``pylate.models.ColBERT``) with the
same token vectors.

The model is `pipelines.embedding.colbert.ColBERTEncoder`, the class that encodes for search,
trained in place. A new one is built on any of our encoders as PyLate builds one
(`new_colbert`): the encoder's last hidden states → a linear projection H → ``dim`` (128, no
bias), with two new tokens, the query and document markers ``"[Q] "`` and ``"[D] "``, added to
the vocabulary (their embedding rows the mean of the others, as transformers'
``resize_token_embeddings`` starts them) and put after [CLS] of every query and document.
Queries are padded with [MASK] to ``query_length`` (ColBERT §3.2 query augmentation; the
[MASK] tokens are not attended to unless ``attend_to_expansion_tokens``, but their vectors
score); documents are cut at ``document_length``. A PyLate ColBERT directory given as the
model is trained further with its own settings (asking for other ones is refused).

Data:

- ``contrastive``: a pair table (`data.pairs.read_pairs`): ``query, positive[, negative...]``
  columns (``stsb:train`` with ``min_score`` 0.8 keeps the STS pairs scored ≥ 4 of 5 as
  (query, positive)); every other row's documents are a query's in-batch negatives.
- ``distillation``: JSONL, one query a line: ``{"query": str, "documents": [str, ...],
  "scores": [float, ...]}`` (the teacher's scores of the documents; every line the same
  number of documents).

Documents are padded (with [MASK] ids, not attended to) to one more token than the longest of
the batch, at most ``document_length``: every document shorter than ``document_length`` then
has a padding token, whose similarity counts as 0 (`objectives.late_interaction`), exactly as
PyLate's collator padding to ``document_length`` gives, at the cost of the batch's longest.

Outputs in ``TrainConfig.output_dir``: ``run.json``, ``metrics.jsonl``, ``checkpoint.pt``,
``initial/`` (the new model before training, when built from an encoder), ``model/`` (the
PyLate directory: the encoder and tokenizer at the root, ``1_Dense/`` with the projection,
``modules.json``, ``config_sentence_transformers.json`` with PyLate's settings) and
``final_metrics.json``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import string
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..data.batching import IndexedBatches
from ..data.pairs import PairTable, read_pairs, resolve_pair_file
from ..data.tables import read_text, text_lines
from ..data.validate import check_training_table
from ..errors import DataError, InputError
from ..files import atomic_write, make_directory_inside, write_text_atomic
from ..modules.kernels import make_batch_invariant
from ..objectives.late_interaction import (
    LATE_INTERACTION_LOSSES,
    LateInteractionLoss,
    build_late_interaction_loss,
)
from ..pipelines.embedding.colbert import ColBERTEncoder, is_colbert_directory
from ..pipelines.embedding.embed import SentenceEmbedder
from ..pipelines.embedding.saving import public_name, training_hyperparameters
from ..resources.resolve import resolve_model
from ..train.distributed import init_distributed
from ..train.loop import TrainConfig, Trainer
from ..train.rundir import locks_run_directory, seed_all, write_run_record
from .common import train_config

__all__ = [
    "ColBERTConfig",
    "LATE_INTERACTION_LOSSES",
    "load_for_training",
    "loss_settings",
    "new_colbert",
    "read_distillation",
    "save_colbert",
    "save_trained",
    "token_vectors",
    "train_colbert",
    "training_features",
]

QUERY_PREFIX, DOCUMENT_PREFIX = "[Q] ", "[D] "
#: PyLate's default skiplist: the ASCII punctuation characters.
SKIPLIST_WORDS = tuple(string.punctuation)
_ST = "sentence_transformers.models."


def _write_json(path: Path, value: Any, root: Path) -> None:
    write_text_atomic(path, json.dumps(value, indent=2) + "\n", inside=root)


def save_colbert(
    directory: str | Path,
    *,
    model: nn.Module,
    tokenizer: Any,
    projection: nn.Linear,
    settings: dict[str, Any],
    card: dict | None = None,
    source: str | Path | None = None,
) -> Path:
    """Write a PyLate ColBERT directory (see the module docstring), what
    ``pylate.models.ColBERT`` and `pipelines.embedding.colbert.ColBERTEncoder` load.

    Args:
        directory: where (created; files replaced atomically, one by one).
        model: the encoder (`Model`), written by its ``save_pretrained``.
        tokenizer: its `tokenization.Tokenizer`, the markers among its tokens.
        projection: the bias-free Linear H → D.
        settings: PyLate's fields of ``config_sentence_transformers.json``
            (``query_length``, ``document_length``, ``attend_to_expansion_tokens``,
            ``skiplist_words``, ``do_query_expansion``; the markers are "[Q] "/"[D] ").
        card: lines for README.md.
        source: the starting model, named in README.md.

    Raises:
        UnsafePathError: a write would go through a link out of ``directory``.
    """
    from safetensors.torch import save_file

    d = Path(directory)
    model.save_pretrained(d)
    tokenizer.save_pretrained(d)
    _write_json(
        d / "sentence_bert_config.json",
        {"max_seq_length": settings["document_length"] - 1, "do_lower_case": False},
        d,
    )
    dense = make_directory_inside(d, d / "1_Dense")
    _write_json(
        dense / "config.json",
        {
            "in_features": projection.in_features,
            "out_features": projection.out_features,
            "bias": False,
            "activation_function": "torch.nn.modules.linear.Identity",
        },
        d,
    )
    state = {"linear.weight": projection.weight.detach().float().contiguous().cpu()}
    atomic_write(dense / "model.safetensors", lambda t: save_file(state, str(t)), inside=d)
    _write_json(
        d / "modules.json",
        [
            {"idx": 0, "name": "0", "path": "", "type": _ST + "Transformer"},
            {"idx": 1, "name": "1", "path": "1_Dense", "type": "pylate.models.Dense.Dense"},
        ],
        d,
    )
    _write_json(
        d / "config_sentence_transformers.json",
        {
            "prompts": {"query": "", "document": ""},
            "default_prompt_name": None,
            "similarity_fn_name": "MaxSim",
            "query_prefix": QUERY_PREFIX,
            "document_prefix": DOCUMENT_PREFIX,
            **settings,
        },
        d,
    )
    lines = ["# ColBERT model trained with bertfamily", ""]
    if source is not None:
        lines += [f"- base_model: {public_name(source)}"]
    lines += [f"- {k}: {v}" for k, v in (card or {}).items()]
    write_text_atomic(d / "README.md", "\n".join(lines) + "\n", inside=d)
    return d


def new_colbert(
    encoder: str | Path,
    directory: str | Path,
    *,
    dim: int = 128,
    query_length: int = 32,
    document_length: int = 180,
    attend_to_expansion_tokens: bool = False,
) -> Path:
    """A new ColBERT on any of our encoders, as PyLate builds one, saved in ``directory``
    (PyLate's layout): the markers added to the vocabulary (their rows the mean of the token
    table), a bias-free Linear H → ``dim`` (torch's default init, from the current RNG state).

    Args:
        encoder: a sentence-transformers or Hugging Face directory (or resource / cached id);
            its pooling is not used.
        directory: where the new model is written.
        dim: the token vectors' size.
        query_length: tokens per query, [Q] and the [MASK] padding included.
        document_length: at most this many tokens per document, [D] included.
        attend_to_expansion_tokens: the query's [MASK] tokens are attended to.

    Returns:
        ``directory``.

    Raises:
        InputError: lengths < 3 or over the model's position table, ``dim`` < 1, a directory
            with Dense layers, a tokenizer without a [MASK] token, a do_lower_case directory.
    """
    import tokenizers

    if dim < 1:
        raise InputError(f"dim must be >= 1, got {dim}")
    base = SentenceEmbedder.for_training(encoder)
    if len(base.dense):
        raise InputError(f"{encoder}: a directory with Dense layers is not supported")
    limit = base.model.config.max_position_embeddings
    for name, value in (("query_length", query_length), ("document_length", document_length)):
        if not 3 <= value <= limit:
            raise InputError(f"{name} must be in [3, {limit}] for this model, got {value}")
    model, tok = base.model, base.tokenizer
    if tok.mask_token_id is None:
        raise InputError(f"{encoder}: the tokenizer has no [MASK] token for queries")
    backend = tok.backend
    new = [t for t in (QUERY_PREFIX, DOCUMENT_PREFIX) if backend.token_to_id(t) is None]
    if new:  # as transformers' add_tokens: plain (not special), normalised tokens
        backend.add_tokens([tokenizers.AddedToken(t, normalized=True) for t in new])
    table = model.encoder.embeddings.token
    if len(tok) > table.num_embeddings:
        grown = nn.Embedding(len(tok), table.embedding_dim, padding_idx=table.padding_idx)
        with torch.no_grad():
            grown.weight[: table.num_embeddings] = table.weight
            grown.weight[table.num_embeddings :] = table.weight.mean(dim=0)
        model.encoder.embeddings.token = grown
        model.encoder.vocab_size = len(tok)  # the trunk's input check
        model.config = dataclasses.replace(model.config, vocab_size=len(tok))
    projection = nn.Linear(model.config.hidden_size, dim, bias=False)
    settings = {
        "query_length": query_length,
        "document_length": document_length,
        "attend_to_expansion_tokens": attend_to_expansion_tokens,
        "skiplist_words": list(SKIPLIST_WORDS),
        "do_query_expansion": True,
    }
    return save_colbert(
        directory, model=model, tokenizer=tok, projection=projection, settings=settings,
        source=encoder,
    )  # fmt: skip


def load_for_training(directory: str | Path) -> ColBERTEncoder:
    """A ColBERT directory as a `ColBERTEncoder` to train: fp32, plain BLAS Linear layers,
    the padded batch (no batch-invariant inference path), in train mode.

    Raises:
        InputError: a projection that is not one bias-free Linear layer.
        SentenceModulesError / ModelDirectoryError: see `ColBERTEncoder`.
    """
    encoder = ColBERTEncoder(directory, dtype="fp32", linear_kernel="blas")
    make_batch_invariant(encoder.embedder, False)
    dense = list(encoder.embedder.dense)
    if len(dense) != 1 or dense[0][0].bias is not None:
        raise InputError(f"{directory}: training needs one bias-free projection layer")
    return encoder.train()


def save_trained(
    encoder: ColBERTEncoder, directory: str | Path, card: dict | None = None, source=None
) -> Path:
    """Write a `ColBERTEncoder` (`load_for_training`) as a PyLate directory (`save_colbert`)."""
    s = encoder.settings
    settings = {
        "query_length": s.query_length,
        "document_length": s.document_length,
        "attend_to_expansion_tokens": s.attend_to_expansion_tokens,
        "skiplist_words": list(s.skiplist_words),
        "do_query_expansion": s.do_query_expansion,
    }
    return save_colbert(
        directory, model=encoder.embedder.model, tokenizer=encoder.tokenizer,
        projection=encoder.embedder.dense[0][0], settings=settings, card=card, source=source,
    )  # fmt: skip


def loss_settings(encoder: ColBERTEncoder) -> dict[str, Any]:
    """The model's settings every late-interaction loss takes."""
    return {
        "skiplist_ids": tuple(int(i) for i in encoder.skiplist_ids.tolist()),
        "query_expansion": encoder.settings.do_query_expansion,
    }


def token_vectors(encoder: nn.Module) -> Any:
    """The losses' ``encode(features, is_query) -> (B, T, D)`` of a (DDP-wrapped)
    `ColBERTEncoder`."""

    def encode(features: dict[str, torch.Tensor], is_query: bool) -> torch.Tensor:
        return encoder(**features, is_query=is_query)[0]

    return encode


def training_features(
    encoder: ColBERTEncoder, texts: Sequence[str], *, is_query: bool
) -> dict[str, torch.Tensor]:
    """`ColBERTEncoder.features`, documents padded by one more token (at most
    ``document_length``; see the module docstring)."""
    feats = encoder.features(texts, is_query=is_query)
    width = feats["input_ids"].shape[1]
    if is_query or width >= encoder.settings.document_length:
        return feats
    fill = {"input_ids": encoder.mask_token_id or 0, "attention_mask": 0, "token_type_ids": 0}
    return {
        k: torch.cat([v, torch.full_like(v[:, :1], fill.get(k, 0))], dim=1)
        for k, v in feats.items()
    }


@dataclass
class ColBERTConfig:
    """What to train (the optimisation lives in `TrainConfig`).

    Attributes:
        model: the starting encoder (a sentence-transformers or Hugging Face directory).
        train_file: the rows of the loss (see the module docstring).
        loss: "contrastive" or "distillation".
        dim: token vector size.
        query_length / document_length: tokens per query / at most per document.
        attend_to_expansion_tokens: queries attend to their [MASK] padding.
        temperature: contrastive: the scores are divided by it.
        normalize_scores: distillation: min-max normalise the student's scores per query.
        min_score: contrastive: keep only rows whose label is at least this (labels then
            dropped); None: keep all (a table with labels is refused).
        epochs: passes over the data; sets ``max_steps`` (None: ``TrainConfig.max_steps``).
        train_format: "sts" for STS Benchmark files given as paths.
        shuffle: reshuffle the rows every epoch (False: the file's order).
    """

    model: str | Path
    train_file: str | Path
    loss: str = "contrastive"
    dim: int = 128
    query_length: int = 32
    document_length: int = 180
    attend_to_expansion_tokens: bool = False
    temperature: float = 1.0
    normalize_scores: bool = True
    min_score: float | None = None
    epochs: float | None = 1.0
    train_format: str | None = None
    shuffle: bool = True


def read_distillation(path: str | Path) -> tuple[list[str], list[list[str]], list[list[float]]]:
    """Distillation rows (see the module docstring): queries, each one's documents and the
    teacher's scores of them.

    Raises:
        DataError: a line that is not such an object, documents and scores of different
            lengths, lines with different numbers of documents, a blank text, a non-finite
            score, no rows.
    """
    queries, documents, scores = [], [], []
    for n, line in enumerate(text_lines(read_text(path)), 1):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"{where}: not JSON ({e.msg})") from None
        if not isinstance(row, dict) or not {"query", "documents", "scores"} <= set(row):
            raise DataError(f"{where}: expected an object with query, documents and scores")
        q, docs, s = row["query"], row["documents"], row["scores"]
        texts_ok = isinstance(docs, list) and all(isinstance(t, str) and t.strip() for t in docs)
        if not isinstance(q, str) or not q.strip() or not texts_ok or not docs:
            raise DataError(f"{where}: the query and documents must be non-blank texts")
        numbers = isinstance(s, list) and all(
            isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in s
        )
        if not numbers or len(s) != len(docs):
            raise DataError(f"{where}: scores must be {len(docs)} finite numbers, one per document")
        if documents and len(docs) != len(documents[0]):
            raise DataError(
                f"{where}: {len(docs)} documents, the first line has {len(documents[0])} "
                "(every query needs the same number)"
            )
        queries.append(q)
        documents.append(list(docs))
        scores.append([float(x) for x in s])
    if not queries:
        raise DataError(f"{path} holds no rows")
    return queries, documents, scores


def _contrastive_table(cfg: ColBERTConfig, loss: LateInteractionLoss) -> PairTable:
    """The (query, positive[, negative...]) rows, checked by `data.validate`."""
    table = read_pairs(cfg.train_file, format=cfg.train_format)
    if cfg.min_score is not None:
        if table.labels is None:
            raise InputError("min_score needs a label (or score) column")
        keep = [i for i, y in enumerate(table.labels) if y >= cfg.min_score]
        if not keep:
            raise DataError(f"no row has a label >= {cfg.min_score}")
        lines = [table.lines[i] for i in keep] if table.lines else None
        table = PairTable(table.columns, [table.rows[i] for i in keep], lines=lines)
    elif table.labels is not None:
        raise InputError(
            "the contrastive loss takes (query, positive[, negative...]) rows without labels; "
            "give min_score to keep the rows scored at least that as positives"
        )
    if len(table.columns) < 2:
        raise InputError(
            f"the contrastive loss needs a query and a positive column, got {table.columns}"
        )
    check_training_table(table, cfg.train_file, loss.data_rules)
    return table


def _read_rows(cfg: ColBERTConfig) -> PairTable | tuple:
    """The training rows of ``cfg.loss``, read and checked before the model loads."""
    if cfg.loss == "contrastive":
        return _contrastive_table(cfg, build_late_interaction_loss(cfg.loss))
    return read_distillation(cfg.train_file)


def _row_count(data: PairTable | tuple) -> int:
    return len(data) if isinstance(data, PairTable) else len(data[0])


def _batches(
    data: PairTable | tuple, model: ColBERTEncoder, batch_size: int, *, seed: int,
    shuffle: bool, rank: int = 0, world_size: int = 1,
) -> IndexedBatches:  # fmt: skip
    """The training batch source: contrastive ``{"features": [queries, positives,
    negatives...]}`` (the document columns padded to one length), distillation
    ``{"features": [queries, documents (query-major)], "scores": (B, n) float32}``."""
    if isinstance(data, PairTable):
        width = len(data.columns)

        def collate(idx: list[int], rng) -> dict[str, Any]:
            del rng
            rows = [data.rows[i] for i in idx]
            b = len(rows)
            docs = training_features(
                model, [r[j] for j in range(1, width) for r in rows], is_query=False
            )
            columns = [
                {k: v[j * b : (j + 1) * b] for k, v in docs.items()} for j in range(width - 1)
            ]
            return {
                "features": [
                    training_features(model, [r[0] for r in rows], is_query=True),
                    *columns,
                ]
            }

    else:
        queries, documents, scores = data

        def collate(idx: list[int], rng) -> dict[str, Any]:
            del rng
            flat = [d for i in idx for d in documents[i]]
            return {
                "features": [
                    training_features(model, [queries[i] for i in idx], is_query=True),
                    training_features(model, flat, is_query=False),
                ],
                "scores": torch.tensor([scores[i] for i in idx], dtype=torch.float32),
            }

    return IndexedBatches(
        list(range(_row_count(data))), batch_size, collate, shuffle=shuffle, seed=seed,
        rank=rank, world_size=world_size,
    )  # fmt: skip


def train_colbert(
    cfg: ColBERTConfig, train: TrainConfig | None = None, **train_fields: Any
) -> dict[str, Any]:
    """Train a ColBERT model with the shared `Trainer` (see the module docstring).

    ``train``: the run's `TrainConfig`; or its fields as keywords (``output_dir=...``), which
    start from ``TRAIN_DEFAULTS["colbert"]`` (the defaults of sentence-transformers' trainer,
    which PyLate trains with). ``batch_size`` is capped at the rows; ``max_steps`` comes from
    ``cfg.epochs`` when set; ``log_every`` 0 means a tenth of the run.

    Returns:
        {"train": trainer summary, "loss", "rows", "seconds", "model": the saved directory}.

    Raises:
        InputError: an unknown loss, settings out of range, data that does not fit the loss.
        DataError: unreadable or invalid rows.
    """
    return _train_colbert(cfg, train_config("colbert", train, **train_fields))


@locks_run_directory
def _train_colbert(cfg: ColBERTConfig, train: TrainConfig) -> dict[str, Any]:
    """`train_colbert` with its `TrainConfig` resolved, under the run directory's lock."""
    seed_all(train.seed)  # before the projection and the marker rows are built
    t0 = time.time()
    if cfg.loss not in LATE_INTERACTION_LOSSES:
        raise InputError(
            f"unknown late-interaction loss {cfg.loss!r}; expected one of {LATE_INTERACTION_LOSSES}"
        )
    data = _read_rows(cfg)
    start = resolve_model(cfg.model)
    if is_colbert_directory(start):
        fresh = ColBERTConfig(cfg.model, cfg.train_file)
        changed = [
            name
            for name in ("dim", "query_length", "document_length", "attend_to_expansion_tokens")
            if getattr(cfg, name) != getattr(fresh, name)
        ]
        if changed:
            raise InputError(
                f"{cfg.model} is a ColBERT directory: it trains with its own {changed} "
                "(these settings apply to a new ColBERT built from an encoder)"
            )
    else:
        start = new_colbert(
            start,
            Path(train.output_dir) / "initial",
            dim=cfg.dim,
            query_length=cfg.query_length,
            document_length=cfg.document_length,
            attend_to_expansion_tokens=cfg.attend_to_expansion_tokens,
        )
    model = load_for_training(start)
    options = (
        {"temperature": cfg.temperature}
        if cfg.loss == "contrastive"
        else {"normalize_scores": cfg.normalize_scores}
    )
    loss = build_late_interaction_loss(cfg.loss, **options, **loss_settings(model))
    dist = init_distributed(train.device)
    rows = _row_count(data)
    batch_size = min(train.batch_size, rows // dist.world_size)
    if batch_size < 1:
        raise DataError(f"{rows} rows are fewer than one batch per process")
    source = _batches(
        data, model, batch_size, seed=train.seed, shuffle=cfg.shuffle, rank=dist.rank,
        world_size=dist.world_size,
    )  # fmt: skip
    steps = max(1, int(cfg.epochs * len(source))) if cfg.epochs is not None else train.max_steps
    card = {
        "base_model": public_name(cfg.model),
        "train_data": f"{public_name(cfg.train_file)} ({rows} rows)",
        "loss": cfg.loss,
    }

    def loss_fn(m, batch):
        return loss(token_vectors(m), batch)

    def save_fn(m, directory: Path) -> None:
        save_trained(m, directory, card, source=cfg.model)

    derived: dict[str, Any] = dict(max_steps=steps, batch_size=batch_size)
    if not train.log_every:
        derived["log_every"] = max(1, min(50, steps // 10))
    config = dataclasses.replace(train, **derived)
    card["hyperparameters"] = training_hyperparameters(config, epochs=cfg.epochs)
    if dist.is_main:
        write_run_record(
            train.output_dir,
            {"colbert": cfg, "train": config},
            [resolve_pair_file(cfg.train_file)[0], resolve_model(cfg.model)],
            train.seed,
        )
    summary = Trainer(
        model, loss_fn, source, config, None, dist=dist, save_fn=save_fn,
        save_fn_holds_weights=True,
    ).train()  # fmt: skip
    result: dict[str, Any] = {"train": summary, "loss": cfg.loss, "rows": rows}
    if not dist.is_main:
        return result
    out = Path(train.output_dir)
    result["model"] = str(out / "model")
    result["seconds"] = time.time() - t0
    write_text_atomic(out / "final_metrics.json", json.dumps(result, indent=2, default=str))
    return result
