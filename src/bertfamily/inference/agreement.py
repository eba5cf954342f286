"""How close a cheaper run (int8, another runtime, another precision) is to fp32: the accuracy
bar it must keep (`AccuracyBar`), the measurement (`agreement`: row cosines and top-k search
overlap), and the real text it is measured on (`austen_calibration`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import InputError

__all__ = [
    "CALIBRATION_VERSION",
    "AccuracyBar",
    "Agreement",
    "agreement",
    "austen_calibration",
    "swapped_agreement",
]


@dataclass(frozen=True)
class AccuracyBar:
    """What a quantised embedder must keep: on every calibration sentence a cosine to the fp32
    vector ≥ ``min_cosine``, and on average ≥ ``min_overlap`` of each query's top-``k``
    nearest sentences (cosine) shared with fp32's."""

    min_cosine: float = 0.99
    min_overlap: float = 0.95
    k: int = 10

    @classmethod
    def from_record(cls, fields: Mapping) -> AccuracyBar:
        """A bar read back from a cache record, its numbers checked.

        Raises:
            ValueError / TypeError: a field missing, unknown, of the wrong type or out of range.
        """
        bar = cls(**fields)
        for name in ("min_cosine", "min_overlap"):
            _check_number(name, getattr(bar, name), -1.0, 1.0)
        _check_count("k", bar.k)
        return bar


def _check_number(name: str, value: object, low: float, high: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} is {value!r}, not a number")
    if not low <= value <= high or not math.isfinite(value):  # range first: 10**400 is no float
        raise ValueError(f"{name} is {value}, outside [{low}, {high}]")


def _check_count(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise TypeError(f"{name} is {value!r}, not a count ≥ 1")


@dataclass(frozen=True)
class Agreement:
    """How close vectors are to reference ones: max |difference|, min/mean row cosine, mean
    top-k search overlap (queries against the sentences)."""

    max_abs_diff: float
    min_cosine: float
    mean_cosine: float
    top_k_overlap: float
    k: int

    def meets(self, bar: AccuracyBar) -> bool:
        """Whether this agreement satisfies ``bar``."""
        return self.min_cosine >= bar.min_cosine and self.top_k_overlap >= bar.min_overlap

    @classmethod
    def from_record(cls, fields: Mapping) -> Agreement:
        """An agreement read back from a cache record, its numbers checked (finite; cosines
        in [-1, 1], min ≤ mean; overlap in [0, 1]; a difference ≥ 0; k ≥ 1).

        Raises:
            ValueError / TypeError: a field missing, unknown, of the wrong type or out of range
                (the cache builds the entry again).
        """
        got = cls(**fields)
        _check_number("max_abs_diff", got.max_abs_diff, 0.0, math.inf)
        for name in ("min_cosine", "mean_cosine"):
            _check_number(name, getattr(got, name), -1.0, 1.0 + 1e-6)
        _check_number("top_k_overlap", got.top_k_overlap, 0.0, 1.0)
        if got.min_cosine > got.mean_cosine:
            raise ValueError(f"min cosine {got.min_cosine} above the mean {got.mean_cosine}")
        _check_count("k", got.k)
        return got


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.clip(np.linalg.norm(x, axis=1, keepdims=True), 1e-12, None)


def agreement(
    ref: np.ndarray, new: np.ndarray, ref_queries: np.ndarray, new_queries: np.ndarray, k: int = 10
) -> Agreement:
    """Compare embeddings with reference ones.

    Args:
        ref: (N, D) reference sentence vectors.
        new: (N, D) candidate sentence vectors.
        ref_queries: (Q, D) reference query vectors; each side searches its own sentences.
        new_queries: (Q, D) candidate query vectors.
        k: neighbours compared per query (capped at N).

    Returns:
        `Agreement`; top-k overlap = mean over queries of |top_k(ref) ∩ top_k(new)| / k.

    Raises:
        InputError (a ValueError): shapes that differ, or no rows.
    """
    if ref.shape != new.shape or ref_queries.shape != new_queries.shape or not len(ref):
        raise InputError(
            f"shapes differ or are empty: {ref.shape} vs {new.shape}, "
            f"{ref_queries.shape} vs {new_queries.shape}"
        )
    cos = (_unit(ref) * _unit(new)).sum(1)
    k = min(k, len(ref))

    def top(q: np.ndarray, s: np.ndarray) -> np.ndarray:
        return np.argsort(-(_unit(q) @ _unit(s).T), axis=1, kind="stable")[:, :k]

    a, b = top(ref_queries, ref), top(new_queries, new)
    overlap = float(np.mean([len(set(x) & set(y)) / k for x, y in zip(a, b)])) if len(a) else 1.0
    return Agreement(
        max_abs_diff=float(np.abs(ref - new).max()),
        min_cosine=float(cos.min()),
        mean_cosine=float(cos.mean()),
        top_k_overlap=overlap,
        k=k,
    )


def swapped_agreement(
    embedder, model, texts: Sequence[str], queries: Sequence[str], k: int = 10
) -> Agreement:
    """How ``model``, standing in for ``embedder.model`` (an exported graph's runtime), agrees
    with it: both embed ``texts`` and ``queries`` through ``embedder``'s own tokenisation and
    pooling (`agreement`). ``embedder.model`` is restored, also on an error."""
    own = embedder.model
    ref, ref_q = embedder.encode(list(texts)), embedder.encode(list(queries))
    embedder.model = model
    try:
        new, new_q = embedder.encode(list(texts)), embedder.encode(list(queries))
        return agreement(ref, new, ref_q, new_q, k)
    finally:
        embedder.model = own


CALIBRATION_VERSION = "austen-64x32-v1"  # names `austen_calibration`'s output in cache keys


def austen_calibration(
    sentences: int = 64, queries: int = 32, *, held_out: bool = False
) -> tuple[list[str], list[str]]:
    """Real calibration text: every k-th line of Jane Austen's novels (fetched resource
    ``janeausten``) of 3–64 words, and short lines (4–10 words) as queries; deterministic.
    ``held_out``: other lines (offsets 11 / 13), disjoint from the default ones, for checking
    what was calibrated on them.

    Returns:
        (sentences, queries): lists of ``sentences`` and ``queries`` strings.

    Raises:
        FetchError: the resource cannot be fetched.
    """
    from ..resources.cache import fetch

    lines = (fetch("janeausten") / "austen.txt").read_text(encoding="utf-8").splitlines()
    lines = [x.strip() for x in lines if 3 <= len(x.split()) <= 64 and not x.isupper()]
    short = [x for x in lines if 4 <= len(x.split()) <= 10]
    # offset 3 / 5: disjoint from the benchmark's slices (offset 0); 11 / 13 held out
    first, second = (11, 13) if held_out else (3, 5)
    return (
        lines[first :: len(lines) // sentences][:sentences],
        short[second :: len(short) // queries][:queries],
    )
