"""Late interaction (ColBERT): `ColBERTEncoder` against PyLate's ``ColBERT.encode`` (≤ 1e-5,
fp32) on a tiny random ColBERT that PyLate itself built and saved (and on the real MiniLM made
a ColBERT by PyLate, seeded projection), for every input setting (query expansion with and
without attention to the [MASK] tokens, no expansion, no markers, another skiplist); MaxSim
scores against ``pylate.scores.colbert_scores`` and ranking against ``pylate.rank.rerank``; the
multi-vector index (candidate generation + exact MaxSim) against brute force; the training
forward; the command line; and the errors."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from bertfamily.errors import (
    InputError,
    ModelDirectoryError,
    SentenceModulesError,
    VectorIndexError,
)
from bertfamily.heads.late_interaction import maxsim, maxsim_packed
from bertfamily.pipelines.embedding.colbert import (
    ColBERTEncoder,
    encode_multivector,
    is_colbert_directory,
    maxsim_scores,
    padded_matrices,
)
from bertfamily.pipelines.retrieval import ColBERTIndex, open_index
from helpers import save_tiny_pylate_colbert

pylate = pytest.importorskip("pylate")
from pylate import rank, scores  # noqa: E402

from reference.pylate_colbert import load_pylate_colbert, make_pylate_colbert  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

QUERIES = [
    "who wrote the novel about the whale?",
    "a",
    "what is the capital of france, and why is it so large: a question that runs past the "
    "query length",
]
DOCS = [
    "Moby-Dick (1851) was written by Herman Melville.",
    "The cat sat on the mat!",
    "b",
    "Paris is the capital of France; it is large, old, and crowded. " * 4,
    "Whales -- large marine mammals -- appear in the novel.",
]


@pytest.fixture(scope="module")
def tiny_colbert(tmp_path_factory, minilm_dir):
    """A random tiny BERT (MiniLM's tokenizer) made a ColBERT by PyLate and saved by it."""
    return save_tiny_pylate_colbert(tmp_path_factory.mktemp("colbert"), minilm_dir)


def _variant(src, dst, **settings):
    shutil.copytree(src, dst)
    file = dst / "config_sentence_transformers.json"
    cfg = json.loads(file.read_text())
    file.write_text(json.dumps(cfg | settings))
    return dst


def _assert_matrices(ours, theirs, atol=1e-5):
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, atol=atol, rtol=0)


def _assert_parity(directory, atol=1e-5):
    ref, ours = load_pylate_colbert(directory), ColBERTEncoder(directory)
    q_ref = ref.encode(QUERIES, is_query=True, batch_size=2)
    d_ref = ref.encode(DOCS, is_query=False, batch_size=2)
    q, d = ours.encode(QUERIES, is_query=True), ours.encode(DOCS, is_query=False, batch_size=3)
    _assert_matrices(q, q_ref, atol)
    _assert_matrices(d, d_ref, atol)
    return ours, ref, q, d


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"attend_to_expansion_tokens": True},
        {"do_query_expansion": False},
        {"query_prefix": "", "document_prefix": "", "skiplist_words": ["the", ",", "zzzq"]},
    ],
    ids=["expansion", "attend-expansion", "no-expansion", "no-markers-skiplist"],
)
def test_token_matrices_equal_pylate(tiny_colbert, tmp_path, settings):
    directory = _variant(tiny_colbert, tmp_path / "c", **settings) if settings else tiny_colbert
    ours, _, q, d = _assert_parity(directory)
    s = ours.settings
    if s.do_query_expansion:  # every query padded to query_length with [MASK]
        assert {len(m) for m in q} == {12}
    else:
        assert len(q[1]) == 3 + bool(s.query_prefix)  # [CLS] ([Q]) a [SEP]
    assert len(d[3]) < 20  # cut to document_length, punctuation dropped
    for m in q + d:
        np.testing.assert_allclose(np.linalg.norm(m, axis=1), 1.0, atol=1e-5)


