"""Masking statistics on fixed seeds over large samples: BERT's 15% with 80/10/10 replacement
(Devlin et al. 2019, §3.1), whole words, entities and phrases, SpanBERT's clipped geometric span
lengths with per-span replacement (Joshi et al. 2020, §3.1), dynamic masks (Liu et al. 2019,
RoBERTa §4.1)."""

from __future__ import annotations

import numpy as np
import pytest

from bertfamily.objectives.masking import (
    MaskingConfig,
    chinese_word_ids,
    mask_tokens,
    span_length_distribution,
    word_ids_from_starts,
    word_starts,
)

V, T, MASK, SPECIALS = 500, 128, 4, [0, 1, 2, 3, 4]


def sample(strategy: str, n: int = 600, seed: int = 0, **kw):
    """n random sequences ([CLS] ... [SEP] ... [SEP] + padding); returns per-sequence tuples."""
    rng = np.random.default_rng(seed)
    cfg = MaskingConfig(strategy=strategy, **kw)
    out = []
    for _ in range(n):
        ids = rng.integers(5, V, T)
        pad = int(rng.integers(0, 20))
        ids[0], ids[50] = 2, 3
        ids[T - pad - 1] = 3
        ids[T - pad :] = 0
        special = np.isin(ids, SPECIALS)
        wid = word_ids_from_starts(rng.random(T) < 0.6, special)
        ents = [(10, 14), (30, 33)]
        r = mask_tokens(
            ids,
            special,
            cfg,
            rng,
            vocab_size=V,
            mask_token_id=MASK,
            word_ids=wid,
            entities=ents,
            special_ids=SPECIALS,
        )
        out.append((ids, special, wid, r))
    return out


@pytest.mark.parametrize("strategy", ["token", "whole_word", "ngram", "entity", "span"])
def test_rate_split_and_never_special(strategy):
    rows = sample(strategy)
    maskable = sum(int((~s).sum()) for _, s, _, _ in rows)
    chosen = [r.labels != -100 for *_, r in rows]
    n = sum(int(c.sum()) for c in chosen)
    assert n / maskable == pytest.approx(0.15, abs=0.005)
    for (ids, special, _, r), c in zip(rows, chosen):
        assert not (c & special).any()  # never special tokens or padding
        assert (r.labels[c] == ids[c]).all()  # labels are the original ids
        assert (r.input_ids[~c] == ids[~c]).all()  # nothing else changes
        assert not np.isin(r.input_ids[c & (r.input_ids != ids)], [0, 1, 2, 3]).any()
    masked = sum(int((r.input_ids[c] == MASK).sum()) for (*_, r), c in zip(rows, chosen))
    kept = sum(int((r.input_ids[c] == ids[c]).sum()) for (ids, *_, r), c in zip(rows, chosen))
    tol = 0.01 if strategy != "span" else 0.02  # per-span choices: fewer independent draws
    assert masked / n == pytest.approx(0.8, abs=tol)
    assert kept / n == pytest.approx(0.1, abs=tol)


@pytest.mark.parametrize(
    "strategy,n", [("whole_word", 2000), ("ngram", 2000), ("entity", 2000), ("span", 10000)]
)
def test_whole_words_kept_whole(strategy, n):
    """No word is ever partly masked, even when the last span meets the budget (SpanBERT's own
    code cut 1.1 % of the chosen words there); 10,000 sequences for "span"."""
    partial = chosen_words = 0
    for _, _, wid, r in sample(strategy, n=n):
        c = r.labels != -100
        for w in np.unique(wid[c]):
            chosen_words += 1
            partial += not c[wid == w].all()
    assert chosen_words > 10 * n and partial == 0


def test_entities_masked_as_units():
    hit = 0
    for *_, r in sample("entity", n=300):
        c = r.labels != -100
        for s, e in [(10, 14), (30, 33)]:
            assert c[s:e].all() or not c[s:e].any()
            hit += c[s:e].all()
    assert hit > 20


def test_span_lengths_follow_clipped_geometric():
    lengths = np.concatenate([r.unit_lengths for *_, r in sample("span", n=800)])
    dist = span_length_distribution(0.2, 10)
    assert (dist * np.arange(1, 11)).sum() == pytest.approx(3.797, abs=0.001)  # "3.8" in §3.1
    assert lengths.max() == 10 and lengths.min() == 1
    assert lengths.mean() == pytest.approx(3.8, abs=0.1)
    freq = np.bincount(lengths, minlength=11)[1:] / len(lengths)
    np.testing.assert_allclose(freq, dist, atol=0.02)


def test_span_replacement_is_per_span():
    mixed = 0
    for ids, _, _, r in sample("span", n=200):
        for s, e in r.spans:
            kinds = {
                ("mask" if x == MASK else "same" if x == y else "random")
                for x, y in zip(r.input_ids[s:e], ids[s:e])
            }
            mixed += len(kinds - {"random", "same"}) and len(kinds) > 1 and "random" not in kinds
    assert mixed == 0


def test_cap_per_sequence():
    for *_, r in sample("token", n=50, max_predictions=5):
        assert (r.labels != -100).sum() <= 5


def test_dynamic_masks_differ_static_repeats():
    rng = np.random.default_rng(0)
    ids = rng.integers(5, V, T)
    special = np.zeros(T, bool)
    a = mask_tokens(
        ids, special, MaskingConfig(), np.random.default_rng(1), vocab_size=V, mask_token_id=MASK
    )
    b = mask_tokens(
        ids, special, MaskingConfig(), np.random.default_rng(1), vocab_size=V, mask_token_id=MASK
    )
    c = mask_tokens(
        ids, special, MaskingConfig(), np.random.default_rng(2), vocab_size=V, mask_token_id=MASK
    )
    assert (a.labels == b.labels).all() and not (a.labels == c.labels).all()


def test_word_starts_wordpiece_and_bpe():
    assert word_starts(["the", "un", "##believ", "##able", "cat"], "wordpiece").tolist() == [
        True,
        True,
        False,
        False,
        True,
    ]
    assert word_starts(["The", "Ġun", "believ", "able", "Ġcat"], "bpe").tolist() == [
        True,
        True,
        False,
        False,
        True,
    ]
    special = np.array([True, False, False, True, False, True])
    starts = np.array([True, True, False, True, False, True])
    w = word_ids_from_starts(starts, special).tolist()
    assert w[0] == w[3] == w[5] == -1 and w[1] == w[2] >= 0 and w[4] not in (-1, w[1])


def test_chinese_whole_words_from_jieba():
    text = "我爱北京天安门"
    offsets = [(0, 0)] + [(i, i + 1) for i in range(len(text))] + [(0, 0)]
    special = np.array([True] + [False] * len(text) + [True])
    wid = chinese_word_ids(text, offsets, special)
    # jieba: 我 / 爱 / 北京 / 天安门
    assert wid.tolist() == [-1, 0, 1, 2, 2, 3, 3, 3, -1]


def test_bad_config():
    with pytest.raises(ValueError, match="strategy"):
        MaskingConfig(strategy="random")
    with pytest.raises(ValueError, match="mlm_probability"):
        MaskingConfig(mlm_probability=0)
