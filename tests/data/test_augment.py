"""TinyBERT data augmentation (Jiao et al. 2020 §3.2, Algorithm 1) on the real MiniLM
vocabulary and embeddings: candidates, replacement statistics, the task-distillation wiring."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bertfamily.data.augment import AugmentConfig, Augmenter

pytestmark = pytest.mark.usefixtures("one_thread")

TEXTS = [
    "the weather is lovely today in manchester",
    "i really hate mondays so much",
    "what a hypocritical statement from the minister",
]


@pytest.fixture(scope="module")
def minilm(minilm_dir):
    import bertfamily as bf

    return bf.from_pretrained(minilm_dir).eval(), bf.load_tokenizer(minilm_dir)


def test_embedding_neighbours_are_real_synonyms(minilm):
    model, tok = minilm
    aug = Augmenter(model, tok, AugmentConfig(mlm=False))
    (lovely, hypo), source = aug.candidates(["lovely", "hypocritical"])
    assert source == ["embedding", "embedding"] and len(lovely) == len(hypo) == 15
    assert {"beautiful", "wonderful"} <= set(lovely) and "lovely" not in lovely
    assert len(tok.backend.encode("hypocritical", add_special_tokens=False).ids) > 1
    assert all(not c.startswith("##") for c in lovely + hypo)


def test_replacement_statistics_follow_p_t(minilm):
    """N_a samples per text, word counts kept, ≈ p_t of the words replaced, each by one of
    its candidates."""
    model, tok = minilm
    aug = Augmenter(model, tok, AugmentConfig(mlm=False, samples=150, replace_prob=0.4))
    out, stats = aug.augment(TEXTS, np.random.default_rng(0))
    assert [len(s) for s in out] == [150, 150, 150]
    assert stats.samples == 450 and stats.examples == 3
    assert stats.words == 150 * sum(len(t.split()) for t in TEXTS)
    assert stats.replace_rate == pytest.approx(0.4, abs=0.02)
    for text, samples in zip(TEXTS, out):
        words = text.split()
        cands, _ = aug.candidates(words)
        for sample in samples:
            new = sample.split()
            assert len(new) == len(words)
            assert all(n == w or n in c for n, w, c in zip(new, words, cands))
    none, s0 = Augmenter(model, tok, AugmentConfig(mlm=False, replace_prob=0.0)).augment(
        TEXTS[:1], np.random.default_rng(0)
    )
    assert set(none[0]) == {TEXTS[0]} and s0.replaced == 0


def test_mlm_candidates_for_single_pieces(minilm_dir):
    """With an MLM head: single-piece words take the head's top-K whole words at their masked
    position (recomputed here), longer words embedding neighbours."""
    import bertfamily as bf
    from bertfamily.recipes.pretrain import load_for_continued_pretraining

    torch.manual_seed(0)
    model, _ = load_for_continued_pretraining(minilm_dir, ["mlm"])
    model.eval()
    tok = bf.load_tokenizer(minilm_dir)
    aug = Augmenter(model, tok, AugmentConfig(candidates=5))
    words = TEXTS[2].split()
    cands, source = aug.candidates(words)
    assert source == ["mlm", "mlm", "embedding", "mlm", "mlm", "mlm", "mlm"]
    ids = tok(" ".join(words), return_tensors="pt")["input_ids"]
    pos = 2  # "a": [CLS] what a ...
    masked = ids.clone()
    masked[0, pos] = tok.mask_token_id
    with torch.no_grad():
        logits = model(masked, torch.ones_like(masked)).logits[0, pos]
    vocab = tok.backend.get_vocab()
    inv = {i: t for t, i in vocab.items()}
    ranked = [inv[int(i)] for i in logits.argsort(descending=True)]
    special = set(tok.all_special_ids)
    expect = [
        t
        for t in ranked
        if not t.startswith("##")
        and any(c.isalpha() for c in t)
        and vocab[t] not in special
        and t != "a"
    ][:5]
    assert cands[1] == expect


def test_bad_settings(minilm):
    model, tok = minilm
    with pytest.raises(ValueError, match="MLM head"):
        Augmenter(model, tok, AugmentConfig())
    with pytest.raises(ValueError, match="replace_prob"):
        AugmentConfig(replace_prob=1.5)
    with pytest.raises(ValueError, match="samples"):
        AugmentConfig(samples=0)
