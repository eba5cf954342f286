"""Objectives of embedding models: each equal to the sentence-transformers loss of the same
name (`tests/training/test_embedding_losses.py` checks the first training steps against it).

A batch is ``{"features": [column 0, column 1, ...], "labels": (B,) float (optional)}``, each
column the tokenizer's tensors for B texts; ``encode(column) -> (B, D)`` is the model (a
`pipelines.embedding.embed.SentenceEmbedder`, or its DDP wrapper). Every loss is a callable
``loss(encode, batch) -> (loss, parts)`` built on ``from_embeddings(embeddings, labels)``.

- `MultipleNegativesRanking` (MNRL, in-batch negatives; van den Oord et al. 2018 InfoNCE;
  Henderson et al. 2017): columns (anchor, positive, hard negatives...); for anchor i the
  candidates are every positive and hard negative of the batch, cross-entropy over
  ``scale · cos`` with the own positive as target. ``symmetric``: plus the positive → anchors
  direction, the two log-partitions averaged (sentence-transformers' ``directions=(
  "query_to_doc", "doc_to_query"), partition_mode="per_direction"``).
- `CoSENT` (Su 2022): log(1 + Σ_{y_i < y_j} exp(scale·(cos_i − cos_j))) over the batch's pairs.
- `CosineSimilarity`: mean squared error between cos(u, v) and the label.
- `Matryoshka` (Kusupati et al. 2022): Σ_d w_d · base(embeddings truncated to d dims and
  L2-normalised).
- `GradCache` (Gao et al. 2021, "Scaling Deep Contrastive Learning Batch Size under Memory
  Limited Setup"): any of these over a large batch in mini-batches: embed every mini-batch
  without a graph, take the loss's gradient with respect to the embeddings, then in backward
  re-embed each mini-batch (same dropout: the RNG state is replayed) and backpropagate its
  slice of that gradient. The same gradients as the uncached loss; memory of one mini-batch.
  ``GradCache(MultipleNegativesRanking())`` is sentence-transformers' CachedMNRL.
- SimCSE unsupervised (Gao, Yao & Chen 2021): MNRL whose anchor and positive are the same
  sentence, embedded twice, so the two dropout masks are the augmentation (`simcse_columns`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ..data.validate import DataRules
from ..errors import InputError

__all__ = [
    "LOSSES",
    "CoSENT",
    "CosineSimilarity",
    "EmbeddingLoss",
    "GradCache",
    "Matryoshka",
    "MultipleNegativesRanking",
    "build_loss",
    "cos_matrix",
    "embed_columns",
    "simcse_columns",
]

Encode = Callable[..., Tensor]
Features = dict[str, Tensor]


def cos_matrix(a: Tensor, b: Tensor) -> Tensor:
    """(N, D), (M, D) → (N, M) cosine similarities."""
    return F.normalize(a, p=2, dim=-1) @ F.normalize(b, p=2, dim=-1).T


def embed_columns(encode: Encode, features: Sequence[Features]) -> list[Tensor]:
    """One forward pass per column (so each column draws its own dropout masks)."""
    return [encode(**f) for f in features]


def simcse_columns(texts: Sequence[str]) -> list[tuple[str, str]]:
    """Unsupervised SimCSE rows: each text as its own positive (anchor, positive)."""
    return [(t, t) for t in texts]


class EmbeddingLoss:
    """Base: ``__call__(encode, batch)`` embeds the columns and calls `from_embeddings`.

    Attributes:
        name: the loss's name in `LOSSES` (and the model card).
        needs_labels: the batch must carry ``labels``.
        min_columns / max_columns: text columns the loss takes (None: any number).
        in_batch_negatives, label_range, ordered_labels: what the loss needs of its rows
            (`data_rules`).
    """

    name = ""
    needs_labels = False
    min_columns, max_columns = 2, 2
    in_batch_negatives = False
    label_range: tuple[float, float] | None = None
    ordered_labels = False

    @property
    def data_rules(self) -> DataRules:
        """What this loss needs of its training rows (`data.validate.check_training_table`)."""
        return DataRules.of(self)

    def _rules_of(self, base: EmbeddingLoss) -> None:
        """A wrapper's rules are its base loss's."""
        self.in_batch_negatives, self.label_range = base.in_batch_negatives, base.label_range
        self.ordered_labels = base.ordered_labels

    def from_embeddings(self, embeddings: list[Tensor], labels: Tensor | None) -> Tensor:
        """The loss of one batch's column embeddings (each (B, D))."""
        raise NotImplementedError

    def check_columns(self, n: int) -> None:
        """Raise ValueError unless ``n`` text columns fit this loss."""
        if n < self.min_columns or (self.max_columns is not None and n > self.max_columns):
            most = "any number of" if self.max_columns is None else str(self.max_columns)
            raise InputError(
                f"the {self.name} loss takes {self.min_columns} to {most} text columns, "
                f"the data has {n}"
            )

    def __call__(self, encode: Encode, batch: dict[str, Any]) -> tuple[Tensor, dict[str, float]]:
        """See `EmbeddingLoss`."""
        labels = batch.get("labels")
        if self.needs_labels and labels is None:
            raise InputError(f"the {self.name} loss needs a label (or score) column")
        return self.from_embeddings(embed_columns(encode, batch["features"]), labels), {}


