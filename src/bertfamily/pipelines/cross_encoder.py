"""`CrossEncoderScorer`: a reranker (cross-encoder) directory scoring (query, passage) pairs.

The directory is a Hugging Face sequence-classification model with one output (what
`recipes.rerank.train_reranker` writes and sentence-transformers' ``CrossEncoder`` loads); the
score of a pair is the sigmoid of its logit, as ``CrossEncoder.predict`` gives for one label.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from ..errors import InputError
from ..pretrained import from_pretrained
from ..tokenization.tokenizer import load_tokenizer
from .batching import token_lengths

__all__ = ["CrossEncoderScorer", "pair_logits"]


def pair_logits(
    model: torch.nn.Module,
    tokenizer,
    pairs: Sequence[tuple[str, str]],
    *,
    max_length: int,
    batch_size: int = 32,
) -> np.ndarray:
    """(N,) float32 logits of a one-output classify model on text pairs, batched by length,
    in eval mode under ``no_grad`` (the mode is restored)."""
    if not pairs:
        return np.zeros(0, dtype=np.float32)
    first, second = [p[0] for p in pairs], [p[1] for p in pairs]
    order = np.argsort(
        token_lengths(tokenizer, first, second, max_length=max_length), kind="stable"
    )
    out = np.zeros(len(pairs), dtype=np.float32)
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for i in range(0, len(order), batch_size):
                idx = order[i : i + batch_size]
                enc = tokenizer(
                    [first[j] for j in idx], [second[j] for j in idx], max_length=max_length
                )
                feats = {
                    k: v.to(device)
                    for k, v in enc.items()
                    if k in ("input_ids", "attention_mask", "token_type_ids")
                }
                out[idx] = model(**feats).logits.float().view(-1).cpu().numpy()
    finally:
        model.train(was_training)
    return out


class CrossEncoderScorer:
    """Pairs → relevance scores in [0, 1] with a reranker directory.

    Raises:
        ValueError: the directory's model does not have exactly one output.
    """

    def __init__(self, path: str | Path, max_length: int = 512, device: str = "cpu") -> None:
        self.model = from_pretrained(path).to(device).eval()
        if self.model.task != "classify" or len(self.model.config.label_names or ()) != 1:
            raise InputError(f"{path} is not a one-output sequence-classification (reranker) model")
        self.tokenizer = load_tokenizer(path)
        self.max_length = min(max_length, self.model.config.max_sequence_length)

    def predict(self, pairs: Sequence[tuple[str, str]], batch_size: int = 32) -> np.ndarray:
        """(N,) sigmoid scores of (query, passage) pairs."""
        logits = pair_logits(
            self.model, self.tokenizer, pairs, max_length=self.max_length, batch_size=batch_size
        )
        return 1.0 / (1.0 + np.exp(-logits))