def test_scores_and_rerank_equal_pylate(tiny_colbert):
    ours, ref, q, d = _assert_parity(tiny_colbert)
    got = maxsim_scores(q, d)  # (Q, N)
    for i, qm in enumerate(q):
        for j, dm in enumerate(d):  # one document at a time: no padding in PyLate's score
            want = scores.colbert_scores(torch.tensor(qm)[None], torch.tensor(dm)[None])
            assert got[i, j] == pytest.approx(float(want), abs=1e-4)
    np.testing.assert_allclose(ours.score(QUERIES, DOCS), got, atol=1e-5)
    # the ranking of PyLate's rank.rerank (its zero padding gives a padded document's query
    # token max(0, best); with unit vectors of a trained or random model the best is > 0 here)
    ranked = rank.rerank(
        documents_ids=[list(range(len(DOCS)))], queries_embeddings=[q[0]], documents_embeddings=[d]
    )[0]
    mine = ours.rank(QUERIES[0], DOCS, return_documents=True)
    assert [r["corpus_id"] for r in mine] == [r["id"] for r in ranked]
    np.testing.assert_allclose([r["score"] for r in mine], [r["score"] for r in ranked], atol=1e-4)
    assert mine[0]["text"] == DOCS[mine[0]["corpus_id"]]
    assert len(ours.rank(QUERIES[0], DOCS, top_k=2)) == 2


def test_real_minilm_made_colbert_by_pylate(minilm_dir, tmp_path):
    directory = make_pylate_colbert(minilm_dir, tmp_path / "minilm-colbert", seed=7)
    ours, *_ = _assert_parity(directory)
    assert ours.dimension == 128 and ours.settings.query_length == 32


def test_forward_for_training_matches_encode(tiny_colbert):
    enc = ColBERTEncoder(tiny_colbert)
    for is_query, texts in ((True, QUERIES), (False, DOCS)):
        batch = enc.features(texts, is_query=is_query)
        vectors, keep = enc(**batch, is_query=is_query)  # (B, T, D), (B, T); eval: no dropout
        assert vectors.requires_grad and vectors.shape[:2] == keep.shape
        want = enc.encode(texts, is_query=is_query)
        for row, m in enumerate(want):
            got = vectors[row][keep[row]].detach().numpy()
            np.testing.assert_allclose(got, m, atol=1e-5)
    q = enc(**enc.features(QUERIES[:2], is_query=True), is_query=True)
    d = enc(**enc.features(DOCS[:2], is_query=False), is_query=False)
    maxsim(q[0], d[0], q[1], d[1]).sum().backward()
    assert enc.embedder.dense[0][0].weight.grad.abs().sum() > 0


def test_save_round_trip_read_by_pylate(tiny_colbert, tmp_path):
    directory = _variant(tiny_colbert, tmp_path / "src", attend_to_expansion_tokens=True)
    saved = ColBERTEncoder(directory).save(tmp_path / "saved")
    assert is_colbert_directory(saved)
    _assert_parity(saved)  # ours and PyLate read the saved directory alike
    np.testing.assert_allclose(
        ColBERTEncoder(saved).score(QUERIES, DOCS), ColBERTEncoder(directory).score(QUERIES, DOCS)
    )
    assert json.loads((saved / "config_sentence_transformers.json").read_text())[
        "attend_to_expansion_tokens"
    ]


def test_maxsim_scores_in_blocks_equal_loops():
    rng = np.random.default_rng(0)
    q = [rng.standard_normal((n, 8)).astype(np.float32) for n in (3, 5, 2)]
    d = [rng.standard_normal((n, 8)).astype(np.float32) for n in (4, 1, 7, 2, 9)]
    want = np.array([[(a @ b.T).max(1).sum() for b in d] for a in q])
    for budget in (1, 50, 1 << 24):
        np.testing.assert_allclose(maxsim_scores(q, d, budget=budget), want, atol=1e-5)
    with pytest.raises(InputError, match="D=4"):
        maxsim_scores(q, [np.zeros((2, 4), np.float32)])


def test_maxsim_packed_equals_padded_maxsim():
    g = torch.Generator().manual_seed(0)
    query = torch.randn(5, 8, generator=g)
    docs = [torch.randn(n, 8, generator=g) for n in (3, 1, 6)]
    owner = torch.cat([torch.full((len(d),), i) for i, d in enumerate(docs)])
    padded, mask = padded_matrices([d.numpy() for d in docs])
    want = maxsim(query[None], padded, None, mask)[0]
    got = maxsim_packed(query, torch.cat(docs), owner, 4)  # document 3 has no token: 0
    torch.testing.assert_close(got[:3], want, atol=1e-5, rtol=0)
    assert got[3] == 0
    with pytest.raises(InputError, match="owner"):
        maxsim_packed(query, torch.cat(docs), owner, 2)


