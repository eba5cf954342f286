"""`Reranker`: a cross-encoder (Nogueira & Cho 2019, "Passage Re-ranking with BERT" §3) scores
(query, document) pairs read together by one encoder; `rank` orders documents for a query.

Directories in both layouts load (`sentence_modules.read_cross_encoder`): a plain Hugging Face
sequence-classification directory (ms-marco cross-encoders) and a sentence-transformers 6
CrossEncoder directory. Scores equal sentence-transformers' ``CrossEncoder.predict``: the
logits through the model's default activation (Sigmoid for one label unless the directory
names another), or the raw logits.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import torch

from ...errors import InputError
from ...inference.batches import FEATURE_KEYS, TokenRows, run_batches, tokenize_rows
from ...inference.loading import load_into
from ...resources.resolve import resolve_model
from ..embedding.sentence_modules import read_cross_encoder

__all__ = ["RankedDocument", "Reranker", "check_top_k", "ranked_documents"]


class RankedDocument(dict):
    """One document of `Reranker.rank`, as sentence-transformers' ``CrossEncoder.rank`` gives
    it: a dict with ``"corpus_id"`` (its index in the documents given), ``"score"`` and, when
    asked, ``"text"``; the same values are attributes too (``d.corpus_id``, ``d.score``,
    ``d.text``, None when not asked), as earlier bertfamily versions returned them."""

    def __init__(self, corpus_id: int, score: float, text: str | None = None) -> None:
        super().__init__(corpus_id=corpus_id, score=score)
        if text is not None:
            self["text"] = text

    @property
    def corpus_id(self) -> int:
        """The document's index in the documents given."""
        return self["corpus_id"]

    @property
    def score(self) -> float:
        """Its score against the query."""
        return self["score"]

    @property
    def text(self) -> str | None:
        """Its text, None unless ``return_documents``."""
        return self.get("text")

    def __repr__(self) -> str:
        return f"RankedDocument({dict.__repr__(self)})"


def check_top_k(top_k: int | None) -> None:
    """Refuse a ``top_k`` of a ranking that is neither None (all) nor >= 1, before any work.

    Raises:
        InputError: ``top_k`` < 1.
    """
    if top_k is not None and top_k < 1:
        raise InputError(f"top_k must be None or at least 1, got {top_k}")


def ranked_documents(
    scores: np.ndarray, documents: Sequence[str], top_k: int | None, return_documents: bool
) -> list[RankedDocument]:
    """``documents`` by (N,) ``scores``, best first, ties in input order (a stable sort, as
    sentence-transformers' ``CrossEncoder.rank``), the best ``top_k`` (all when None), each a
    `RankedDocument` with its ``text`` when ``return_documents``."""
    order = np.argsort(-scores, kind="stable")[:top_k]
    return [
        RankedDocument(int(i), float(scores[i]), documents[i] if return_documents else None)
        for i in order
    ]


