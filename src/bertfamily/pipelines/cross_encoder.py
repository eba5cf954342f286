"""`pair_logits`: the logits of a one-output sequence-classification model (a cross-encoder
being trained) on text pairs, for evaluation during training. A saved reranker directory is
scored with `bertfamily.pipelines.rerank.Reranker` (= sentence-transformers' ``CrossEncoder``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from .batching import token_lengths

__all__ = ["pair_logits"]


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