def test_index_equals_brute_force_and_persists(tiny_colbert, tmp_path):
    enc = ColBERTEncoder(tiny_colbert)
    corpus = [
        f"document {i} is about {w}, mostly."
        for i, w in enumerate(
            "cats dogs paris london rain sun snow wind trees rivers whales novels".split()
        )
    ]
    index = ColBERTIndex.build(enc, corpus, ids=[f"d{i}" for i in range(len(corpus))])
    index.save(tmp_path / "idx")
    loaded = open_index(tmp_path / "idx")
    assert isinstance(loaded, ColBERTIndex) and loaded.ids == index.ids
    np.testing.assert_array_equal(loaded.vectors, index.vectors)
    queries = ["cats and dogs", "weather in london", "x"]
    brute = maxsim_scores(enc.encode(queries, is_query=True), enc.encode(corpus, is_query=False))
    for options in ({"exhaustive": True}, {"token_k": len(loaded.vectors)}):
        hits = loaded.search_texts(enc, queries, top_k=len(corpus), **options)
        for row, want in zip(hits, brute):
            order = np.lexsort((np.arange(len(want)), -want))
            assert [h.index for h in row] == order.tolist()
            np.testing.assert_allclose([h.score for h in row], want[order], atol=1e-5)
            assert [h.id for h in row] == [f"d{i}" for i in order]
    # "flat" candidates are every document (exact search), whatever token_k says
    few = loaded.search_texts(enc, queries, top_k=3, token_k=1)
    for row, want in zip(few, brute):
        assert [h.index for h in row] == np.lexsort((np.arange(len(want)), -want))[:3].tolist()
    # IVF candidates: every list probed is exact per token; few lists, approximate
    ivf = ColBERTIndex.build(enc, corpus, candidates="ivf", nlist=4, nprobe=4)
    ivf.save(tmp_path / "ivf")
    ivf = open_index(tmp_path / "ivf")
    assert (ivf.candidates, ivf.nlist, ivf.nprobe) == ("ivf", 4, 4)
    exact = ivf.search_texts(enc, queries, top_k=len(corpus), token_k=len(ivf.vectors) - 1)
    assert [[h.index for h in r] for r in exact] == [
        np.lexsort((np.arange(len(w)), -w)).tolist() for w in brute
    ]
    ivf.nprobe = 1
    ivf._faiss_index = None
    for row, want in zip(ivf.search_texts(enc, queries, top_k=3, token_k=2), brute):
        assert all(h.score == pytest.approx(float(want[h.index]), abs=1e-5) for h in row)
    with pytest.raises(InputError, match="candidates"):
        ColBERTIndex.create(None, 16, candidates="plaid")
    # add more rows, then an index of bare vectors
    loaded.add(enc, ["one more document"], ["extra"])
    assert len(loaded) == len(corpus) + 1
    bare = ColBERTIndex.create(None, dimension=16)
    bare.add_vectors(enc.encode(corpus[:2], is_query=False))
    assert [h.index for h in bare.search(enc.encode(["cats"], is_query=True), 1)[0]] in ([0], [1])


def test_index_refuses(tiny_colbert, tmp_path, minilm_dir):
    enc = ColBERTEncoder(tiny_colbert)
    index = ColBERTIndex.build(enc, ["a cat", "a dog"])
    with pytest.raises(InputError, match="token matrix"):
        index.search([np.zeros((3, 5), np.float32)])
    with pytest.raises(InputError, match="token matrix"):
        index.add_vectors([np.zeros((0, 16), np.float32)])
    with pytest.raises(InputError, match="NaN"):
        index.add_vectors([np.full((2, 16), np.nan, np.float32)])
    with pytest.raises(InputError, match="top_k"):
        index.search(enc.encode(["x"], is_query=True), top_k=0)
    with pytest.raises(InputError, match="blank"):
        index.add(enc, ["  "])
    other = _variant(tiny_colbert, tmp_path / "other", document_length=10)
    with pytest.raises(VectorIndexError, match="built with model"):
        index.search_texts(ColBERTEncoder(other), ["cat"])
    from bertfamily.pipelines.embedding.embed import SentenceEmbedder

    with pytest.raises(VectorIndexError, match="needs a ColBERT model"):
        index.search_texts(SentenceEmbedder(minilm_dir), ["cat"])
    with pytest.raises(InputError, match="needs a ColBERT model"):  # `base.Index.build`'s hook
        ColBERTIndex.build(SentenceEmbedder(minilm_dir), ["a cat"])
    index.save(tmp_path / "idx")
    (tmp_path / "idx" / "colbert.npz").write_bytes(b"not numpy")
    with pytest.raises(VectorIndexError, match="colbert.npz"):
        open_index(tmp_path / "idx")