class Reranker:
    """A cross-encoder directory, ready to score text pairs.

    Args:
        path: a directory, resource name or cached ``org/name`` (`resolve_model`).
        max_length: pairs are cut to this many tokens (longest segment first); default the
            directory's ``max_seq_length``, the tokenizer's and the model's limits.
        device: where it runs (as every pipeline, `inference.loading.load_model_and_tokenizer`).
        dtype: parameter dtype: "auto" (default) is fp32, the faithful choice (equal to
            sentence-transformers); "fp32", "bf16", "fastest" (bf16 where the CPU or GPU has
            bf16 units, else fp32) or a torch dtype.
        revision: for a cached ``org/name``: a branch, tag or commit.

    Attributes:
        activation: the default activation module (``activation_fn`` in sentence-transformers).
        num_labels: scores per pair (1 for rerankers).

    Raises:
        SentenceModulesError: not a cross-encoder directory (see `read_cross_encoder`).
        InputError: the model has no sequence-classification head.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        max_length: int | None = None,
        *,
        device: str | torch.device = "cpu",
        dtype: str | torch.dtype | None = "auto",
        revision: str | None = None,
    ) -> None:
        self.path = resolve_model(path, revision)
        self.spec = read_cross_encoder(self.path)
        load_into(
            self,
            self.spec.model_dir,
            device=device,
            dtype=dtype,
            head=("classify", "a cross-encoder"),
        )
        self.labels = self.model.config.label_names
        self.num_labels = len(self.labels)
        self.activation = self.spec.activation_module(self.num_labels)
        self.prompts = dict(self.spec.prompts)
        self.default_prompt_name = self.spec.default_prompt_name
        limits = [
            max_length,
            self.spec.max_seq_length,
            self.tokenizer.model_max_length,
            self.model.config.max_sequence_length,
        ]
        self.max_length = min(x for x in limits if x)
        self.last_truncated = 0

    def tokenize(
        self, pairs: Sequence[Sequence[str]], *, truncation_side: str = "right"
    ) -> TokenRows:
        """The one tokenization of a `predict` (the server calls it once per request and
        hands the rows to `run_tokenized`): each (query, document) pair cut to ``max_length``
        tokens, longest segment first.

        Args:
            pairs: N pairs ``(query, document)``.
            truncation_side: "right" or "left" (which end of the longer segment is cut).

        Returns:
            `TokenRows` of N rows.

        Raises:
            InputError: a pair that is not two strings, or an unknown ``truncation_side``.
        """
        pairs = [tuple(p) for p in pairs]
        for i, p in enumerate(pairs):
            if len(p) != 2 or not all(isinstance(x, str) for x in p):
                raise InputError(f"pair {i} must be two strings (query, document), got {p!r}")
        return tokenize_rows(
            self.tokenizer,
            [p[0] for p in pairs],
            [p[1] for p in pairs],
            max_length=self.max_length,
            truncation_side=truncation_side,
        )

    @torch.inference_mode()
    def run_tokenized(
        self,
        tokens: TokenRows,
        *,
        batch_size: int = 32,
        max_batch_tokens: int | None = None,
        raw_scores: bool = False,
    ) -> np.ndarray:
        """Scores of tokenized pairs (`tokenize`), in their order, through the engine's batch
        loop (`inference.batches.run_batches`: length-sorted batches, padded per batch).

        Args:
            tokens: N rows of `tokenize`.
            batch_size: pairs per forward pass.
            max_batch_tokens: also cap each batch's padded size at this many tokens.
            raw_scores: the logits, without the default activation.

        Returns:
            (N,) float32 for one label, else (N, num_labels) float32.

        Raises:
            InputError: ``batch_size`` or ``max_batch_tokens`` < 1.
        """
        n = len(tokens)
        out = np.zeros((n,) if self.num_labels == 1 else (n, self.num_labels), dtype=np.float32)

        def step(batch: dict[str, torch.Tensor]) -> np.ndarray:
            logits = self.model(**batch).logits.float()  # (B, C)
            scores = logits if raw_scores else self.activation(logits)
            return (scores.squeeze(-1) if self.num_labels == 1 else scores).cpu().numpy()

        for idx, scores in run_batches(
            tokens,
            step,
            pad=self.tokenizer.pad_rows,
            batch_size=batch_size,
            max_batch_tokens=max_batch_tokens,
            device=self.device,
            keys=FEATURE_KEYS,
        ):
            out[idx] = scores
        self.last_truncated = sum(tokens.truncated)
        return out

    def predict(
        self,
        pairs: Sequence[Sequence[str]],
        *,
        batch_size: int = 32,
        raw_scores: bool = False,
        truncation_side: str = "right",
        max_batch_tokens: int | None = None,
    ) -> np.ndarray:
        """Scores of (a, b) pairs, in input order: `run_tokenized` of `tokenize` (each pair
        tokenized once).

        Args:
            pairs: N pairs ``(query, document)``.
            batch_size: pairs per forward pass (length-sorted batches).
            raw_scores: the logits, without the default activation.
            truncation_side: "right" or "left" (which end of the longer segment is cut).
            max_batch_tokens: also cap each batch's padded size at this many tokens.

        Returns:
            (N,) float32 for one label, else (N, num_labels).

        Raises:
            InputError: a pair that is not two strings; ``batch_size`` or
                ``max_batch_tokens`` < 1.
        """
        tokens = self.tokenize(pairs, truncation_side=truncation_side)
        return self.run_tokenized(
            tokens, batch_size=batch_size, max_batch_tokens=max_batch_tokens, raw_scores=raw_scores
        )

    def rank(
        self,
        query: str,
        documents: Sequence[str],
        top_k: int | None = None,
        return_documents: bool = False,
        *,
        batch_size: int = 32,
        raw_scores: bool = False,
        truncation_side: str = "right",
    ) -> list[RankedDocument]:
        """The documents ordered by their score against ``query``, best first (ties keep input
        order), as sentence-transformers' ``CrossEncoder.rank``.

        Args:
            top_k: keep the best ``top_k`` (all when None).
            return_documents: fill each result's ``text``.

        Returns:
            `RankedDocument` dicts ``{"corpus_id", "score"[, "text"]}`` (also attributes).

        Raises:
            InputError: a model with more than one label, or ``top_k`` < 1.
        """
        if self.num_labels != 1:
            raise InputError(f"rank needs a one-label cross-encoder; this one has {self.labels}")
        check_top_k(top_k)
        scores = self.predict(
            [(query, d) for d in documents],
            batch_size=batch_size,
            raw_scores=raw_scores,
            truncation_side=truncation_side,
        )
        return ranked_documents(scores, documents, top_k, return_documents)
