"""The BM25 index: lexical search on `bm25s` (Lù 2024, "BM25S: Orders of magnitude faster
lexical search via eager sparse scoring"), in the directory layout of every index.

BM25 (Robertson & Zaragoza 2009, "The Probabilistic Relevance Framework: BM25 and Beyond",
eq. 3.15) scores a document d for a query q as Σ_{t ∈ q} idf(t) · tf(t, d) · (k1 + 1) /
(tf(t, d) + k1 · (1 − b + b · |d| / avgdl)); `bm25s` precomputes every (term, document) score
at build time (its "eager" sparse matrix) and a query sums the columns of its terms. The
variant is bm25s's ``method`` (default ``"lucene"``: idf = ln(1 + (N − df + 0.5) / (df +
0.5)), always positive).

Tokenisation is bm25s's own ``bm25s.tokenize``: lower-cased, split by the regular expression
``(?u)\\b\\w\\w+\\b`` (words of two or more letters or digits, as scikit-learn's
CountVectorizer), English stopwords removed (bm25s's list; ``stopwords=None`` keeps every
word), no stemming by default. ``stemmer="english"`` (any PyStemmer algorithm) stems with
PyStemmer's Snowball stemmers when the ``PyStemmer`` package is installed, and is refused
naming it otherwise. Queries are tokenised with the index's own settings (``meta.json``).

The directory (the layout of `base.Index`: ``meta.json``, ``texts.jsonl``) holds bm25s's own
files, written by ``BM25.save`` and read by ``BM25.load`` (numpy arrays, no pickle), in
``bm25s/``: the (term × document) score matrix in CSC form (``data``, ``indices``,
``indptr``), the vocabulary and bm25s's parameters. A BM25 index needs no model: `build`,
`add` and `search_texts` take texts.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ...errors import InputError, VectorIndexError
from ...runtime import require
from ...tokenization.cutting import unreadable_input
from .base import (
    Hit,
    Index,
    IndexHit,
    check_new_ids,
    check_texts,
    files_disagree,
    meta_error,
    top_hits,
)

__all__ = ["BM25Index", "BM25_DIR", "METHODS"]

#: the subdirectory of an index directory that holds bm25s's files
BM25_DIR = "bm25s"
#: the BM25 variants bm25s scores (its ``method``)
METHODS = ("robertson", "lucene", "atire", "bm25l", "bm25+")
STOPWORDS = ("en", None)
_DTYPE_KINDS = {(p, i, "f") for p in "iu" for i in "iu"}  # indptr, indices, data


def _bm25s():
    return require("bm25s", "bm25", "the BM25 index (index build --kind bm25)")


def _stemmer(name: str | None) -> Callable[[list[str]], list[str]] | None:
    """PyStemmer's ``stemWords`` of algorithm ``name`` (None: no stemming).

    Raises:
        MissingDependency: PyStemmer is not installed.
        InputError: ``name`` is not one of PyStemmer's algorithms.
    """
    if name is None:
        return None
    stemmer_module = require("Stemmer", "bm25", f"stemming ({name!r}) in a BM25 index")
    if name not in stemmer_module.algorithms():
        raise InputError(
            f"stemmer {name!r} is not one of PyStemmer's {sorted(stemmer_module.algorithms())}"
        )
    return stemmer_module.Stemmer(name).stemWords


class BM25Index(Index):
    """Texts scored by BM25 through a `bm25s.BM25` retriever (see the module docstring).

    Build one with `build`, open one with `load` (or `retrieval.open_index`).

    Attributes:
        retriever: the `bm25s.BM25` holding the (term × document) scores.
        k1, b, method: the BM25 parameters; stopwords: "en" or None; stemmer: a PyStemmer
            algorithm name or None.
    """

    kinds: ClassVar[tuple[str, ...]] = ("bm25",)
    label: ClassVar[str] = "bm25"

    @classmethod
    def create(
        cls,
        identity: Any = None,
        *,
        k1: float = 1.5,
        b: float = 0.75,
        method: str = "lucene",
        stopwords: str | None = "en",
        stemmer: str | None = None,
    ) -> BM25Index:
        """An empty BM25 index (``identity`` must be None: BM25 has no model).

        Args:
            k1: term-frequency saturation (> 0); b: length normalisation in [0, 1].
            method: one of `METHODS` (bm25s's variants).
            stopwords: "en" (bm25s's English list) or None (keep every word).
            stemmer: None, or a PyStemmer algorithm (e.g. "english"); needs PyStemmer.

        Raises:
            InputError: a setting out of range or unknown, or an identity.
            MissingDependency: bm25s (or, for ``stemmer``, PyStemmer) is not installed.
        """
        if identity is not None:
            raise InputError("a BM25 index has no model: give no identity")
        if not (isinstance(k1, int | float) and np.isfinite(k1) and k1 > 0):
            raise InputError(f"k1 must be a finite number > 0, got {k1!r}")
        if not (isinstance(b, int | float) and 0 <= b <= 1):
            raise InputError(f"b must lie in [0, 1], got {b!r}")
        if method not in METHODS:
            raise InputError(f"method must be one of {METHODS}, got {method!r}")
        if stopwords not in STOPWORDS:
            raise InputError(f"stopwords must be 'en' or None, got {stopwords!r}")
        _bm25s()
        _stemmer(stemmer)  # refused now, not at the first add
        self = cls.__new__(cls)
        self._init_rows("bm25", None, [], [])
        self.k1, self.b, self.method = float(k1), float(b), method
        self.stopwords, self.stemmer = stopwords, stemmer
        self.retriever = None
        return self

    @classmethod
    def build(
        cls,
        texts: Sequence[str],
        ids: Sequence[Any] | None = None,
        *,
        progress: Callable[[int], None] | None = None,
        **settings: Any,
    ) -> BM25Index:
        """A BM25 index of ``texts`` (no model).

        Args:
            ids: one per text (default 0..N-1).
            progress: called with the number of texts once they are indexed.
            settings: `create`'s (k1, b, method, stopwords, stemmer).

        Raises:
            InputError: see `create` and `add`.
        """
        index = cls.create(**settings)
        index.add(texts, ids, progress=progress)
        return index

    # --- rows ------------------------------------------------------------------------------
    def add(
        self,
        texts: Sequence[str],
        ids: Sequence[Any] | None = None,
        *,
        progress: Callable[[int], None] | None = None,
    ) -> None:
        """Append texts (ids default to continuing the row numbers) and index the whole
        corpus again: BM25's idf and average length depend on every document, and bm25s
        builds its score matrix in one pass.

        Raises:
            InputError: no texts, a blank text (it would never be found), a text that is not
                a string, no indexable word in the whole corpus, counts that differ, or an id
                already in the index or repeated. Nothing is added then.
        """
        texts = list(texts)
        if not texts:
            raise InputError("give at least one text")
        bad = next((n for n, t in enumerate(texts) if not isinstance(t, str)), None)
        if bad is not None:
            raise InputError(f"text {bad} (0-based) is a {type(texts[bad]).__name__}, not a str")
        check_texts(texts)
        problem = unreadable_input(texts)
        if problem is not None:
            raise InputError(f"text {problem.removeprefix('input ')}")
        ids = list(range(len(self), len(self) + len(texts))) if ids is None else list(ids)
        if len(ids) != len(texts):
            raise InputError(f"{len(texts)} texts, {len(ids)} ids")
        keys = check_new_ids(self.ids, self._id_keys, ids)
        self.retriever = self._index(self.texts + texts)
        self.texts.extend(texts)
        self.ids.extend(ids)
        self._id_keys = keys
        if progress is not None:
            progress(len(texts))

    def add_vectors(self, vectors: Any, texts=None, ids=None) -> None:
        """Refused: a BM25 index holds texts (`add`).

        Raises:
            InputError: always.
        """
        raise InputError("a BM25 index is built from texts, not vectors: use add(texts, ids)")

    def _tokenize(self, texts: list[str], *, return_ids: bool):
        bm25s = _bm25s()
        return bm25s.tokenize(
            texts,
            lower=True,
            stopwords=self.stopwords,
            stemmer=_stemmer(self.stemmer),
            return_ids=return_ids,
            show_progress=False,
        )

    def _index(self, texts: list[str]):
        """A new `bm25s.BM25` over every text."""
        bm25s = _bm25s()
        retriever = bm25s.BM25(k1=self.k1, b=self.b, method=self.method)
        logging.getLogger("bm25s").setLevel(logging.WARNING)
        tokens = self._tokenize(texts, return_ids=True)
        if not tokens.vocab:  # bm25s would fail deep inside (max() of no terms)
            raise InputError(
                f"none of the {len(texts)} texts holds an indexable word (BM25 keeps words of "
                "2+ letters or digits, lower-cased"
                + (", stopwords removed)" if self.stopwords else ")")
            )
        retriever.index(tokens, show_progress=False)
        return retriever

    # --- persistence (the hooks of `base.Index`) -----------------------------------------
    def _settings(self) -> dict[str, Any]:
        return {
            "k1": self.k1,
            "b": self.b,
            "method": self.method,
            "stopwords": self.stopwords,
            "stemmer": self.stemmer,
            "tokenizer": "bm25s.tokenize (lower-cased, (?u)\\b\\w\\w+\\b)",
            "vocabulary": 0 if self.retriever is None else len(self.retriever.vocab_dict),
        }

    def _write(self, directory: Path) -> None:
        if self.retriever is None:
            raise InputError("this BM25 index holds no texts yet: add texts before saving")
        self.retriever.save(directory / BM25_DIR, show_progress=False)

    def _read(self, path: Path, meta: dict[str, Any]) -> None:
        """bm25s's files in ``bm25s/``: parameters as ``meta.json`` records them, a CSC
        matrix of ``count`` documents, vocabulary ids inside it, finite scores."""
        for name, ok in (
            ("k1", lambda v: isinstance(v, int | float) and v > 0),
            ("b", lambda v: isinstance(v, int | float) and 0 <= v <= 1),
            ("method", lambda v: v in METHODS),
            ("stopwords", lambda v: v in STOPWORDS),
            ("stemmer", lambda v: v is None or isinstance(v, str)),
        ):
            if not ok(meta.get(name)):
                raise meta_error(path, f"{name} {meta.get(name)!r} is not a BM25 setting")
        self.k1, self.b, self.method = float(meta["k1"]), float(meta["b"]), meta["method"]
        self.stopwords, self.stemmer = meta["stopwords"], meta["stemmer"]
        bm25s = _bm25s()
        where = path / BM25_DIR
        try:
            retriever = bm25s.BM25.load(where, load_corpus=False, mmap=False, allow_pickle=False)
        except (OSError, ValueError, KeyError, TypeError, json.JSONDecodeError) as e:
            raise VectorIndexError(f"cannot read the BM25 index in {where}: {e}") from e
        scores, vocab = retriever.scores, retriever.vocab_dict
        data, indices, indptr = scores["data"], scores["indices"], scores["indptr"]
        if (retriever.k1, retriever.b, retriever.method) != (self.k1, self.b, self.method):
            raise files_disagree(
                path,
                f"{BM25_DIR}/ holds k1={retriever.k1}, b={retriever.b}, {retriever.method}; "
                f"meta.json k1={self.k1}, b={self.b}, {self.method}",
            )
        if scores.get("num_docs") != meta["count"]:
            raise files_disagree(
                path, f"{BM25_DIR}/ scores {scores.get('num_docs')} documents, {meta['count']} rows"
            )
        if not all(isinstance(a, np.ndarray) and a.ndim == 1 for a in (data, indices, indptr)):
            raise files_disagree(path, f"{BM25_DIR}/ arrays must be 1-D")
        if (indptr.dtype.kind, indices.dtype.kind, data.dtype.kind) not in _DTYPE_KINDS:
            raise files_disagree(path, f"{BM25_DIR}/ dtypes {data.dtype}, {indices.dtype}")
        terms = len(indptr) - 1
        if (
            terms < 0
            or indptr[0] != 0
            or np.any(np.diff(indptr) < 0)
            or not (indptr[-1] == len(indices) == len(data))
        ):
            raise files_disagree(path, f"{BM25_DIR}/ indptr is not a CSC column pointer")
        if len(indices) and (indices.min() < 0 or indices.max() >= meta["count"]):
            raise files_disagree(path, f"{BM25_DIR}/ document rows outside [0, {meta['count']})")
        if not np.all(np.isfinite(data)):
            raise files_disagree(path, f"{BM25_DIR}/ scores that are not finite")
        if not isinstance(vocab, dict) or not all(
            isinstance(t, str) and isinstance(i, int) and 0 <= i <= terms for t, i in vocab.items()
        ):
            raise files_disagree(path, f"{BM25_DIR}/ vocabulary ids outside [0, {terms}]")
        if meta.get("vocabulary") != len(vocab):
            raise files_disagree(
                path, f"{BM25_DIR}/ holds {len(vocab)} terms, meta.json {meta.get('vocabulary')}"
            )
        self.retriever = retriever

    # --- queries ---------------------------------------------------------------------------
    def scores(self, query: str) -> np.ndarray:
        """(N,) float32 BM25 scores of every document for ``query`` (bm25s's
        ``get_scores`` on the query's tokens; 0 for a query without an indexed term)."""
        return self._scores(self._query_tokens([query])[0])[0]

    def _query_tokens(self, queries: Sequence[str]) -> list[list[str]]:
        queries = list(queries)
        bad = next((n for n, q in enumerate(queries) if not isinstance(q, str)), None)
        if bad is not None:
            raise InputError(f"query {bad} (0-based) is a {type(queries[bad]).__name__}, not a str")
        if self.retriever is None:
            raise InputError("this BM25 index holds no texts yet")
        return self._tokenize(queries, return_ids=False)

    def _scores(self, tokens: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(N,) scores and (N,) bool: the documents holding one of ``tokens``."""
        n = len(self)
        ids = self.retriever.get_tokens_ids(tokens)
        if not ids:
            return np.zeros(n, dtype=np.float32), np.zeros(n, dtype=bool)
        scores = np.asarray(self.retriever.get_scores(ids), dtype=np.float32)
        indptr, indices = self.retriever.scores["indptr"], self.retriever.scores["indices"]
        touched = np.zeros(n, dtype=bool)
        for t in ids:
            touched[indices[indptr[t] : indptr[t + 1]]] = True
        return scores, touched

    def search(self, queries: Sequence[str], top_k: int = 10) -> list[list[Hit]]:
        """The ``top_k`` documents by BM25 score per query, best first (ties: the lower row
        first); only documents holding a query term are hits (possibly fewer than
        ``top_k``; none for a query of stopwords or unknown words).

        Raises:
            InputError: top_k < 1, or a query that is not a string.
        """
        if top_k < 1:
            raise InputError(f"top_k must be >= 1, got {top_k}")
        problem = unreadable_input(list(queries))
        if problem is not None:  # bm25s would drop the bad characters and find nothing
            raise InputError(f"query {problem.removeprefix('input ')}")
        out = []
        for tokens in self._query_tokens(queries):
            scores, touched = self._scores(tokens)
            rows = np.flatnonzero(touched)
            out.append([Hit(int(rows[h.index]), h.score) for h in top_hits(scores[rows], top_k)])
        return out

    def search_texts(
        self, queries: Sequence[str], top_k: int = 5, **options: Any
    ) -> list[list[IndexHit]]:
        """`search` with each hit's id and text (no model: BM25 tokenises the queries).

        Raises:
            InputError: see `search`; an unknown keyword argument.
        """
        if options:
            raise InputError(f"a BM25 search takes no options, got {sorted(options)}")
        return self.hits(self.search(queries, top_k=top_k))