def test_errors(tiny_colbert, tmp_path, minilm_dir):
    enc = ColBERTEncoder(tiny_colbert)
    with pytest.raises(InputError, match="empty"):
        enc.encode([], is_query=True)
    with pytest.raises(InputError, match="not a string"):
        enc.encode(["fine", None], is_query=False)
    with pytest.raises(InputError, match="empty"):
        enc.rank("q", [])
    with pytest.raises(InputError, match="empty"):
        encode_multivector(enc, [], is_query=False)
    assert encode_multivector(enc, ["x"], is_query=False)[0].shape == (4, 16)  # [CLS] [D] x [SEP]
    assert enc.encode("one text", is_query=False).ndim == 2
    assert not is_colbert_directory(minilm_dir) and is_colbert_directory(tiny_colbert)
    with pytest.raises(SentenceModulesError, match="not a ColBERT directory"):
        ColBERTEncoder(minilm_dir)
    with pytest.raises(InputError, match="query_length"):
        ColBERTEncoder(tiny_colbert, query_length=2)
    bad = _variant(tiny_colbert, tmp_path / "bad", query_length="long")
    with pytest.raises(SentenceModulesError, match="query_length"):
        ColBERTEncoder(bad)
    marker = _variant(tiny_colbert, tmp_path / "marker", query_prefix="[QQ] ")
    with pytest.raises(ModelDirectoryError, match="marker"):
        ColBERTEncoder(marker)
    modules = _variant(tiny_colbert, tmp_path / "modules")
    entries = json.loads((modules / "modules.json").read_text())
    (modules / "modules.json").write_text(json.dumps(entries[:1]))
    with pytest.raises(SentenceModulesError, match="Dense"):
        ColBERTEncoder(modules)
    with pytest.raises(SentenceModulesError):  # an embedding loader refuses PyLate's Dense
        from bertfamily.pipelines.embedding.embed import SentenceEmbedder

        SentenceEmbedder(tiny_colbert)


def test_cli(cli, tiny_colbert, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("cats are small animals.\ndogs bark loudly!\n\nparis is in france.\n")
    res = cli(
        "index", "build", "--kind", "colbert", "--model", str(tiny_colbert),
        "--corpus", str(corpus), "-o", str(tmp_path / "idx"),
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    res = cli(
        "search", "small cats", "--index", str(tmp_path / "idx"), "--model", str(tiny_colbert),
        "--format", "jsonl", "-k", "3",
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in res.stdout.splitlines()]
    enc = ColBERTEncoder(tiny_colbert)
    docs = ["cats are small animals.", "dogs bark loudly!", "paris is in france."]
    want = enc.score(["small cats"], docs)[0]
    assert [r["id"] for r in rows] == [[1, 2, 4][i] for i in np.argsort(-want, kind="stable")]
    np.testing.assert_allclose([r["score"] for r in rows], np.sort(want)[::-1], atol=1e-5)
    res = cli("rerank", "small cats", *docs, "--model", str(tiny_colbert), "--format", "jsonl")
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in res.stdout.splitlines()]
    assert [r["line"] - 1 for r in rows] == np.argsort(-want, kind="stable").tolist()
    np.testing.assert_allclose([r["score"] for r in rows], np.sort(want)[::-1], atol=1e-5)
    res = cli("index", "build", "--kind", "colbert", "--corpus", str(corpus), "-o", "x")
    assert res.exit_code == 2 and "needs --model" in res.output
