"""`TextClassifier`: raw text (or text pairs) → label names with probabilities."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from ..pretrained import from_pretrained
from ..tokenization import load_tokenizer
from ..train.data import sorted_batches
from .batching import token_lengths


class TextClassifier:
    """A fine-tuned sequence-classification model directory, ready to label text.

    Args:
        path: a directory holding a ``*ForSequenceClassification`` model and its tokenizer.
        max_length: inputs are cut to this many tokens (default: the tokenizer's limit).

    Raises:
        ValueError: the directory's model has no "classify" head.
    """

    def __init__(self, path: str | Path, max_length: int | None = None) -> None:
        self.model = from_pretrained(path).eval()
        if self.model.task != "classify":
            raise ValueError(f"{path} holds a {self.model.task!r} head, not a sequence classifier")
        self.tokenizer = load_tokenizer(path)
        self.max_length = max_length
        self.labels = self.model.config.label_names

    @torch.no_grad()
    def __call__(
        self,
        texts: str | Sequence[str],
        text_pairs: str | Sequence[str] | None = None,
        *,
        top_k: int = 1,
        batch_size: int = 32,
    ) -> list[list[dict]]:
        """Per text, the ``top_k`` labels as ``{"label", "score"}`` (softmax probability),
        best first; a regression model (one label) gives ``[{"label", "score": value}]``."""
        texts = [texts] if isinstance(texts, str) else list(texts)
        pairs = [text_pairs] if isinstance(text_pairs, str) else text_pairs
        out: list[list[dict]] = [[] for _ in texts]
        for idx in sorted_batches(
            token_lengths(self.tokenizer, texts, pairs, self.max_length), batch_size
        ):
            enc = self.tokenizer(
                [texts[i] for i in idx],
                [pairs[i] for i in idx] if pairs is not None else None,
                max_length=self.max_length,
            )
            logits = self.model(**enc).logits.float()  # (B, C)
            if logits.shape[-1] == 1:
                for i, v in zip(idx, logits[:, 0]):
                    out[i] = [{"label": self.labels[0], "score": float(v)}]
                continue
            probs = logits.softmax(-1)
            top = probs.topk(min(top_k, probs.shape[-1]), dim=-1)
            for i, ps, js in zip(idx, top.values, top.indices):
                out[i] = [
                    {"label": self.labels[j], "score": float(p)}
                    for p, j in zip(ps.tolist(), js.tolist())
                ]
        return out