class MultipleNegativesRanking(EmbeddingLoss):
    """In-batch negatives with optional hard negatives (see the module docstring).

    Args:
        scale: multiplies the cosines (1 / temperature; 20 = temperature 0.05).
        symmetric: add the positive → anchors direction (per-direction partitions, averaged).
    """

    name = "mnrl"
    max_columns = None
    in_batch_negatives = True

    def __init__(self, scale: float = 20.0, symmetric: bool = False) -> None:
        if not scale > 0:
            raise InputError(f"scale must be > 0, got {scale}")
        self.scale, self.symmetric = scale, symmetric

    def from_embeddings(self, embeddings: list[Tensor], labels: Tensor | None) -> Tensor:
        """See `EmbeddingLoss`."""
        anchors, positives = embeddings[0], embeddings[1]
        candidates = torch.cat(embeddings[1:], dim=0)  # (B·(1+negatives), D)
        rows = torch.arange(anchors.shape[0], device=anchors.device)
        forward = cos_matrix(anchors, candidates) * self.scale  # (B, B·(1+n))
        target = forward[rows, rows]  # own positive
        log_z = torch.logsumexp(forward, dim=1)
        if self.symmetric:  # positive j → every anchor
            backward = cos_matrix(positives, anchors) * self.scale  # (B, B)
            log_z = (log_z + torch.logsumexp(backward, dim=1)) / 2
        return (log_z - target).mean()


class CoSENT(EmbeddingLoss):
    """CoSENT over (sentence1, sentence2) pairs with a similarity label (see the module
    docstring); only the order of the labels matters."""

    name = "cosent"
    needs_labels = True
    ordered_labels = True

    def __init__(self, scale: float = 20.0) -> None:
        self.scale = scale

    def from_embeddings(self, embeddings: list[Tensor], labels: Tensor | None) -> Tensor:
        """See `EmbeddingLoss`."""
        assert labels is not None
        s = F.cosine_similarity(embeddings[0], embeddings[1], dim=-1).float() * self.scale
        y = labels.view(-1).float()
        diff = s[:, None] - s[None, :]  # s_i − s_j
        diff = diff.masked_fill(~(y[:, None] < y[None, :]), float("-inf"))
        return torch.logsumexp(torch.cat([diff.new_zeros(1), diff.view(-1)]), dim=0)


class CosineSimilarity(EmbeddingLoss):
    """Mean squared error between cos(u, v) and the label (sentence-transformers'
    CosineSimilarityLoss)."""

    name = "cosine"
    needs_labels = True
    label_range = (-1.0, 1.0)  # what a cosine can reach

    def from_embeddings(self, embeddings: list[Tensor], labels: Tensor | None) -> Tensor:
        """See `EmbeddingLoss`."""
        assert labels is not None
        cos = F.cosine_similarity(embeddings[0], embeddings[1], dim=-1)
        return F.mse_loss(cos, labels.float().view(-1))


class Matryoshka(EmbeddingLoss):
    """``base`` over several leading-dimension truncations (each re-normalised), weighted.

    Args:
        base: the loss applied at every dimension.
        dims: the output dimensions (e.g. 384, 256, 128, 64); each must be ≤ the model's.
        weights: one weight per dimension (default 1 each).
    """

    name = "matryoshka"

    def __init__(
        self, base: EmbeddingLoss, dims: Sequence[int], weights: Sequence[float] | None = None
    ) -> None:
        if not dims or any(d < 1 for d in dims):
            raise InputError(f"matryoshka dims must be positive, got {list(dims)}")
        weights = [1.0] * len(dims) if weights is None else list(weights)
        if len(weights) != len(dims):
            raise InputError("give one matryoshka weight per dimension")
        self.base, self.dims, self.weights = base, tuple(dims), tuple(weights)
        self.needs_labels = base.needs_labels
        self.min_columns, self.max_columns = base.min_columns, base.max_columns
        self._rules_of(base)

    def from_embeddings(self, embeddings: list[Tensor], labels: Tensor | None) -> Tensor:
        """See `EmbeddingLoss`."""
        width = embeddings[0].shape[-1]
        if max(self.dims) > width:
            raise InputError(f"matryoshka dims {list(self.dims)} exceed the model's {width}")
        total = embeddings[0].new_zeros(())
        for d, w in zip(self.dims, self.weights):
            cut = [F.normalize(e[..., :d], p=2, dim=-1) for e in embeddings]
            total = total + w * self.base.from_embeddings(cut, labels)
        return total


