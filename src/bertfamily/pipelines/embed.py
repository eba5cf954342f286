"""Sentence embeddings and semantic search (Reimers & Gurevych 2019, Sentence-BERT §3)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..pretrained import from_pretrained
from ..tokenization import load_tokenizer
from ..train.data import sorted_batches
from .batching import token_lengths

log = logging.getLogger(__name__)

POOLING_MODES = ("mean", "cls", "max")


def pool(
    last_hidden_state: torch.Tensor,
    attention_mask: torch.Tensor,
    mode: str = "mean",
    normalize: bool = True,
) -> torch.Tensor:
    """Pool token states into one vector per sequence.

    Args:
        last_hidden_state: (B, T, H) float.
        attention_mask: (B, T) 0/1, 1 = real token.
        mode: "mean" (average over real tokens), "cls" (first token), "max" (over real tokens).
        normalize: L2-normalise the result.

    Returns:
        (B, H) float32.

    Raises:
        ValueError: unknown mode.
    """
    h = last_hidden_state.float()
    m = attention_mask.to(h.dtype).unsqueeze(-1)  # (B, T, 1)
    if mode == "mean":
        out = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
    elif mode == "cls":
        out = h[:, 0]
    elif mode == "max":
        out = h.masked_fill(m == 0, torch.finfo(h.dtype).min).amax(1)
    else:
        raise ValueError(f"unknown pooling mode {mode!r}; expected one of {POOLING_MODES}")
    return torch.nn.functional.normalize(out, dim=-1) if normalize else out


@dataclass(frozen=True)
class PoolingSpec:
    """How a sentence-transformers directory pools: mode, L2 normalisation, max tokens."""

    mode: str = "mean"
    normalize: bool = False
    max_seq_length: int | None = None

    @classmethod
    def from_directory(cls, path: Path) -> PoolingSpec:
        """Read modules.json, 1_Pooling/config.json and sentence_bert_config.json when present
        (plain Hugging Face directories get mean pooling, normalised)."""
        modules_file = path / "modules.json"
        if not modules_file.is_file():
            return cls(mode="mean", normalize=True)
        modules = json.loads(modules_file.read_text())
        normalize = any(m.get("type", "").endswith("Normalize") for m in modules)
        mode = "mean"
        for m in modules:
            if m.get("type", "").endswith("Pooling"):
                cfg_file = path / m.get("path", "") / "config.json"
                if cfg_file.is_file():
                    cfg = json.loads(cfg_file.read_text())
                    if cfg.get("pooling_mode_cls_token"):
                        mode = "cls"
                    elif cfg.get("pooling_mode_max_tokens"):
                        mode = "max"
        max_len = None
        st = path / "sentence_bert_config.json"
        if st.is_file():
            max_len = json.loads(st.read_text()).get("max_seq_length")
        return cls(mode=mode, normalize=normalize, max_seq_length=max_len)


class SentenceEmbedder:
    """Text → sentence embeddings with any bertfamily model directory.

    Args:
        model_dir: a local Hugging Face model directory (with its tokenizer files).
        pooling: override of the directory's pooling spec.
        dtype: parameter dtype (torch.float32 default; torch.bfloat16 where supported).
        device: torch device.

    Raises:
        ModelDirectoryError / CheckpointError / TokenizerNotFoundError: see the loaders.
    """

    def __init__(
        self,
        model_dir: str | Path,
        *,
        pooling: PoolingSpec | None = None,
        dtype: torch.dtype | None = None,
        device: str | torch.device = "cpu",
    ) -> None:
        self.path = Path(model_dir)
        self.model = from_pretrained(self.path, dtype=dtype).to(device)
        self.tokenizer = load_tokenizer(self.path)
        self.pooling = pooling or PoolingSpec.from_directory(self.path)
        self.device = torch.device(device)
        limits = [
            x
            for x in (
                self.pooling.max_seq_length,
                self.tokenizer.model_max_length,
                self.model.config.max_sequence_length,
            )
            if x
        ]
        self.max_length = min(limits)
        self.last_truncated = 0  # texts cut to max_length by the last `encode`

    @property
    def dimension(self) -> int:
        """Length of each embedding vector (H)."""
        return self.model.config.hidden_size

    @torch.inference_mode()
    def encode(
        self,
        texts: Sequence[str],
        *,
        batch_size: int = 32,
        progress: Callable[[int], None] | None = None,
    ) -> np.ndarray:
        """Embed texts.

        Texts are sorted by token count so each batch pads little, then restored to input
        order. Texts longer than ``max_length`` tokens are truncated (the tokenizer cuts a
        huge text by characters first, so its cost is bounded by ``max_length``); how many
        were is logged and kept in ``last_truncated``.

        Args:
            texts: N strings.
            batch_size: sequences per forward pass.
            progress: called with the number of texts done after each batch.

        Returns:
            (N, H) float32 array (L2-normalised when the model's pooling says so).
        """
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        truncated = 0
        lengths = token_lengths(self.tokenizer, texts, max_length=self.max_length)
        for idx in sorted_batches(lengths, batch_size):
            batch = self.tokenizer(
                [texts[i] for i in idx], max_length=self.max_length, return_truncated=True
            )
            truncated += int(batch["truncated"].sum())
            batch = {
                k: v.to(self.device)
                for k, v in batch.items()
                if k in ("input_ids", "attention_mask", "token_type_ids")
            }
            hidden = self.model.encoder(**batch).last_hidden_state
            vec = pool(hidden, batch["attention_mask"], self.pooling.mode, self.pooling.normalize)
            out[idx] = vec.cpu().numpy()
            if progress is not None:
                progress(len(idx))
        self.last_truncated = truncated
        if truncated:
            log.info(
                "%d of %d texts were longer than %d tokens and were truncated",
                truncated,
                len(texts),
                self.max_length,
            )
        return out


@dataclass(frozen=True)
class Hit:
    """One search result: corpus index, cosine similarity, and the text."""

    index: int
    score: float
    text: str


def cosine_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(N, H), (M, H) → (N, M) cosine similarities (rows need not be normalised)."""
    a = a / np.clip(np.linalg.norm(a, axis=1, keepdims=True), 1e-12, None)
    b = b / np.clip(np.linalg.norm(b, axis=1, keepdims=True), 1e-12, None)
    return a @ b.T


def semantic_search(
    embedder: SentenceEmbedder,
    queries: Sequence[str],
    corpus: Sequence[str],
    top_k: int = 5,
    corpus_embeddings: np.ndarray | None = None,
    batch_size: int = 32,
) -> list[list[Hit]]:
    """The ``top_k`` corpus entries closest (cosine) to each query, best first.

    Raises:
        ValueError: top_k < 1.
    """
    if top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}")
    if corpus_embeddings is None:
        corpus_embeddings = embedder.encode(corpus, batch_size=batch_size)
    sims = cosine_matrix(embedder.encode(queries, batch_size=batch_size), corpus_embeddings)
    k = min(top_k, len(corpus))
    results = []
    for row in sims:
        best = np.argsort(-row, kind="stable")[:k]
        results.append([Hit(int(i), float(row[i]), corpus[i]) for i in best])
    return results
