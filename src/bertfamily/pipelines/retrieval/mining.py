"""Hard-negative mining (sentence-transformers' ``mine_hard_negatives`` with
``output_format="n-tuple"`` and ``sampling_strategy="top"``, in our own terms): for each
(anchor, positive) row, the texts of a corpus most similar to the anchor that are not one of
its positives, under margins that guard against false negatives and from a rank range,
written as (anchor, positive, negative_1..n) rows for the MNRL losses.

The candidates are searched in the vector index (`pipelines.index.VectorIndex`, FAISS exact
inner product of L2-normalised rows = cosine): by default a flat index built in memory over the
corpus (default: every positive of the data; a given corpus gets the positives added, as
in-batch negatives would be), or an index built beforehand (`bertfamily index build`), whose
rows are then the corpus as they are. Without faiss installed (the ``index`` extra) the same
exact search runs in numpy (or ask for it: ``search="numpy"``; the tests check both against
each other and against sentence-transformers).

For anchor a with positives P(a) (every row with that anchor) and s(·,·) the cosine:

1. the ``range_max + max_a |P(a)|`` candidates most similar to a are retrieved;
2. c is skipped when it is a positive of a (in a built index: a row whose text is one);
3. ``max_score`` / ``min_score``: c is skipped when s(a, c) > max_score or < min_score;
4. ``absolute_margin``: c is kept only when s(a, c) ≤ min_p s(a, p) − absolute_margin;
   ``relative_margin``: only when s(a, c) ≤ min_p s(a, p) − |min_p s(a, p)| · relative_margin
   (the least similar positive of a: the safe side, as sentence-transformers);
5. of the survivors, the best ``range_max`` in order of similarity, of which the first
   ``range_min`` are skipped (the very top are often unlabelled positives);
6. the first ``num_negatives`` left become the negatives of every row of a; a row with fewer
   is dropped (so every output row has the same columns).

Rows keep the input order and a repeated (anchor, positive) row is kept as often as it is
given (sentence-transformers groups the rows by anchor and keeps such a pair once); otherwise
the output is sentence-transformers' (tested on a fixed input, with its FAISS search and
without).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import InputError

__all__ = ["SEARCHES", "MiningOptions", "mine_hard_negatives"]

SEARCHES = ("index", "numpy")


@dataclass(frozen=True)
class MiningOptions:
    """See the module docstring."""

    num_negatives: int = 3
    range_min: int = 0
    range_max: int = 100
    max_score: float | None = None
    absolute_margin: float | None = None
    relative_margin: float | None = None
    batch_size: int = 32
    min_score: float | None = None

    def __post_init__(self) -> None:
        if self.num_negatives < 1:
            raise InputError(f"num_negatives must be >= 1, got {self.num_negatives}")
        if not 0 <= self.range_min < self.range_max:
            raise InputError(f"need 0 <= range_min < range_max, got {self.range_min}, "
                             f"{self.range_max}")  # fmt: skip
        if self.num_negatives > self.range_max - self.range_min:
            raise InputError(
                f"cannot mine {self.num_negatives} negatives from the ranks {self.range_min} to "
                f"{self.range_max}: raise range_max or lower num_negatives"
            )


def _unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float32)
    return x / np.clip(np.linalg.norm(x, axis=1, keepdims=True), 1e-12, None)


Search = Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]]


def _numpy_search(docs: np.ndarray, batch_size: int) -> Search:
    """Exact search: (scores, rows) of the k best rows of ``docs`` for each query, best first
    (ties: the lower row first)."""

    def search(queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        k = min(k, len(docs))
        scores, rows = [], []
        for start in range(0, len(queries), batch_size):
            sims = queries[start : start + batch_size] @ docs.T
            top = np.argsort(-sims, axis=1, kind="stable")[:, :k]
            scores.append(np.take_along_axis(sims, top, axis=1))
            rows.append(top)
        return np.concatenate(scores), np.concatenate(rows)

    return search


def _index_search(index: Any) -> Search:
    """Search through a `VectorIndex` (its FAISS index; rows -1 = no result)."""

    def search(queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        hits = index.search_vectors(queries, top_k=k)
        scores = np.full((len(queries), min(k, len(index))), -np.inf, np.float32)
        rows = np.full(scores.shape, -1, np.int64)
        for q, row in enumerate(hits):
            for j, h in enumerate(row):
                scores[q, j], rows[q, j] = h.score, h.index
        return scores, rows

    return search


def _memory_index(docs: np.ndarray) -> Any:
    """A flat in-memory `VectorIndex` of the (unit) rows ``docs`` (ids = row numbers)."""
    from .dense import ModelIdentity, VectorIndex

    index = VectorIndex.create(ModelIdentity("", docs.shape[1], "", "mining corpus"))
    index.add_vectors(docs, [""] * len(docs), list(range(len(docs))))
    return index


def mine_hard_negatives(
    embed: Callable[[Sequence[str]], np.ndarray],
    rows: Sequence[tuple[str, str]],
    corpus: Sequence[str] | None = None,
    options: MiningOptions = MiningOptions(),
    *,
    index: Any = None,
    search: str | None = None,
) -> tuple[list[tuple[str, ...]], dict[str, int]]:
    """Mine negatives for (anchor, positive) ``rows`` with ``embed(texts) -> (N, D)`` (see the
    module docstring).

    Args:
        corpus: candidate texts (default: the rows' positives); not with ``index``.
        index: a built `VectorIndex` whose rows are the candidates (made by the model that
            ``embed`` runs: the caller checks, e.g. `VectorIndex.check_model`).
        search: "index" (FAISS) or "numpy" (the same exact search without faiss; not with
            ``index``); None: "index" when faiss is installed, else "numpy".

    Returns:
        (rows (anchor, positive, negative_1, ..., negative_n), counts: ``rows_in``,
        ``rows_out``, ``dropped`` (too few candidates survived)).

    Raises:
        InputError: ``index`` with ``corpus`` or ``search="numpy"``, an unknown ``search``,
            an empty corpus, or vectors of another dimension than the index's.
        DependencyError: ``search="index"`` without faiss installed.
    """
    if search is None:
        search = "index" if index is not None or importlib.util.find_spec("faiss") else "numpy"
    if search not in SEARCHES:
        raise InputError(f"search must be one of {SEARCHES}, got {search!r}")
    if index is not None and (corpus is not None or search != "index"):
        raise InputError("a built index is the corpus: give no corpus and search='index'")
    if not rows:
        return [], {"rows_in": 0, "rows_out": 0, "dropped": 0}
    per_anchor: dict[str, int] = {}
    for a, _ in rows:
        per_anchor[a] = per_anchor.get(a, 0) + 1
    anchors = list(dict.fromkeys(a for a, _ in rows))
    positives: dict[str, list[str]] = {}
    for a, p in rows:
        if p not in positives.setdefault(a, []):
            positives[a].append(p)
    qs = _unit(embed(anchors))
    if index is not None:
        texts = list(index.texts)
        if any(not t for t in texts):
            raise InputError(
                "the index has rows without a text (built from vectors alone); mining needs "
                "the texts: build it from the corpus (bertfamily index build --corpus)"
            )
        rows_of: dict[str, list[int]] = {}
        for i, t in enumerate(texts):
            rows_of.setdefault(t, []).append(i)
        pos_rows = {a: {i for p in ps for i in rows_of.get(p, [])} for a, ps in positives.items()}
        distinct = list(dict.fromkeys(p for ps in positives.values() for p in ps))
        pvec = dict(zip(distinct, _unit(embed(distinct))))
        run = _index_search(index)
    else:
        texts = list(dict.fromkeys([*(corpus or []), *(p for _, p in rows)]))
        where = {t: i for i, t in enumerate(texts)}
        pos_rows = {a: {where[p] for p in ps} for a, ps in positives.items()}
        docs = _unit(embed(texts))
        pvec = {t: docs[where[t]] for ps in positives.values() for t in ps}
        run = _index_search(_memory_index(docs)) if search == "index" else _numpy_search(
            docs, options.batch_size
        )  # fmt: skip
    if not texts:
        raise InputError("the corpus to mine from is empty")
    o = options
    # room for the positives, counted as sentence-transformers does (rows per anchor)
    depth = o.range_max + max(max(per_anchor.values()), max(len(v) for v in pos_rows.values()))
    scores, found = run(qs, depth)
    negatives: dict[str, list[str] | None] = {}
    for q, a in enumerate(anchors):
        floor = min(float(qs[q] @ pvec[p]) for p in positives[a])  # the least similar positive
        keep: list[int] = []
        for s, i in zip(scores[q].tolist(), found[q].tolist()):
            if i < 0 or i in pos_rows[a]:
                continue
            if (o.max_score is not None and s > o.max_score) or (
                o.min_score is not None and s < o.min_score
            ):
                continue
            if o.absolute_margin is not None and s + o.absolute_margin > floor:
                continue
            if o.relative_margin is not None and s > floor - abs(floor) * o.relative_margin:
                continue
            keep.append(i)
        chosen = keep[: o.range_max][o.range_min :][: o.num_negatives]
        negatives[a] = [texts[i] for i in chosen] if len(chosen) == o.num_negatives else None
    out, dropped = [], 0
    for a, p in rows:
        if negatives[a] is None:
            dropped += 1
            continue
        out.append((a, p, *negatives[a]))
    return out, {"rows_in": len(rows), "rows_out": len(out), "dropped": dropped}
