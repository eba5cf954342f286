"""Hard-negative mining (sentence-transformers' ``mine_hard_negatives``, in our own terms): for
each (anchor, positive) row, the texts of a corpus (default: every positive of the data) most
similar to the anchor that are not one of its positives, taken from a rank range and under
margins that guard against false negatives, written as (anchor, positive, negative_1..n) rows
for the MNRL losses.

For anchor a with positive p and a candidate c (cosine similarities s(·,·), exact search):

- c is skipped when it is a positive of a (any row with the same anchor);
- only candidates ranked ``range_min`` ≤ rank < ``range_max`` (0-based, after removing the
  positives) are considered: the very top are often unlabelled positives;
- ``max_score``: c is skipped when s(a, c) > max_score;
- ``absolute_margin``: c is kept only when s(a, c) ≤ s(a, p) − absolute_margin;
- ``relative_margin``: c is kept only when s(a, c) ≤ s(a, p) · (1 − relative_margin);
- the first ``num_negatives`` survivors become the row's negatives; a row with fewer is
  dropped (so every output row has the same columns).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import InputError

__all__ = ["MiningOptions", "mine_hard_negatives"]


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

    def __post_init__(self) -> None:
        if self.num_negatives < 1:
            raise InputError(f"num_negatives must be >= 1, got {self.num_negatives}")
        if not 0 <= self.range_min < self.range_max:
            raise InputError(f"need 0 <= range_min < range_max, got {self.range_min}, "
                             f"{self.range_max}")  # fmt: skip


def _unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float32)
    return x / np.clip(np.linalg.norm(x, axis=1, keepdims=True), 1e-12, None)


def mine_hard_negatives(
    embed: Callable[[Sequence[str]], np.ndarray],
    rows: Sequence[tuple[str, str]],
    corpus: Sequence[str] | None = None,
    options: MiningOptions = MiningOptions(),
) -> tuple[list[tuple[str, ...]], dict[str, int]]:
    """Mine negatives for (anchor, positive) ``rows`` with ``embed(texts) -> (N, D)``.

    Returns:
        (rows (anchor, positive, negative_1, ..., negative_n), counts: ``rows_in``,
        ``rows_out``, ``dropped`` (too few candidates survived)).
    """
    texts = list(dict.fromkeys(corpus if corpus is not None else [p for _, p in rows]))
    if corpus is not None:  # the positives are candidates too (as in-batch negatives would be)
        texts = list(dict.fromkeys([*texts, *(p for _, p in rows)]))
    index = {t: i for i, t in enumerate(texts)}
    anchors = list(dict.fromkeys(a for a, _ in rows))
    positives: dict[str, set[int]] = {}
    for a, p in rows:
        positives.setdefault(a, set()).add(index[p])
    docs = _unit(embed(texts))
    qs = _unit(embed(anchors))
    depth = min(len(texts), options.range_max + max(len(v) for v in positives.values()))
    candidates: dict[str, list[tuple[int, float]]] = {}
    for start in range(0, len(anchors), options.batch_size):
        sims = qs[start : start + options.batch_size] @ docs.T
        for a, row in zip(anchors[start : start + options.batch_size], sims):
            top = np.argsort(-row, kind="stable")[:depth]
            ranked = [(int(i), float(row[i])) for i in top if int(i) not in positives[a]]
            candidates[a] = ranked[options.range_min : options.range_max]
    qpos = {a: i for i, a in enumerate(anchors)}
    out, dropped = [], 0
    for a, p in rows:
        s_pos = float(qs[qpos[a]] @ docs[index[p]])
        keep = []
        for i, s in candidates[a]:
            if options.max_score is not None and s > options.max_score:
                continue
            if options.absolute_margin is not None and s > s_pos - options.absolute_margin:
                continue
            if options.relative_margin is not None and s > s_pos * (1 - options.relative_margin):
                continue
            keep.append(texts[i])
            if len(keep) == options.num_negatives:
                break
        if len(keep) < options.num_negatives:
            dropped += 1
            continue
        out.append((a, p, *keep))
    return out, {"rows_in": len(rows), "rows_out": len(out), "dropped": dropped}
