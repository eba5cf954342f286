"""Objectives of rerankers (cross-encoders: query and passage read as one input, one relevance
logit per pair), each equal to the sentence-transformers 6 cross-encoder loss of the same name
(`tests/training/test_rerank_losses.py` checks the first training steps against it).

Every loss builds its own batches from a pair table (`batches`) and is a callable
``loss(model, batch) -> (loss, parts)``; ``model(**features).logits`` is (pairs, 1).

- `BinaryCrossEntropy` (``bce``; ``BinaryCrossEntropyLoss``): rows (query, passage, label in
  [0, 1]); binary cross-entropy of the logit against the label.
- `ListNet` (``listnet``; ``ListNetLoss``; Cao et al. 2007, "Learning to Rank: From Pairwise
  Approach to Listwise Approach"): rows (query, passage, label) grouped by query (in order of
  first appearance, each group's passages in file order); a batch is ``batch_size`` queries
  with all their passages. Per query, the cross-entropy between softmax(labels) and
  softmax(logits) over its passages (top-one probabilities); the mean over queries. Labels
  may be any real relevance grades.
- `MultipleNegativesRanking` (``mnrl``; the cross-encoder ``MultipleNegativesRankingLoss``;
  Henderson et al. 2017): rows (query, positive[, hard negatives...]) without labels; each
  query is scored with its positive, with ``num_negatives`` passages of the *other* rows of the
  batch (their positives and hard negatives; all of them when there are no more than
  ``num_negatives``, else a uniform sample without replacement drawn at collation from the
  batch's seeded generator) and with its own hard negatives; cross-entropy over
  ``scale · sigmoid(logits)`` with the positive as the target.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ..data.batching import IndexedBatches
from ..data.pairs import PairTable
from ..data.validate import DataRules
from ..errors import InputError

__all__ = [
    "RERANK_LOSSES",
    "BinaryCrossEntropy",
    "ListNet",
    "MultipleNegativesRanking",
    "RerankLoss",
    "build_rerank_loss",
    "pair_scores",
]

RERANK_LOSSES = ("bce", "listnet", "mnrl")
#: The tokenizer outputs a cross-encoder reads.
MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")

Tokenize = Callable[[list[str], list[str]], dict[str, Tensor]]


def pair_scores(model: Any, features: dict[str, Tensor]) -> Tensor:
    """(N,) float32 logits of a one-output cross-encoder for N tokenized pairs."""
    return model(**{k: v for k, v in features.items() if k in MODEL_INPUTS}).logits.view(-1)


class RerankLoss:
    """Base: `check` validates a table, `batches` makes the batch source, ``__call__`` the loss.

    Attributes:
        name: the loss's name in `RERANK_LOSSES`.
        needs_labels: the table must have a label (or score) column.
    """

    name = ""
    needs_labels = True
    in_batch_negatives = False
    label_range: tuple[float, float] | None = None
    query_groups = False

    @property
    def data_rules(self) -> DataRules:
        """What this loss needs of its training rows (`data.validate.check_training_table`)."""
        return DataRules.of(self)

    def check(self, table: PairTable, spec: Any) -> None:
        """Raise InputError unless ``table`` (read from ``spec``) fits this loss."""
        if len(table.columns) != 2 or table.labels is None:
            raise InputError(
                f"{spec}: the {self.name} reranker loss trains on two text columns (query, "
                "passage) and a label (or score) column"
            )

    def units(self, table: PairTable) -> int:
        """How many items one epoch's batches are cut from (rows; `ListNet`: queries)."""
        return len(table)

    def collate(
        self, table: PairTable, idx: list[int], rng: np.random.Generator, tokenize: Tokenize
    ) -> dict[str, Any]:
        """The batch of items ``idx`` (``rng``: the batch's seeded generator)."""
        raise NotImplementedError

    def batches(
        self,
        table: PairTable,
        tokenize: Tokenize,
        batch_size: int,
        *,
        shuffle: bool = True,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
    ) -> IndexedBatches:
        """The training batch source over `units` (seeded per-epoch order, sharded by rank);
        ``tokenize(queries, passages)`` encodes pairs."""
        self.prepare(table)

        def collate(idx: list[int], rng: np.random.Generator) -> dict[str, Any]:
            return self.collate(table, idx, rng, tokenize)

        items = list(range(self.units(table)))
        return IndexedBatches(
            items, batch_size, collate, shuffle=shuffle, seed=seed, rank=rank,
            world_size=world_size,
        )  # fmt: skip

    def prepare(self, table: PairTable) -> None:
        """Index ``table`` before `collate` reads it (`ListNet`: its query groups)."""

    def __call__(self, model: Any, batch: dict[str, Any]) -> tuple[Tensor, dict[str, float]]:
        """The batch's loss (a scalar tensor) and no parts."""
        raise NotImplementedError


class BinaryCrossEntropy(RerankLoss):
    """See the module docstring."""

    name = "bce"
    label_range = (0.0, 1.0)  # targets are probabilities

    def check(self, table: PairTable, spec: Any) -> None:
        """Two text columns and labels in [0, 1]."""
        super().check(table, spec)
        bad = [y for y in table.labels if not 0.0 <= y <= 1.0]
        if bad:
            raise InputError(f"{spec}: bce labels must lie in [0, 1] (found {bad[0]})")

    def collate(self, table, idx, rng, tokenize):
        """``{"features": pairs, "labels": (B,) float32}``."""
        del rng
        rows = [table.rows[i] for i in idx]
        return {
            "features": tokenize([r[0] for r in rows], [r[1] for r in rows]),
            "labels": torch.tensor([table.labels[i] for i in idx], dtype=torch.float32),
        }

    def __call__(self, model, batch):
        """See the module docstring."""
        logits = pair_scores(model, batch["features"]).float()
        return F.binary_cross_entropy_with_logits(logits, batch["labels"].float()), {}


