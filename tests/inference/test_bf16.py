"""bf16 inference: finite and close to fp32 (stated tolerance: mean-pooled cosine >= 0.999)."""

from __future__ import annotations

import numpy as np
import torch

from bertfamily.pipelines.embedding.embed import SentenceEmbedder

SENTENCES = [
    "A man is eating food.",
    "The girl is carrying a baby.",
    "北京是中国的首都。",
    "It was the best of times, it was the worst of times. " * 10,
    "short",
]


def test_bf16_embeddings_close_to_fp32(minilm_dir):
    fp32 = SentenceEmbedder(minilm_dir, dtype="fp32").encode(SENTENCES)
    bf16_model = SentenceEmbedder(minilm_dir, dtype=torch.bfloat16)
    assert next(bf16_model.model.parameters()).dtype == torch.bfloat16
    bf16 = bf16_model.encode(SENTENCES)
    assert np.isfinite(bf16).all()
    cos = (fp32 * bf16).sum(1) / np.linalg.norm(bf16, axis=1)
    assert cos.min() >= 0.999, cos
