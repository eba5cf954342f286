"""Objectives of late-interaction (ColBERT) models, each equal to PyLate's loss of the same name
in value and gradient (`tests/training/test_colbert_train.py` checks both on a tiny random
PyLate model, and the first training steps against PyLate's loss on PyLate's model).

The model is a callable ``encode(features, is_query) -> (B, T, D)``: the token vectors of a
tokenized column (``features``: ``input_ids``, ``attention_mask`` (B, T), ...) of queries or
documents; every loss L2-normalises them (a no-op on vectors already of unit length), so each
MaxSim term is a cosine (Khattab & Zaharia 2020, §3.1).

Which token vectors count (PyLate's rule, the one every loss here applies):

- a query's tokens all count when the model expands queries with [MASK] tokens
  (``query_expansion``, ColBERT §3.2: the [MASK] padding are the query's extra tokens);
  otherwise only those of its attention mask;
- a document's tokens count when they are in its attention mask and their id is not in the
  skiplist (punctuation; ColBERT §3.2);
- a document token that does not count has similarity 0 with every query token (PyLate
  multiplies the similarities by the mask before the maximum, `_masked_documents`), so a query
  token whose cosines with a padded document are all negative scores 0 against it.

Scores are `heads.late_interaction.maxsim` (ColBERT Eq. 3, the sum over query tokens).

- `Contrastive` (ColBERT §3.4, with in-batch negatives as PyLate trains): columns (query,
  positive, hard negatives...); query i's candidates are the documents of every column of every
  row, ordered row-major (row j's k-th document at candidate j·N + k, N = the document columns),
  its own positive the target; cross-entropy over ``scores / temperature``, averaged over the
  queries (``size_average``) or summed.
- `Distillation` (Hofstätter et al. 2020 "Improving Efficient Neural Ranking Models with
  Cross-Architecture Knowledge Distillation", the KL form of PyLate): each query's n documents,
  the student's MaxSim scores min-max normalised over them (``normalize_scores``:
  (s − min) / (max − min + 1e-8)), then KL(teacher ‖ student) of the two softmax
  distributions, ``Σ p_t (log p_t − log p_s)``, averaged over the queries (``size_average``) or
  summed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ..data.validate import DataRules
from ..errors import InputError
from ..heads.late_interaction import maxsim

__all__ = [
    "LATE_INTERACTION_LOSSES",
    "Contrastive",
    "Distillation",
    "LateInteractionLoss",
    "build_late_interaction_loss",
    "document_mask",
]

Encode = Callable[..., Tensor]
Features = dict[str, Tensor]

#: The losses by name (``bertfamily finetune --task colbert --loss NAME``).
LATE_INTERACTION_LOSSES = ("contrastive", "distillation")


def document_mask(features: Features, skiplist_ids: Sequence[int]) -> Tensor:
    """(B, T) bool: the document tokens that count, the attention mask without the skiplist's
    ids.

    Args:
        features: the tokenized column: ``input_ids`` and ``attention_mask``, (B, T).
        skiplist_ids: token ids that never count (PyLate: the punctuation characters' ids).
    """
    keep = features["attention_mask"].to(torch.bool)
    if skiplist_ids:
        ids = torch.as_tensor(list(skiplist_ids), dtype=features["input_ids"].dtype)
        keep = keep & ~torch.isin(features["input_ids"], ids.to(features["input_ids"].device))
    return keep


def _masked_documents(vectors: Tensor, mask: Tensor) -> Tensor:
    """Token vectors (..., T, D) with the tokens that do not count set to 0: their dot product
    with any query token is then 0, PyLate's rule (see the module docstring), and no gradient
    reaches them."""
    return vectors * mask.unsqueeze(-1).to(vectors.dtype)


class LateInteractionLoss:
    """Base of the late-interaction losses: ``__call__(encode, batch) -> (loss, parts)``.

    Args:
        skiplist_ids: document token ids that never count (the model's skiplist).
        query_expansion: every query token counts ([MASK] expansion); False: only those of the
            query's attention mask.

    Attributes:
        name: the loss's name in `LATE_INTERACTION_LOSSES`.
        needs_scores: the batch must carry the teacher's ``scores``.
        in_batch_negatives: the other rows' documents are each query's negatives.
    """

    name = ""
    needs_scores = False
    in_batch_negatives = False

    def __init__(self, *, skiplist_ids: Sequence[int] = (), query_expansion: bool = True) -> None:
        self.skiplist_ids = tuple(int(i) for i in skiplist_ids)
        self.query_expansion = bool(query_expansion)

    @property
    def data_rules(self) -> DataRules:
        """What this loss needs of its training rows (`data.validate.check_training_table`)."""
        return DataRules.of(self)

    def vectors(self, encode: Encode, features: Features, is_query: bool) -> Tensor:
        """(B, T, D) L2-normalised token vectors of one tokenized column."""
        out = encode(features, is_query)
        if out.dim() != 3:
            raise InputError(
                f"the model must return (B, T, D) token vectors, got {tuple(out.shape)}"
            )
        return F.normalize(out, p=2, dim=-1)

    def query_mask(self, features: Features) -> Tensor | None:
        """(B, T) bool, the query tokens that count; None: all (query expansion)."""
        return None if self.query_expansion else features["attention_mask"].to(torch.bool)


class Contrastive(LateInteractionLoss):
    """Cross-entropy of each query's own positive among every document of the batch (see the
    module docstring); PyLate's ``losses.Contrastive``.

    Args:
        temperature: the scores are divided by it (> 0; PyLate's default 1).
        size_average: the mean over the queries (True) or their sum.
        skiplist_ids, query_expansion: see `LateInteractionLoss`.

    Batch: ``{"features": [queries, positives, negatives...]}``, each a tokenized column of B
    rows; the document columns padded to one length T.

    Raises:
        InputError: a temperature ≤ 0, fewer than two columns, document columns of different
            lengths or row counts.
    """

    name = "contrastive"
    in_batch_negatives = True

    def __init__(
        self,
        *,
        temperature: float = 1.0,
        size_average: bool = True,
        skiplist_ids: Sequence[int] = (),
        query_expansion: bool = True,
    ) -> None:
        super().__init__(skiplist_ids=skiplist_ids, query_expansion=query_expansion)
        if not temperature > 0:
            raise InputError(f"temperature must be > 0, got {temperature}")
        self.temperature, self.size_average = float(temperature), bool(size_average)

    def __call__(self, encode: Encode, batch: dict[str, Any]) -> tuple[Tensor, dict[str, float]]:
        """The loss of one batch (a 0-dim tensor with gradients) and no parts."""
        columns = batch["features"]
        if len(columns) < 2:
            raise InputError(
                f"the contrastive loss needs a query and at least one document column, "
                f"got {len(columns)} column(s)"
            )
        rows = columns[0]["input_ids"].shape[0]
        shapes = {tuple(c["input_ids"].shape) for c in columns[1:]}
        if len(shapes) != 1 or next(iter(shapes))[0] != rows:
            raise InputError(
                f"the document columns must have the queries' {rows} rows and one padded "
                f"length, got shapes {sorted(shapes)}"
            )
        queries = self.vectors(encode, columns[0], True)  # (B, Tq, D)
        docs = [self.vectors(encode, c, False) for c in columns[1:]]
        docs = torch.stack(docs, dim=1)  # (B, N, T, D)
        masks = torch.stack([document_mask(c, self.skiplist_ids) for c in columns[1:]], dim=1)
        n = docs.shape[1]
        flat = _masked_documents(docs, masks).flatten(0, 1)  # (B·N, T, D), row-major
        scores = maxsim(queries, flat, self.query_mask(columns[0]))  # (B, B·N)
        target = torch.arange(rows, device=scores.device) * n
        loss = F.cross_entropy(
            scores / self.temperature, target, reduction="mean" if self.size_average else "sum"
        )
        return loss, {}


class Distillation(LateInteractionLoss):
    """KL divergence from the teacher's scores to the student's MaxSim scores over each query's
    documents (see the module docstring); PyLate's ``losses.Distillation``.

    Args:
        normalize_scores: min-max normalise the student's scores per query first (PyLate's
            default True).
        size_average: the mean over the queries ("batchmean", True) or their sum.
        skiplist_ids, query_expansion: see `LateInteractionLoss`.

    Batch: ``{"features": [queries (B rows), documents (B·n rows, query-major: query i's
    documents are rows i·n … i·n + n − 1)], "scores": (B, n) float}``, the teacher's scores
    (logits: any real numbers; a softmax makes them a distribution).

    Raises:
        InputError: no ``scores``, scores that are not (B, n) with B·n documents, non-finite
            scores.
    """

    name = "distillation"
    needs_scores = True

    def __init__(
        self,
        *,
        normalize_scores: bool = True,
        size_average: bool = True,
        skiplist_ids: Sequence[int] = (),
        query_expansion: bool = True,
    ) -> None:
        super().__init__(skiplist_ids=skiplist_ids, query_expansion=query_expansion)
        self.normalize_scores, self.size_average = bool(normalize_scores), bool(size_average)

    def student_scores(self, encode: Encode, batch: dict[str, Any]) -> Tensor:
        """(B, n) MaxSim scores of each query against its own n documents (not normalised)."""
        q_feats, d_feats = batch["features"]
        teacher = batch.get("scores")
        if teacher is None:
            raise InputError("the distillation loss needs the teacher's scores")
        rows = q_feats["input_ids"].shape[0]
        if teacher.dim() != 2 or teacher.shape[0] != rows:
            raise InputError(
                f"teacher scores must be (queries, documents per query) = ({rows}, n), got "
                f"{tuple(teacher.shape)}"
            )
        if not torch.isfinite(teacher).all():
            raise InputError("teacher scores must be finite numbers")
        n = teacher.shape[1]
        if d_feats["input_ids"].shape[0] != rows * n:
            raise InputError(
                f"{rows} queries with {n} scores each need {rows * n} documents, got "
                f"{d_feats['input_ids'].shape[0]}"
            )
        queries = self.vectors(encode, q_feats, True)  # (B, Tq, D)
        docs = _masked_documents(
            self.vectors(encode, d_feats, False), document_mask(d_feats, self.skiplist_ids)
        ).unflatten(0, (rows, n))  # (B, n, Td, D)
        q_mask = self.query_mask(q_feats)
        return torch.cat(
            [
                maxsim(queries[i : i + 1], docs[i], None if q_mask is None else q_mask[i : i + 1])
                for i in range(rows)
            ]
        )  # (B, n)

    def __call__(self, encode: Encode, batch: dict[str, Any]) -> tuple[Tensor, dict[str, float]]:
        """The loss of one batch (a 0-dim tensor with gradients) and no parts."""
        if len(batch["features"]) != 2:
            raise InputError(
                "the distillation loss takes two columns (queries, documents), got "
                f"{len(batch['features'])}"
            )
        scores = self.student_scores(encode, batch)
        teacher = batch["scores"].to(scores)
        if self.normalize_scores:
            low = scores.min(dim=1, keepdim=True).values
            high = scores.max(dim=1, keepdim=True).values
            scores = (scores - low) / (high - low + 1e-8)
        loss = F.kl_div(
            F.log_softmax(scores, dim=-1),
            F.log_softmax(teacher, dim=-1),
            reduction="batchmean" if self.size_average else "sum",
            log_target=True,
        )
        return loss, {}


def build_late_interaction_loss(name: str, **kwargs: Any) -> LateInteractionLoss:
    """The loss called ``name`` (one of `LATE_INTERACTION_LOSSES`) with its keyword arguments.

    Raises:
        InputError: an unknown name.
        TypeError: a keyword the loss does not take.
    """
    classes = {"contrastive": Contrastive, "distillation": Distillation}
    if name not in classes:
        raise InputError(
            f"unknown late-interaction loss {name!r}; expected one of {LATE_INTERACTION_LOSSES}"
        )
    return classes[name](**kwargs)
