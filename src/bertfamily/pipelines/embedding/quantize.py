"""Smaller embeddings: Matryoshka truncation (Kusupati et al. 2022, "Matryoshka Representation
Learning" §3: the first d coordinates of a vector trained that way are an embedding of their
own) and scalar / binary quantisation with sentence-transformers' ``quantize_embeddings``
conventions (int8/uint8: 256 buckets per dimension between a calibration minimum and maximum;
binary: one bit per dimension, ``> 0``, packed 8 to a byte).
"""

from __future__ import annotations

import numpy as np

from ...errors import InputError

__all__ = [
    "PRECISIONS",
    "bucket_edges",
    "quantization_ranges",
    "quantize_embeddings",
    "truncate_dimensions",
]

#: Output precisions of `quantize_embeddings`.
PRECISIONS = ("float32", "int8", "uint8", "binary", "ubinary")


def truncate_dimensions(vectors: np.ndarray, dimensions: int | None, normalize: bool) -> np.ndarray:
    """The first ``dimensions`` coordinates of each row, L2-renormalised when ``normalize``.

    Raises:
        InputError: ``dimensions`` < 1 or larger than the vectors.
    """
    if dimensions is None:
        return vectors
    width = vectors.shape[-1]
    if isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 1:
        raise InputError(f"dimensions must be a positive integer, got {dimensions!r}")
    if dimensions > width:
        raise InputError(f"dimensions={dimensions} is more than the model's {width}")
    out = np.ascontiguousarray(vectors[..., :dimensions], dtype=np.float32)
    if normalize:
        out /= np.clip(np.linalg.norm(out, axis=-1, keepdims=True), 1e-12, None)
    return out


def quantization_ranges(calibration: np.ndarray) -> np.ndarray:
    """(2, D): the per-dimension minimum and maximum of ``calibration`` (N, D), N ≥ 2."""
    calibration = np.asarray(calibration, dtype=np.float32)
    if calibration.ndim != 2 or calibration.shape[0] < 2:
        raise InputError(
            "int8/uint8 need ranges from at least two embeddings (give ranges or calibration)"
        )
    return np.stack([calibration.min(0), calibration.max(0)])


def bucket_edges(ranges: np.ndarray, dimension: int) -> tuple[np.ndarray, np.ndarray]:
    """The (D,) lower and upper bucket edges of int8/uint8 from ``ranges`` (2, D): the ranges
    themselves, except where a dimension's is empty (minimum = maximum), which becomes
    ``[-A, A]`` with A the largest magnitude in ``ranges`` (1 when all are 0).

    Raises:
        InputError: ``ranges`` not of shape (2, ``dimension``), not finite, or a minimum above
            its maximum.
    """
    ranges = np.asarray(ranges, dtype=np.float32)
    if ranges.shape != (2, dimension):
        raise InputError(f"ranges must have shape (2, {dimension}), got {ranges.shape}")
    if not np.isfinite(ranges).all() or (ranges[0] > ranges[1]).any():
        raise InputError("ranges must be finite, each minimum <= its maximum")
    lo, hi = ranges[0], ranges[1]
    empty = hi == lo
    if empty.any():
        a = float(np.abs(ranges).max()) or 1.0
        lo, hi = np.where(empty, -a, lo), np.where(empty, a, hi)
    return lo, hi


def quantize_embeddings(
    vectors: np.ndarray,
    precision: str,
    *,
    ranges: np.ndarray | None = None,
    calibration: np.ndarray | None = None,
) -> np.ndarray:
    """(N, D) float vectors in ``precision``.

    - ``float32``: unchanged (as float32);
    - ``uint8``: ``floor((x - lo) / step)`` clipped to 0..255 with ``step = (hi - lo) / 255``
      per dimension; ``int8``: that minus 128. A dimension whose range is empty (lo = hi:
      every calibration row alike there, as for a batch of equal texts) is bucketed over
      ``[-A, A]``, A the largest magnitude in the ranges (`bucket_edges`), so it keeps its
      sign and size instead of collapsing to bucket 0 (int8 -128) as sentence-transformers'
      does; other dimensions are bucketed exactly as sentence-transformers buckets them;
    - ``ubinary``: the bits ``x > 0`` packed big-endian 8 to a byte, (N, ceil(D/8)) uint8;
      ``binary``: those bytes minus 128, as int8.

    Args:
        ranges: (2, D) minimum and maximum per dimension for int8/uint8; default
            `quantization_ranges` of ``calibration``, else of ``vectors`` themselves.

    Raises:
        InputError: an unknown precision, integer input, a NaN or infinite vector (its row
            named), or int8/uint8 with no ranges to use or ranges that are not (2, D) finite
            minimum <= maximum.
    """
    if precision not in PRECISIONS:
        raise InputError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    vectors = np.asarray(vectors)
    if vectors.dtype.kind in "iu":
        raise InputError("embeddings to quantise must be floats, not integers")
    vectors = vectors.astype(np.float32, copy=False)
    finite = np.isfinite(vectors).reshape(len(vectors), -1).all(axis=1) if vectors.ndim else True
    if not np.all(finite):
        bad = np.flatnonzero(~np.asarray(finite))
        raise InputError(
            f"{len(bad)} embedding(s) hold NaN or infinity (first: row {int(bad[0])}, counting "
            "from 0); nothing quantised"
        )
    if precision == "float32":
        return vectors
    if precision in ("binary", "ubinary"):
        packed = np.packbits(vectors > 0, axis=-1)
        return packed if precision == "ubinary" else (packed.astype(np.int16) - 128).astype(np.int8)
    if ranges is None:
        ranges = quantization_ranges(vectors if calibration is None else calibration)
    lo, hi = bucket_edges(ranges, vectors.shape[-1])
    step = (hi - lo) / 255
    buckets = np.clip(np.floor((vectors - lo) / step), 0, 255)
    return buckets.astype(np.uint8) if precision == "uint8" else (buckets - 128).astype(np.int8)
