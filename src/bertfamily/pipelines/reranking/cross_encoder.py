"""`pair_logits`: the logits of a one-output sequence-classification model (a cross-encoder
being trained) on text pairs, for evaluation during training. A saved reranker directory is
scored with `bertfamily.pipelines.reranking.rerank.Reranker` (= sentence-transformers'
``CrossEncoder``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from ...inference.batches import FEATURE_KEYS, run_batches, tokenize_rows

__all__ = ["pair_logits"]


def pair_logits(
    model: torch.nn.Module,
    tokenizer,
    pairs: Sequence[tuple[str, str]],
    *,
    max_length: int,
    batch_size: int = 32,
) -> np.ndarray:
    """(N,) float32 logits of a one-output classify model on text pairs, each pair tokenized
    once and run through the engine's length-sorted batch loop (`inference.batches`), in eval
    mode under ``no_grad`` (the mode is restored).

    Raises:
        InputError: ``batch_size`` < 1, or as the tokenizer for pairs it cannot cut.
    """
    tokens = tokenize_rows(
        tokenizer, [p[0] for p in pairs], [p[1] for p in pairs], max_length=max_length
    )
    out = np.zeros(len(pairs), dtype=np.float32)
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for idx, logits in run_batches(
                tokens,
                lambda batch: model(**batch).logits.float().view(-1).cpu().numpy(),
                pad=tokenizer.pad_rows,
                batch_size=batch_size,
                device=device,
                keys=FEATURE_KEYS,
            ):
                out[idx] = logits
    finally:
        model.train(was_training)
    return out
