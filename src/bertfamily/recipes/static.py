"""Distil a static embedding model (Model2Vec: Tulkens & van Dongen 2024, "Model2Vec: Fast
State-of-the-Art Static Embeddings") from any sentence model: every vocabulary token alone
through the model, PCA, then Zipf/SIF weights; saved in model2vec's layout, which model2vec,
sentence-transformers and `pipelines.embedding.embed.SentenceEmbedder` load
(`pipelines.embedding.static`).

The steps, as model2vec's ``distill`` takes them (its defaults are ours):

1. **Vocabulary**: the tokenizer's tokens in id order, less its added tokens other than the
   unknown and padding tokens ([CLS], [SEP], [MASK] go) and less the tokens that match
   ``remove_pattern`` from their start (BERT's ``[unusedN]``); kept tokens are renumbered
   0..V-1 in that order.
2. **Forward pass**: each token alone with the model's special tokens around it
   (``[CLS] t [SEP]``), through the encoder and the model's own pooling and Dense layers (the
   `SentenceEmbedder` batch loop), not normalised.
3. **PCA** to ``dims`` coordinates (centred; each component's sign set so that its largest
   score by magnitude is positive); ``dims=None`` keeps the vectors as they are.
4. **Weights**: token ``i`` (0-based rank) gets ``a / (a + p_i)`` with ``p_i ∝ 1/(i + 2)``
   (Zipf's law over the vocabulary order as a stand-in for frequency) and ``a`` the SIF
   coefficient (Arora et al. 2017, "A Simple but Tough-to-Beat Baseline for Sentence
   Embeddings", §3, weight a/(a + p(w))); rows are multiplied by it.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError
from ..inference.batches import TokenRows
from ..pipelines.embedding.embed import SentenceEmbedder
from ..pipelines.embedding.static import vocabulary_tokenizer, write_static
from ..runtime import require, require_extra

__all__ = ["UNUSED_PATTERN", "distill_static", "sif_weights", "static_vocabulary"]

#: model2vec's default ``token_remove_pattern``: BERT's placeholder tokens.
UNUSED_PATTERN = r"\[unused\d+\]"


def sif_weights(n: int, sif_coefficient: float | None) -> np.ndarray:
    """(n,) float64 weights ``a / (a + p_i)``, ``p_i = (1/(i+2)) / Σ_j 1/(j+2)`` (module step 4);
    ones when ``sif_coefficient`` is None."""
    if sif_coefficient is None:
        return np.ones(n)
    inv_rank = 1.0 / np.arange(2, n + 2)
    return sif_coefficient / (sif_coefficient + inv_rank / inv_rank.sum())


def static_vocabulary(embedder: SentenceEmbedder, remove_pattern: str | None) -> list[int]:
    """The token ids a static model keeps (module step 1), ascending.

    Raises:
        InputError: ``remove_pattern`` is not a regular expression, or it leaves no token.
    """
    try:
        regex = re.compile(remove_pattern) if remove_pattern is not None else None
    except re.error as e:
        raise InputError(
            f"remove_pattern {remove_pattern!r} is not a regular expression: {e}"
        ) from None
    backend = embedder.tokenizer.backend
    added = {t.content for t in backend.get_added_tokens_decoder().values()}
    keep_added = {embedder.tokenizer.unk_token, embedder.tokenizer.pad_token}
    vocab = sorted(backend.get_vocab(with_added_tokens=True).items(), key=lambda kv: kv[1])
    kept = [
        i
        for token, i in vocab
        if not (token in added and token not in keep_added)
        and not (regex is not None and regex.match(token))
    ]
    if not kept:
        raise InputError(f"no token is left after removing those that match {remove_pattern!r}")
    return kept


def _special_ends(embedder: SentenceEmbedder) -> tuple[list[int], list[int]]:
    """The special-token ids the model's tokenizer puts before and after one text."""
    backend = embedder.tokenizer.backend
    for probe in ("a", "the", "x", "0", ".", "A"):
        enc = backend.encode(probe, add_special_tokens=True)
        inside = [k for k, s in enumerate(enc.sequence_ids) if s is not None]
        if inside:
            return enc.ids[: inside[0]], enc.ids[inside[-1] + 1 :]
    raise InputError("cannot find where this tokenizer's special tokens go")