class _RngState:
    """The CPU (and the device's CUDA) RNG state at one point, to replay dropout."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.cpu = torch.get_rng_state()
        self.cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None

    @contextlib.contextmanager
    def replay(self) -> Iterator[None]:
        devices = [self.device] if self.cuda is not None else []
        with torch.random.fork_rng(devices=devices):
            torch.set_rng_state(self.cpu)
            if self.cuda is not None:
                torch.cuda.set_rng_state(self.cuda, self.device)
            yield


def _rows(features: Features, start: int, stop: int) -> Features:
    return {k: v[start:stop] for k, v in features.items()}


class GradCache(EmbeddingLoss):
    """``base`` computed over mini-batches of ``mini_batch_size`` rows with cached embedding
    gradients (see the module docstring): the loss's value and gradients are those of
    ``base`` on the whole batch, the activation memory that of one mini-batch.

    The returned loss is a leaf whose backward hook re-embeds each mini-batch and
    backpropagates into the model (so the `Trainer`'s ``loss.backward()`` and gradient scaler
    work unchanged); the autocast state of the call is restored there. Not for DDP/FSDP
    (one backward would run several gradient reductions).
    """

    def __init__(self, base: EmbeddingLoss, mini_batch_size: int = 32) -> None:
        if mini_batch_size < 1:
            raise InputError(f"mini_batch_size must be >= 1, got {mini_batch_size}")
        self.base, self.mini_batch_size = base, mini_batch_size
        self.name = f"cached_{base.name}"
        self.needs_labels = base.needs_labels
        self.min_columns, self.max_columns = base.min_columns, base.max_columns
        self._rules_of(base)

    def from_embeddings(self, embeddings: list[Tensor], labels: Tensor | None) -> Tensor:
        """See `EmbeddingLoss`."""
        return self.base.from_embeddings(embeddings, labels)

    def __call__(self, encode: Encode, batch: dict[str, Any]) -> tuple[Tensor, dict[str, float]]:
        """See `EmbeddingLoss`."""
        labels = batch.get("labels")
        if self.needs_labels and labels is None:
            raise InputError(f"the {self.name} loss needs a label (or score) column")
        step = self.mini_batch_size
        chunks = [
            [_rows(f, i, i + step) for i in range(0, len(next(iter(f.values()))), step)]
            for f in batch["features"]
        ]
        device = next(iter(batch["features"][0].values())).device
        kind = device.type
        cast = (torch.is_autocast_enabled(kind), torch.get_autocast_dtype(kind))
        states, reps = [], []
        with torch.no_grad():
            for column in chunks:
                states.append([])
                reps.append([])
                for c in column:
                    states[-1].append(_RngState(device))
                    reps[-1].append(encode(**c).detach().requires_grad_())
        with torch.enable_grad():
            loss = self.base.from_embeddings([torch.cat(col) for col in reps], labels)
            flat = [r for col in reps for r in col]
            grads = torch.autograd.grad(loss, flat)
        cached = iter(grads)
        plan = [
            (c, s, next(cached)) for col, scol in zip(chunks, states) for c, s in zip(col, scol)
        ]

        def backward_hook(grad_output: Tensor) -> Tensor:
            with torch.enable_grad(), torch.autocast(kind, dtype=cast[1], enabled=cast[0]):
                for features, state, grad in plan:
                    with state.replay():
                        out = encode(**features)
                    out.backward(grad.to(out.dtype) * grad_output.to(out.dtype))
            return grad_output

        out = loss.detach().requires_grad_()
        out.register_hook(backward_hook)
        return out, {}


#: The losses by name: ``name -> (factory(scale, symmetric) -> loss, needs labels)``.
LOSSES = ("mnrl", "mnrl_symmetric", "cached_mnrl", "cosent", "cosine", "simcse")


def build_loss(
    name: str,
    *,
    scale: float = 20.0,
    mini_batch_size: int = 32,
    matryoshka_dims: Sequence[int] = (),
    matryoshka_weights: Sequence[float] | None = None,
) -> EmbeddingLoss:
    """The loss called ``name`` (one of `LOSSES`), wrapped in `Matryoshka` when
    ``matryoshka_dims`` are given.

    Raises:
        ValueError: an unknown name.
    """
    base: EmbeddingLoss
    if name in ("mnrl", "simcse"):
        base = MultipleNegativesRanking(scale)
    elif name == "mnrl_symmetric":
        base = MultipleNegativesRanking(scale, symmetric=True)
    elif name == "cached_mnrl":
        base = MultipleNegativesRanking(scale)
    elif name == "cosent":
        base = CoSENT(scale)
    elif name == "cosine":
        base = CosineSimilarity()
    else:
        raise InputError(f"unknown embedding loss {name!r}; expected one of {LOSSES}")
    base.name = name
    loss = Matryoshka(base, matryoshka_dims, matryoshka_weights) if matryoshka_dims else base
    if name == "cached_mnrl":
        loss = GradCache(loss, mini_batch_size)
        loss.name = name
    return loss
