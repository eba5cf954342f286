"""Fusing the hit lists of several indexes of the same documents (dense, binary, sparse,
BM25, ...) into one.

`fuse`: by reciprocal rank fusion (Cormack, Clarke & Büttcher 2009, "Reciprocal Rank Fusion
outperforms Condorcet and individual Rank Learning Methods": Σ 1 / (k + rank)) or by a weighted
sum of per-query min-max normalised scores, over any number of lists.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...errors import InputError
from .base import Hit, IndexHit

__all__ = ["fuse"]


def fuse(
    *hit_lists: Sequence[Hit],
    top_k: int = 10,
    method: str = "rrf",
    weight: float | None = None,
    weights: Sequence[float] | None = None,
    k: int = 60,
) -> list[Hit]:
    """One query's hit lists fused, best first (ties: the lower row first).

    ``fuse(dense, sparse)`` is the two-list form; ``fuse(dense, sparse, bm25, ...)`` fuses
    any number. Every list holds rows of the same documents (indexes built from one corpus).

    Args:
        hit_lists: two or more lists of `Hit` (or `IndexHit`: its row and score count), each
            best first (an empty list adds nothing).
        top_k: the hits to return (>= 1).
        method: "rrf" (Σ_lists w · 1/(k + rank), rank from 1; a list a document is missing
            from adds nothing; w = 1 unless ``weights`` are given) or "linear" (Σ_lists w ·
            score, each list's scores min-max normalised to [0, 1] per query, a list whose
            scores are all equal giving 1; missing = 0; w = 1/N each unless given).
        weight: two lists only: the first list's weight in "linear", the second's being
            1 - weight (default 0.5); ignored by "rrf", as before.
        weights: one non-negative weight per list (instead of ``weight``).
        k: the RRF constant (>= 1; 60 as in the paper).

    Raises:
        InputError: fewer than two lists, an argument that is not a list of `Hit` (top_k
            given positionally), another method, ``weight`` with more than two lists or
            outside [0, 1], both ``weight`` and ``weights``, weights of another count or
            negative or not finite, all 0, or one above `MAX_WEIGHT`; top_k < 1 or k < 1.
    """
    if len(hit_lists) < 2:
        raise InputError(f"fuse takes two or more hit lists, got {len(hit_lists)}")
    for n, hits in enumerate(hit_lists):
        if isinstance(hits, str | bytes) or not all(_is_hit(h) for h in _seq(hits, n)):
            raise InputError(
                f"argument {n} of fuse is not a list of Hit (give top_k=, method= by keyword)"
            )
    if method not in ("rrf", "linear"):
        raise InputError(f"method must be 'rrf' or 'linear', got {method!r}")
    if top_k < 1 or k < 1:
        raise InputError(f"top_k and k must be >= 1, got top_k={top_k}, k={k}")
    w = _weights(len(hit_lists), method, weight, weights)
    total: dict[int, float] = {}
    for hits, wl in zip(hit_lists, w):
        if not hits:
            continue
        if method == "rrf":
            for rank, h in enumerate(hits, 1):
                total[h.index] = total.get(h.index, 0.0) + wl / (k + rank)
            continue
        s = np.array([h.score for h in hits], dtype=np.float64)
        span = s.max() - s.min()
        norm = (s - s.min()) / span if span > 0 else np.ones_like(s)
        for h, x in zip(hits, norm):
            total[h.index] = total.get(h.index, 0.0) + wl * float(x)
    ranked = sorted(total.items(), key=lambda kv: (-kv[1], kv[0]))[:top_k]
    return [Hit(i, s) for i, s in ranked]


def _is_hit(h) -> bool:
    """A `Hit` or an `IndexHit` (a row and a score)."""
    return isinstance(h, Hit | IndexHit)


def _seq(hits, n: int):
    try:
        return list(hits)
    except TypeError:
        raise InputError(f"argument {n} of fuse is not a list of Hit") from None


# The largest weight: a fused score is at most the sum of the weights, and must stay finite.
MAX_WEIGHT = 1e6


def _weights(n: int, method: str, weight, weights) -> list[float]:
    """One weight per list (see `fuse`)."""
    if weight is not None and weights is not None:
        raise InputError("give weight (two lists) or weights (one per list), not both")
    if weight is not None:
        if n != 2:
            raise InputError(f"weight is for two lists; give weights= for {n}")
        if not 0 <= weight <= 1:
            raise InputError(f"weight must lie in [0, 1], got {weight}")
        return [1.0, 1.0] if method == "rrf" else [float(weight), 1.0 - float(weight)]
    if weights is None:
        return [1.0] * n if method == "rrf" else [1.0 / n] * n
    w = [float(x) for x in weights]
    if len(w) != n or not all(np.isfinite(x) and x >= 0 for x in w):
        raise InputError(f"weights must be {n} finite numbers >= 0, got {list(weights)}")
    if not sum(w) > 0:
        raise InputError(f"weights must not all be 0 (every score would be 0), got {w}")
    if max(w) > MAX_WEIGHT:
        raise InputError(f"weights must be at most {MAX_WEIGHT:g} (finite scores), got {w}")
    return w