def _pca(x: np.ndarray, dims: int) -> tuple[np.ndarray, float]:
    """(V, H) → (V, dims) PCA scores (centred; signs: each column's largest |score| > 0), and
    the share of the variance kept."""
    decomposition = require("sklearn.decomposition", "train", "static distillation's PCA")
    pca = decomposition.PCA(n_components=dims, svd_solver="full")
    scores = pca.fit_transform(x.astype(np.float64))
    top = np.abs(scores).argmax(axis=0)
    scores *= np.sign(scores[top, np.arange(dims)])
    return scores, float(pca.explained_variance_ratio_.sum())


def distill_static(
    model: str | os.PathLike[str],
    output: str | os.PathLike[str],
    *,
    dims: int | None = 256,
    sif_coefficient: float | None = 1e-4,
    remove_pattern: str | None = UNUSED_PATTERN,
    batch_size: int = 256,
    normalize: bool = True,
    threads: int = 0,
    progress: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Distil the static model of ``model`` into directory ``output`` (module docstring).

    Args:
        model: a sentence model: a directory, a resource name or a cached ``org/name``.
        output: the directory to write (replaced whole, `static.write_static`).
        dims: PCA dimensions (1 ≤ dims ≤ the model's width, fewer than the tokens kept);
            None: no PCA.
        sif_coefficient: ``a`` of the weights, in (0, 1); None: no weighting.
        remove_pattern: a regular expression; tokens it matches from their start are left out
            (default BERT's ``[unusedN]``); None keeps them.
        batch_size: tokens per forward pass.
        normalize: whether the saved model L2-normalises its vectors (model2vec's default:
            yes).
        threads: torch threads (0: the engine's policy).
        progress: called with the number of tokens done after each batch.

    Returns:
        A summary: ``output``, ``tokens`` (V), ``dimensions``, ``explained_variance`` (the share
        PCA kept, 1.0 without PCA), ``seconds``.

    Raises:
        InputError: ``dims`` or ``sif_coefficient`` out of range, a bad ``remove_pattern``,
            a model that is already static.
        MissingDependency: PCA asked and scikit-learn not installed (``bertfamily[train]``).
    """
    if sif_coefficient is not None and not 0 < sif_coefficient < 1:
        raise InputError(f"sif_coefficient must lie in (0, 1), got {sif_coefficient}")
    if dims is not None and (isinstance(dims, bool) or not isinstance(dims, int) or dims < 1):
        raise InputError(f"dims must be a positive integer or None, got {dims!r}")
    if dims is not None:  # before the model loads
        require_extra("sklearn", "train", "static distillation's PCA")
    start = time.perf_counter()
    embedder = SentenceEmbedder(model, dtype="fp32", threads=threads)
    if embedder.sentence_modules.static is not None:
        raise InputError(f"{model} is already a static embedding model")
    width = embedder.dimension
    if dims is not None and dims > width:
        raise InputError(f"dims={dims} is more than the model's {width} dimensions")
    kept = static_vocabulary(embedder, remove_pattern)
    if dims is not None and dims >= len(kept):
        raise InputError(f"dims={dims} must be fewer than the {len(kept)} tokens kept")
    before, after = _special_ends(embedder)
    ids = [[*before, i, *after] for i in kept]
    rows = {"input_ids": ids, "attention_mask": [[1] * len(r) for r in ids]}
    if embedder.tokenizer.has_token_type_ids:
        rows["token_type_ids"] = [[0] * len(r) for r in ids]
    vectors = embedder.encode_tokenized(
        TokenRows(rows, [False] * len(ids)),
        batch_size=batch_size,
        normalize=False,
        progress=progress,
    )
    vectors = np.nan_to_num(vectors)
    kept_share = 1.0
    if dims is not None:
        vectors, kept_share = _pca(vectors, dims)
    table = vectors * sif_weights(len(kept), sif_coefficient)[:, None]
    config = {
        "tokenizer_name": str(model),
        "apply_pca": dims,
        "sif_coefficient": sif_coefficient,
        "seq_length": 1000000,
        "pooling": "mean",
    }
    tokenizer_json = vocabulary_tokenizer(embedder.tokenizer.backend, kept)
    write_static(output, table, tokenizer_json, normalize=normalize, config=config)
    return {
        "output": str(Path(output)),
        "tokens": len(kept),
        "dimensions": int(table.shape[1]),
        "explained_variance": kept_share,
        "seconds": round(time.perf_counter() - start, 3),
    }
