"""The multi-vector (ColBERT) index: every document token's vector, searched by late
interaction.

A query (Tq, D) is answered in two stages, as ColBERT's end-to-end retrieval (Khattab &
Zaharia 2020, §3.6):

1. candidate generation: each query token's ``token_k`` nearest document tokens by inner
   product, found by FAISS over all document token vectors (Johnson, Douze & Jégou 2019);
   their documents are the candidates. ``candidates="flat"`` (default): every document is a
   candidate (a flat token search computes every query-token × document-token product that
   exact MaxSim needs, so exact search over all documents costs no more); ``"ivf"``:
   ``IndexIVFFlat``, the tokens clustered by k-means into ``nlist`` lists (default 4·√M)
   of which ``nprobe`` are scanned per query token (the centroid pruning of ColBERTv2 /
   PLAID, Santhanam et al. 2022, without their compression);
2. exact re-scoring: MaxSim (`heads.late_interaction.maxsim_packed`, ColBERT Eq. 3) of the
   query against every candidate's full token matrix; the ``top_k`` best are returned.

When ``token_k`` reaches the number of stored token vectors every document is a candidate
and the result is exact MaxSim search over the whole corpus (``exhaustive=True`` asks for it
directly). A document that no query token reaches is never a hit, so fewer than ``top_k``
hits may come back when ``token_k`` is small.

Its directory (the layout of `base.Index`) holds ``colbert.npz``: ``vectors`` (M, D) float32,
every document's kept token vectors one document after the other, and ``offsets`` (N + 1,)
int64, where each document's rows start (read without pickle, its size and SHA-256 recorded
in ``meta.json`` and checked before use); ``meta.json`` records the candidate settings. The
FAISS index is rebuilt from ``vectors`` when first searched (for "ivf": k-means, seeded).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from ...errors import InputError, VectorIndexError
from ...files import directory_digest
from ...heads.late_interaction import maxsim_packed
from ...runtime import require
from .base import (
    COLBERT_FILE,
    TEXTS_FILE,
    Hit,
    Index,
    IndexHit,
    ModelIdentity,
    files_disagree,
    is_int,
    top_hits,
)

__all__ = ["ColBERTIndex", "colbert_identity"]

#: nearest document tokens per query token in candidate generation (the default)
TOKEN_K = 64
#: the FAISS index of candidate generation
CANDIDATE_KINDS = ("flat", "ivf")


def colbert_identity(encoder) -> ModelIdentity:
    """The `base.ModelIdentity` of a `embedding.colbert.ColBERTEncoder`: its directory's
    digest, D, and ``colbert-maxsim-doc<document_length>`` (the setting that shapes stored
    vectors). Hashed once, then cached on the encoder.

    Raises:
        InputError: ``encoder`` is not a ColBERT encoder.
    """
    cached = getattr(encoder, "_identity", None)
    if cached is not None:
        return cached
    settings = getattr(encoder, "settings", None)
    if settings is None or not hasattr(settings, "document_length"):
        raise InputError(
            f"a ColBERT index needs a ColBERT model (ColBERTEncoder), got {type(encoder).__name__}"
        )
    cached = ModelIdentity(
        digest=directory_digest(encoder.path),
        dimension=encoder.dimension,
        pooling=f"colbert-maxsim-doc{settings.document_length}",
        name=Path(encoder.path).name,
    )
    encoder._identity = cached
    return cached


def _faiss():
    return require("faiss", "index", "the ColBERT index's candidate generation")


class ColBERTIndex(Index):
    """Documents as token matrices, searched by FAISS candidate generation and exact MaxSim
    re-scoring (see the module docstring); the rows, model identity and directory layout are
    `base.Index`'s.

    Build one with `build` (a `ColBERTEncoder`), or `create` and `add_vectors`; open one with
    `load` (or `retrieval.open_index`).

    Attributes:
        vectors: (M, D) float32 token vectors of all documents, document after document.
        offsets: (N + 1,) int64: document n owns rows ``offsets[n]:offsets[n + 1]``.
    """

    kinds: ClassVar[tuple[str, ...]] = ("colbert",)
    label: ClassVar[str] = "colbert"
    recorded_files: ClassVar[tuple[str, ...]] = (COLBERT_FILE, TEXTS_FILE)
    needs_identity: ClassVar[bool] = False

    def _init_empty(
        self,
        identity: ModelIdentity | None,
        dimension: int,
        candidates: str = "flat",
        nlist: int | None = None,
        nprobe: int = 16,
    ) -> None:
        if candidates not in CANDIDATE_KINDS:
            raise InputError(f"candidates must be one of {CANDIDATE_KINDS}, got {candidates!r}")
        for name, value in (("nlist", nlist), ("nprobe", nprobe)):
            if value is not None and not is_int(value, 1):
                raise InputError(f"{name} must be an integer >= 1, got {value!r}")
        self.candidates, self.nlist, self.nprobe = candidates, nlist, nprobe
        self._init_rows("colbert", identity, [], [])
        self.vectors = np.zeros((0, dimension), np.float32)
        self.offsets = np.zeros(1, np.int64)
        self._faiss_index = None

    @classmethod
    def create(
        cls,
        identity: ModelIdentity | None,
        dimension: int | None = None,
        *,
        candidates: str = "flat",
        nlist: int | None = None,
        nprobe: int = 16,
    ) -> ColBERTIndex:
        """An empty index for ``identity``'s token vectors (or, with no model, bare vectors of
        width ``dimension``).

        Args:
            candidates: "flat" or "ivf" (see the module docstring).
            nlist: IVF lists (default 4·√M, at most M); nprobe: lists scanned per query token.

        Raises:
            InputError: neither an identity nor a dimension >= 1; other settings.
        """
        width = identity.dimension if identity is not None else dimension
        if width is None or width < 1:
            raise InputError("a ColBERT index needs a model identity or a dimension >= 1")
        self = cls.__new__(cls)
        self._init_empty(identity, width, candidates, nlist, nprobe)
        return self

    @classmethod
    def _model_identity(cls, encoder) -> ModelIdentity:
        """`colbert_identity` (`base.Index.build` and ``check_model`` use it).

        Raises:
            InputError: not a ColBERT encoder.
        """
        return colbert_identity(encoder)

    # --- storage (the hooks of `base.Index`) ---------------------------------------------
    def _prepare(self, vectors: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """(rows (M, D) float32, lengths (N,) int64) of N token matrices, checked."""
        width = self.vectors.shape[1]
        lengths = []
        for n, m in enumerate(vectors):
            shape = np.shape(m)
            if len(shape) != 2 or shape[1] != width or shape[0] < 1:
                raise InputError(
                    f"document {n}: token matrix of shape {shape}; expected (T >= 1, {width})"
                )
            lengths.append(shape[0])
        rows = (
            np.concatenate([np.asarray(m, dtype=np.float32) for m in vectors])
            if len(vectors)
            else np.zeros((0, width), np.float32)
        )
        return rows, np.asarray(lengths, dtype=np.int64)

    def _finite(self, prepared: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        rows, lengths = prepared
        finite_rows = np.isfinite(rows).all(axis=1)
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        return np.logical_and.reduceat(finite_rows, starts) if len(lengths) else finite_rows[:0]

    def _append(self, prepared: tuple[np.ndarray, np.ndarray]) -> None:
        rows, lengths = prepared
        self.vectors = np.concatenate([self.vectors, rows])
        self.offsets = np.concatenate([self.offsets, self.offsets[-1] + np.cumsum(lengths)])
        self._faiss_index = None

    def _encode(
        self, encoder, texts: list[str], batch_size: int, progress: Callable[[int], None] | None
    ) -> list[np.ndarray]:
        return encoder.encode(texts, is_query=False, batch_size=batch_size, progress=progress)

    def _encode_queries(self, encoder, queries: list[str], batch_size: int) -> list[np.ndarray]:
        return encoder.encode(queries, is_query=True, batch_size=batch_size)

    def _settings(self) -> dict[str, Any]:
        return {
            "metric": "MaxSim (sum over query tokens of the best inner product)",
            "tokens": int(len(self.vectors)),
            "dimension": int(self.vectors.shape[1]),
            "candidates": self.candidates,
            "nlist": self.nlist,
            "nprobe": self.nprobe,
        }

    def _write(self, directory: Path) -> None:
        with open(directory / COLBERT_FILE, "wb") as fh:
            np.savez(fh, vectors=self.vectors, offsets=self.offsets)

    def _read(self, path: Path, meta: dict[str, Any]) -> None:
        """``colbert.npz``: ``meta``'s count of documents and tokens, the model's width,
        finite values."""
        try:
            with np.load(path / COLBERT_FILE, allow_pickle=False) as z:
                vectors, offsets = z["vectors"], z["offsets"]
        except (OSError, ValueError, KeyError) as e:
            raise VectorIndexError(f"cannot read the index in {path}: {COLBERT_FILE}: {e}") from e
        count = meta["count"]
        if vectors.ndim != 2 or vectors.dtype != np.float32:
            raise files_disagree(path, f"{COLBERT_FILE} vectors must be 2-D float32")
        if offsets.ndim != 1 or offsets.dtype.kind not in "iu" or len(offsets) != count + 1:
            raise files_disagree(path, f"{COLBERT_FILE} offsets must be {count + 1} integers")
        if offsets[0] != 0 or offsets[-1] != len(vectors) or np.any(np.diff(offsets) < 1):
            raise files_disagree(path, f"{COLBERT_FILE} offsets do not cut the vectors in rows")
        if meta.get("tokens", len(vectors)) != len(vectors):
            raise files_disagree(path, f"meta.json tokens {meta.get('tokens')}, {len(vectors)}")
        width = self.identity.dimension if self.identity is not None else vectors.shape[1]
        if vectors.shape[1] != width:
            raise files_disagree(path, f"vectors of width {vectors.shape[1]}, the model's {width}")
        if not np.all(np.isfinite(vectors)):
            raise files_disagree(path, "vectors that are not finite")
        texts, ids = self.texts, self.ids  # read by `base.Index.load`
        try:
            self._init_empty(
                self.identity,
                vectors.shape[1],
                meta.get("candidates", "flat"),
                meta.get("nlist"),
                meta.get("nprobe", 16),
            )
        except InputError as e:
            raise files_disagree(path, f"meta.json candidate settings: {e}") from None
        self._init_rows("colbert", self.identity, texts, ids)
        self.vectors, self.offsets = vectors, offsets.astype(np.int64)

    # --- queries ---------------------------------------------------------------------------
    def document(self, row: int) -> np.ndarray:
        """(T, D) float32 token matrix of the document at ``row``."""
        return self.vectors[self.offsets[row] : self.offsets[row + 1]]

    def _candidates(self, query: np.ndarray, token_k: int) -> np.ndarray:
        """Rows of the documents owning a query token's ``token_k`` nearest tokens (every
        row for "flat" candidates: exact search)."""
        if self.candidates == "flat" or token_k >= len(self.vectors):
            return np.arange(len(self))
        if self._faiss_index is None:
            self._faiss_index = self._build_faiss()
        _, tokens = self._faiss_index.search(np.ascontiguousarray(query, np.float32), token_k)
        tokens = tokens[tokens >= 0]
        return np.unique(np.searchsorted(self.offsets, tokens, side="right") - 1)

    def _build_faiss(self):
        """The FAISS index of every stored token (flat, or IVF trained by seeded k-means)."""
        faiss = _faiss()
        width, vectors = self.vectors.shape[1], np.ascontiguousarray(self.vectors)
        if self.candidates == "flat":
            index = faiss.IndexFlatIP(width)
        else:
            nlist = min(len(vectors), self.nlist or max(1, round(4 * len(vectors) ** 0.5)))
            index = faiss.IndexIVFFlat(
                faiss.IndexFlatIP(width), width, nlist, faiss.METRIC_INNER_PRODUCT
            )
            index.cp.seed = 0
            index.train(vectors)
            index.nprobe = min(self.nprobe, nlist)
        index.add(vectors)
        return index

    def _maxsim(self, query: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """(len(rows),) float32 MaxSim of ``query`` (Tq, D) against the documents at ``rows``
        (ascending), on their packed tokens (`heads.late_interaction.maxsim_packed`)."""
        starts, stops = self.offsets[rows], self.offsets[rows + 1]
        lengths = stops - starts
        if len(rows) == len(self):  # every document: the stored rows as they are
            tokens = self.vectors
        else:  # the candidates' token rows, document after document
            shift = np.repeat(starts - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
            tokens = self.vectors[np.arange(int(lengths.sum())) + shift]
        owner = np.repeat(np.arange(len(rows)), lengths)
        scores = maxsim_packed(
            torch.from_numpy(np.ascontiguousarray(query)),
            torch.from_numpy(np.ascontiguousarray(tokens)),
            torch.from_numpy(owner),
            len(rows),
        )
        return scores.numpy()

    def search(
        self,
        queries: Sequence[np.ndarray],
        top_k: int = 10,
        *,
        token_k: int = TOKEN_K,
        exhaustive: bool = False,
    ) -> list[list[Hit]]:
        """The ``top_k`` documents by MaxSim per query token matrix, best first (score
        descending, then row ascending).

        Args:
            queries: (Tq, D) float32 token matrices (`ColBERTEncoder.encode`, ``is_query``).
            top_k: hits per query.
            token_k: nearest document tokens per query token in candidate generation.
            exhaustive: score every document (exact MaxSim search, no candidate stage).

        Raises:
            InputError: top_k or token_k < 1, or a query matrix of another width.
        """
        if top_k < 1 or token_k < 1:
            raise InputError(f"top_k and token_k must be >= 1, got {top_k} and {token_k}")
        width = self.vectors.shape[1]
        out = []
        for n, q in enumerate(queries):
            q = np.asarray(q, dtype=np.float32)
            if q.ndim != 2 or q.shape[1] != width or not len(q):
                raise InputError(
                    f"query {n}: token matrix of shape {q.shape}; expected (T >= 1, {width})"
                )
            if not len(self):
                out.append([])
                continue
            rows = np.arange(len(self)) if exhaustive else self._candidates(q, token_k)
            scores = self._maxsim(q, rows)
            out.append([Hit(int(rows[h.index]), h.score) for h in top_hits(scores, top_k)])
        return out

    def _search_encoded(
        self, queries: list[np.ndarray], top_k: int, **options: Any
    ) -> list[list[IndexHit]]:
        return self.hits(self.search(queries, top_k, **options))
