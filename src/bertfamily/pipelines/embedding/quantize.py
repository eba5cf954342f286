"""Smaller embeddings: Matryoshka truncation (Kusupati et al. 2022, "Matryoshka Representation
Learning" §3: the first d coordinates of a vector trained that way are an embedding of their
own) and scalar / binary quantisation with sentence-transformers' ``quantize_embeddings``
conventions (int8/uint8: 256 buckets per dimension between a calibration minimum and maximum;
binary: one bit per dimension, ``> 0``, packed 8 to a byte).
"""

from __future__ import annotations

import numpy as np

from ...errors import InputError

__all__ = ["PRECISIONS", "quantization_ranges", "quantize_embeddings", "truncate_dimensions"]

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
      per dimension (a zero step counts as 1); ``int8``: that minus 128;
    - ``ubinary``: the bits ``x > 0`` packed big-endian 8 to a byte, (N, ceil(D/8)) uint8;
      ``binary``: those bytes minus 128, as int8.

    Args:
        ranges: (2, D) minimum and maximum per dimension for int8/uint8; default
            `quantization_ranges` of ``calibration``, else of ``vectors`` themselves.

    Raises:
        InputError: an unknown precision, integer input, or int8/uint8 with no ranges to use.
    """
    if precision not in PRECISIONS:
        raise InputError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    vectors = np.asarray(vectors)
    if vectors.dtype.kind in "iu":
        raise InputError("embeddings to quantise must be floats, not integers")
    vectors = vectors.astype(np.float32, copy=False)
    if precision == "float32":
        return vectors
    if precision in ("binary", "ubinary"):
        packed = np.packbits(vectors > 0, axis=-1)
        return packed if precision == "ubinary" else (packed.astype(np.int16) - 128).astype(np.int8)
    if ranges is None:
        ranges = quantization_ranges(vectors if calibration is None else calibration)
    ranges = np.asarray(ranges, dtype=np.float32)
    lo = ranges[0]
    step = (ranges[1] - lo) / 255
    step = np.where(step == 0, 1, step)
    buckets = np.clip(np.floor((vectors - lo) / step), 0, 255)
    return buckets.astype(np.uint8) if precision == "uint8" else (buckets - 128).astype(np.int8)