class ListNet(RerankLoss):
    """See the module docstring (padding as sentence-transformers': logits −1e16, labels
    −inf, so a padded slot has target probability 0)."""

    name = "listnet"
    query_groups = True

    def __init__(self) -> None:
        self.groups: list[list[int]] = []

    def prepare(self, table: PairTable) -> None:
        """Group the rows by query: ``groups[q]`` = row numbers of query q's passages."""
        groups: dict[str, list[int]] = {}
        for i, row in enumerate(table.rows):
            groups.setdefault(row[0], []).append(i)
        self.groups = list(groups.values())

    def units(self, table: PairTable) -> int:
        """The number of distinct queries."""
        return len({row[0] for row in table.rows})

    def collate(self, table, idx, rng, tokenize):
        """``{"features": every (query, passage) pair of the batch's queries, "labels": (P,),
        "docs_per_query": [n_1, ..., n_B]}``."""
        del rng
        groups = [self.groups[i] for i in idx]
        rows = [table.rows[j] for g in groups for j in g]
        return {
            "features": tokenize([r[0] for r in rows], [r[1] for r in rows]),
            "labels": torch.tensor([table.labels[j] for g in groups for j in g]),
            "docs_per_query": [len(g) for g in groups],
        }

    def __call__(self, model, batch):
        """See the module docstring."""
        logits = pair_scores(model, batch["features"]).float()
        counts = batch["docs_per_query"]
        b, width = len(counts), max(counts)
        query = torch.repeat_interleave(torch.arange(b), torch.tensor(counts)).to(logits.device)
        slot = torch.cat([torch.arange(n) for n in counts]).to(logits.device)
        scores = logits.new_full((b, width), -1e16).index_put((query, slot), logits)
        labels = logits.new_full((b, width), float("-inf"))
        labels = labels.index_put((query, slot), batch["labels"].to(logits).float())
        return F.cross_entropy(scores, labels.softmax(dim=1)), {}


class MultipleNegativesRanking(RerankLoss):
    """See the module docstring.

    Args:
        num_negatives: in-batch negatives per query (None: all of the batch's other passages).
        scale: multiplies the sigmoid of the logits (sentence-transformers' default 10).
    """

    name = "mnrl"
    needs_labels = False
    in_batch_negatives = True

    def __init__(self, num_negatives: int | None = 4, scale: float = 10.0) -> None:
        if num_negatives is not None and num_negatives < 1:
            raise InputError(f"num_negatives must be >= 1 or None, got {num_negatives}")
        if not scale > 0:
            raise InputError(f"scale must be > 0, got {scale}")
        self.num_negatives, self.scale = num_negatives, scale

    def check(self, table: PairTable, spec: Any) -> None:
        """At least (query, positive) text columns; labels are ignored."""
        if len(table.columns) < 2:
            raise InputError(
                f"{spec}: the mnrl reranker loss takes (query, positive[, negative...]) columns"
            )

    def collate(self, table, idx, rng, tokenize):
        """``{"features": every scored pair, query-major: (positive, in-batch negatives...,
        hard negatives...) of query 0, then query 1, ...; "candidates": k}`` (k pairs each)."""
        rows = [table.rows[i] for i in idx]
        b, cols = len(rows), len(rows[0]) - 1
        flat = [r[1 + c] for c in range(cols) for r in rows]  # column-major, as theirs
        others = [[c * b + j for c in range(cols) for j in range(b) if j != i] for i in range(b)]
        if self.num_negatives is not None and self.num_negatives < len(others[0]):
            others = [sorted(rng.choice(o, self.num_negatives, replace=False)) for o in others]
        queries, passages = [], []
        for i, r in enumerate(rows):
            cands = [r[1], *(flat[j] for j in others[i]), *r[2:]]
            queries += [r[0]] * len(cands)
            passages += cands
        return {"features": tokenize(queries, passages), "candidates": len(passages) // b}

    def __call__(self, model, batch):
        """See the module docstring."""
        logits = pair_scores(model, batch["features"]).float().view(-1, batch["candidates"])
        scores = torch.sigmoid(logits) * self.scale
        target = torch.zeros(scores.shape[0], dtype=torch.long, device=scores.device)
        return F.cross_entropy(scores, target), {}


def build_rerank_loss(
    name: str, *, num_negatives: int | None = 4, scale: float = 10.0
) -> RerankLoss:
    """The reranker loss called ``name`` (one of `RERANK_LOSSES`).

    Raises:
        InputError: an unknown name, or a bad ``num_negatives`` / ``scale`` for ``mnrl``.
    """
    if name == "bce":
        return BinaryCrossEntropy()
    if name == "listnet":
        return ListNet()
    if name == "mnrl":
        return MultipleNegativesRanking(num_negatives, scale)
    raise InputError(f"unknown rerank loss {name!r}; expected one of {RERANK_LOSSES}")
