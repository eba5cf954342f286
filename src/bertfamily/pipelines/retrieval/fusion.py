"""Fusing a dense (or binary) and a sparse index's hit lists into one.

`fuse`: by reciprocal rank fusion (Cormack, Clarke & Büttcher 2009, "Reciprocal Rank Fusion
outperforms Condorcet and individual Rank Learning Methods": Σ 1 / (k + rank)) or by a weighted
sum of per-query min-max normalised scores.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...errors import InputError
from .base import Hit

__all__ = ["fuse"]


def fuse(
    dense: Sequence[Hit],
    sparse: Sequence[Hit],
    top_k: int = 10,
    *,
    method: str = "rrf",
    weight: float = 0.5,
    k: int = 60,
) -> list[Hit]:
    """One query's dense and sparse hits fused, best first (ties: the lower row first).

    Args:
        dense: the dense index's hits, best first.
        sparse: the sparse index's hits (rows of the same documents), best first.
        method: "rrf" (Σ 1/(k + rank), rank from 1; a list a document is missing from adds
            nothing) or "linear" (``weight`` · dense + (1 - weight) · sparse, each list's
            scores min-max normalised to [0, 1]; missing = 0).

    Raises:
        InputError: another method.
    """
    if method not in ("rrf", "linear"):
        raise InputError(f"method must be 'rrf' or 'linear', got {method!r}")
    total: dict[int, float] = {}
    for hits, w in ((dense, weight), (sparse, 1 - weight)):
        if not hits:
            continue
        if method == "rrf":
            for rank, h in enumerate(hits, 1):
                total[h.index] = total.get(h.index, 0.0) + 1.0 / (k + rank)
            continue
        s = np.array([h.score for h in hits], dtype=np.float64)
        span = s.max() - s.min()
        norm = (s - s.min()) / span if span > 0 else np.ones_like(s)
        for h, x in zip(hits, norm):
            total[h.index] = total.get(h.index, 0.0) + w * float(x)
    ranked = sorted(total.items(), key=lambda kv: (-kv[1], kv[0]))[:top_k]
    return [Hit(i, s) for i, s in ranked]
