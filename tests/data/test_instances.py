"""NSP / SOP / packed instance building: label balance, lengths, structure."""

from __future__ import annotations

import numpy as np
import pytest

from bertfamily.objectives.instances import (
    Segment,
    SpecialIds,
    nsp_instances,
    packed_instances,
    sop_instances,
    truncate_longest_first,
)

SP = SpecialIds(cls=2, sep=3)


def docs(n_docs=60, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for d in range(n_docs):
        segs = []
        for s in range(int(rng.integers(3, 12))):
            n = int(rng.integers(3, 25))
            # ids encode (document, sentence) so the tests can check where B came from
            segs.append(Segment(np.full(n, 1000 * (d + 1) + s, np.int32), np.ones(n, bool)))
        out.append(segs)
    return out


def split_ab(inst):
    seps = np.flatnonzero(inst.input_ids == SP.sep)
    return inst.input_ids[1 : seps[0]], inst.input_ids[seps[0] + 1 : seps[1]]


@pytest.mark.parametrize("builder", [nsp_instances, sop_instances])
def test_labels_balanced_and_lengths_within_limit(builder):
    rng = np.random.default_rng(0)
    inst = builder(docs(200), 64, SP, rng)
    labels = np.array([i.pair_label for i in inst])
    assert len(inst) > 300
    assert labels.mean() == pytest.approx(0.5, abs=0.06)
    for i in inst:
        assert len(i) <= 64
        assert i.input_ids[0] == SP.cls and i.input_ids[-1] == SP.sep
        assert (i.input_ids == SP.sep).sum() == 2
        a, b = split_ab(i)
        assert len(a) and len(b)
        assert (i.token_type_ids == np.r_[np.zeros(len(a) + 2), np.ones(len(b) + 1)]).all()
        assert i.special.sum() == 3


def test_nsp_random_b_comes_from_another_document():
    for i in nsp_instances(docs(), 64, SP, np.random.default_rng(1)):
        a, b = split_ab(i)
        same_doc = a[-1] // 1000 == b[0] // 1000
        if i.pair_label == 0:
            assert same_doc and b[0] % 1000 == a[-1] % 1000 + 1  # the real next sentence
        else:
            assert not same_doc


def test_sop_swapped_order():
    for i in sop_instances(docs(), 64, SP, np.random.default_rng(2)):
        a, b = split_ab(i)
        assert a[0] // 1000 == b[0] // 1000  # always one document
        assert (a[-1] < b[0]) == (i.pair_label == 0)


def test_truncate_longest_first():
    a = [Segment(np.arange(10), np.ones(10, bool))]
    b = [Segment(np.arange(4), np.ones(4, bool))]
    A, B = truncate_longest_first(a, b, 8)
    assert A.ids.tolist() == [6, 7, 8, 9] and B.ids.tolist() == [0, 1, 2, 3]
    A, B = truncate_longest_first(a, b, 13)
    assert (len(A.ids), len(B.ids)) == (9, 4)


def test_packed_full_sentences():
    inst = packed_instances(docs(20), 64, SP)
    for i in inst:
        assert len(i) <= 64 and i.pair_label == -1 and (i.token_type_ids == 0).all()
        assert i.special[i.input_ids == SP.sep].all()
    total = sum(len(s.ids) for d in docs(20) for s in d)
    packed = sum(int((~i.special).sum()) for i in inst)
    assert packed == total  # nothing lost
    assert np.mean([len(i) for i in inst]) > 50  # packs are full


def test_nsp_needs_two_documents():
    with pytest.raises(ValueError, match="2 documents"):
        nsp_instances(docs(1), 64, SP, np.random.default_rng(0))


def test_doc_sentences_never_cross_a_document():
    """RoBERTa DOC-SENTENCES (Liu et al. 2019 §4.2): every instance holds one document's
    sentences (the ids encode the document), in order, nothing lost; FULL-SENTENCES over the
    same documents does cross them."""
    corpus = docs(40)
    inst = packed_instances(corpus, 64, SP, cross_documents=False)
    full = packed_instances(corpus, 64, SP)
    for i in inst:
        body = i.input_ids[~i.special]
        assert len(i) <= 64 and (i.input_ids == SP.sep).sum() == 1  # no document separator
        assert len(set((body // 1000).tolist())) == 1
        assert (np.diff(body) >= 0).all()  # sentences in document order
    assert sum(len(set((i.input_ids[~i.special] // 1000).tolist())) > 1 for i in full) > 10
    total = sum(len(s.ids) for d in corpus for s in d)
    assert sum(int((~i.special).sum()) for i in inst) == total
    # each document ends an instance: at least one instance per document, shorter on average
    assert len({int(i.input_ids[1] // 1000) for i in inst}) == 40 and len(inst) > len(full)
    assert np.mean([len(i) for i in inst]) < np.mean([len(i) for i in full])


def test_token_matched_batch_size():
    """The DOC-SENTENCES batch keeps FULL-SENTENCES' tokens per batch: round(B·64/40)."""
    from bertfamily.objectives.instances import Instance, token_matched_batch_size

    def inst(n):
        return Instance(np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n, bool), None)

    assert token_matched_batch_size(32, [inst(64)] * 3, [inst(30), inst(50)]) == 51
    assert token_matched_batch_size(8, [inst(20)], [inst(40)]) == 8  # never smaller
    with pytest.raises(ValueError, match="non-empty"):
        token_matched_batch_size(8, [], [inst(4)])
    with pytest.raises(ValueError, match="batch_size"):
        token_matched_batch_size(0, [inst(4)], [inst(4)])
