"""The real all-MiniLM-L6-v2 checkpoint against transformers (mean pooling + normalisation)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import bertfamily as bf
from bertfamily.pipelines.embedding.embed import SentenceEmbedder, cosine_matrix, semantic_search

SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "A woman is playing violin.",
    "Two men pushed carts through the woods.",
    "A man is riding a white horse on an enclosed ground.",
    "A monkey is playing drums.",
    "Someone in a gorilla costume is playing a set of drums.",
    "Café au lait, s'il vous plaît.",
    "Müller's Straße ist naß.",
    "北京是中国的首都。",
    "東京は日本の首都です。",
    "Москва — столица России.",
    "Η Αθήνα είναι η πρωτεύουσα της Ελλάδας.",
    "I love pizza 🍕 and sushi 🍣!",
    "The quick brown fox jumps over the lazy dog.",
    "",
    "   whitespace   around   ",
    "It was the best of times, it was the worst of times, " * 20,
    "naïve coöperation résumé",
    "[MASK] tokens in text",
]


@pytest.fixture(scope="module")
def reference(minilm_dir):
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    model = transformers.AutoModel.from_pretrained(minilm_dir).eval()
    batch = tok(SENTENCES, padding=True, truncation=True, max_length=256, return_tensors="pt")
    with torch.no_grad():
        h = model(**batch).last_hidden_state
    m = batch["attention_mask"][..., None].float()
    emb = (h * m).sum(1) / m.sum(1)
    return torch.nn.functional.normalize(emb, dim=-1).numpy()


def test_embeddings_equal_transformers(minilm_dir, reference):
    embedder = SentenceEmbedder(minilm_dir, dtype="fp32")
    assert embedder.max_length == 256  # sentence_bert_config.json
    assert embedder.pooling.mode == "mean" and embedder.pooling.normalize
    ours = embedder.encode(SENTENCES, batch_size=5)
    assert ours.shape == (len(SENTENCES), 384)
    np.testing.assert_allclose(ours, reference, atol=1e-5, rtol=0)
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)


def test_paraphrase_scores_higher_than_unrelated(minilm_dir):
    embedder = SentenceEmbedder(minilm_dir, dtype="fp32")
    v = embedder.encode(
        [
            "A man is eating food.",
            "A man is eating a piece of bread.",
            "The girl is carrying a baby.",
        ]
    )
    sims = cosine_matrix(v, v)
    assert sims[0, 1] > 0.6 > 0.1 > sims[0, 2]


def test_semantic_search(minilm_dir):
    embedder = SentenceEmbedder(minilm_dir, dtype="fp32")
    corpus = SENTENCES[:9]
    hits = semantic_search(
        embedder, ["A man is eating pasta.", "Someone is riding a horse."], corpus, top_k=2
    )
    assert hits[0][0].text == "A man is eating food."
    assert {h.index for h in hits[1]} == {3, 6}
    assert hits[0][0].score >= hits[0][1].score


def test_real_model_loads_strictly(minilm_dir):
    model, report = bf.from_pretrained(minilm_dir, return_report=True)
    assert report.clean and report.dropped == ["bert.embeddings.position_ids"]
    assert model.num_parameters() == 22_713_216
