"""The BM25 index (bm25s in our directory layout), fusion of any number of hit lists, hybrid
search of dense + BM25 (+ SPLADE) indexes on the command line, and the Cranfield benchmark's
reader, metric and docs table."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

bm25s = pytest.importorskip("bm25s")

from bertfamily.errors import InputError, VectorIndexError  # noqa: E402
from bertfamily.pipelines.retrieval import (  # noqa: E402
    KIND_CLASSES,
    BM25Index,
    Hit,
    fuse,
    open_index,
)
from helpers import save_tiny, write_jsonl  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

CORPUS = [
    "The cat sat on the warm mat near the window",
    "Dogs bark at cats; the cat runs up a tree",
    "A river flows through the valley to the sea",
    "Trains leave the station every hour, trains are late",
    "Coffee and music on a rainy morning",
    "the of and a",  # stopwords only: never a hit
    "Cats, dogs and rivers: a story about animals near water",
    "Espresso is strong coffee; the cat prefers milk",
]
IDS = [f"d{i}" for i in range(len(CORPUS))]
QUERIES = ["cat on a mat", "coffee music", "river water valley", "trains", "the and"]


def _reference():
    """bm25s itself on the corpus: its tokenizer, lucene BM25 (k1 = 1.5, b = 0.75)."""
    retriever = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    tokens = bm25s.tokenize(CORPUS, stopwords="en", show_progress=False)
    retriever.index(tokens, show_progress=False)
    return retriever


def _ref_hits(retriever, query: str, k: int) -> list[tuple[int, float]]:
    """bm25s's own retrieve of the top ``k``, the documents scoring > 0 (rows sharing a word)."""
    tokens = bm25s.tokenize([query], stopwords="en", show_progress=False)
    docs, scores = retriever.retrieve(tokens, k=k, show_progress=False)
    return [(int(d), float(s)) for d, s in zip(docs[0], scores[0]) if s > 0]


def test_scores_equal_bm25s_retrieve():
    index = BM25Index.build(CORPUS, IDS)
    ref = _reference()
    for q in QUERIES[:4]:
        want = _ref_hits(ref, q, len(CORPUS))
        got = index.search([q], top_k=len(CORPUS))[0]
        assert len(got) == len(want) > 0
        np.testing.assert_allclose([h.score for h in got], [s for _, s in want], rtol=1e-6)
        assert {h.index for h in got} == {d for d, _ in want}
        # every document's score, not only the hits
        tokens = bm25s.tokenize([q], stopwords="en", show_progress=False, return_ids=False)[0]
        np.testing.assert_allclose(index.scores(q), ref.get_scores(tokens), rtol=1e-6)
    assert index.search(["the and"], top_k=3) == [[]]  # stopwords only: no hit
    assert index.search(["zebra"], top_k=3) == [[]]  # unknown word: no hit
    top = index.search_texts(["espresso"], top_k=1)[0][0]
    assert (top.id, top.text) == ("d7", CORPUS[7])


def test_settings_change_scores_as_bm25s_does():
    index = BM25Index.build(CORPUS, k1=0.9, b=0.4, method="robertson", stopwords=None)
    ref = bm25s.BM25(k1=0.9, b=0.4, method="robertson")
    ref.index(bm25s.tokenize(CORPUS, stopwords=None, show_progress=False), show_progress=False)
    tokens = bm25s.tokenize(["the cat"], stopwords=None, show_progress=False, return_ids=False)
    np.testing.assert_allclose(index.scores("the cat"), ref.get_scores(tokens[0]), rtol=1e-6)
    assert index.search(["the and"], top_k=3)[0]  # stopwords kept: "the" is a word now


def test_persisted_index_reloads_with_equal_results_and_add(tmp_path):
    index = BM25Index.build(CORPUS[:5], IDS[:5])
    index.save(tmp_path / "bm25")
    meta = json.loads((tmp_path / "bm25" / "meta.json").read_text())
    assert (meta["kind"], meta["count"], meta["model"]) == ("bm25", 5, None)
    assert (meta["method"], meta["k1"], meta["b"], meta["stemmer"]) == ("lucene", 1.5, 0.75, None)
    assert (tmp_path / "bm25" / "bm25s" / "params.index.json").is_file()  # bm25s's own files
    loaded = open_index(tmp_path / "bm25")
    assert isinstance(loaded, BM25Index) and KIND_CLASSES["bm25"] is BM25Index
    assert loaded.search_texts(QUERIES, top_k=3) == index.search_texts(QUERIES, top_k=3)
    # add: the corpus is indexed again (idf changes), equal to a build of all texts at once
    loaded.add(CORPUS[5:], IDS[5:])
    loaded.save(tmp_path / "bm25")
    whole = BM25Index.build(CORPUS, IDS)
    again = BM25Index.load(tmp_path / "bm25")
    for q in QUERIES:
        np.testing.assert_array_equal(again.scores(q), whole.scores(q))
    assert again.ids == IDS


def test_bad_input_and_damaged_directories_are_refused(tmp_path):
    with pytest.raises(InputError, match="blank"):
        BM25Index.build(["a cat", "  "])
    with pytest.raises(InputError, match="already in the index"):
        BM25Index.build(["a cat", "a dog"], ids=[1, 1])
    with pytest.raises(InputError, match="method must be one of"):
        BM25Index.build(CORPUS, method="bm99")
    with pytest.raises(InputError, match="k1"):
        BM25Index.build(CORPUS, k1=0)
    with pytest.raises(InputError, match="b must lie"):
        BM25Index.build(CORPUS, b=1.5)
    with pytest.raises(InputError, match="not a str"):
        BM25Index.build(["a cat", 7])
    with pytest.raises(InputError, match="texts, not vectors"):
        BM25Index.build(CORPUS).add_vectors(np.ones((1, 4)))
    index = BM25Index.build(CORPUS, IDS)
    with pytest.raises(InputError, match="top_k"):
        index.search(["cat"], top_k=0)
    with pytest.raises(InputError, match="no options"):
        index.search_texts(["cat"], rescore=4)
    try:
        import Stemmer  # noqa: F401
    except ImportError:  # PyStemmer is optional: stemming is refused naming it
        from bertfamily.runtime import MissingDependency

        with pytest.raises(MissingDependency, match="Stemmer"):
            BM25Index.build(CORPUS, stemmer="english")
    index.save(tmp_path / "i")
    meta_file = tmp_path / "i" / "meta.json"
    meta = json.loads(meta_file.read_text())
    meta_file.write_text(json.dumps(meta | {"k1": 2.0}))
    with pytest.raises(VectorIndexError, match="files disagree.*k1"):
        open_index(tmp_path / "i")
    meta_file.write_text(json.dumps(meta | {"method": "tfidf"}))
    with pytest.raises(VectorIndexError, match="method 'tfidf' is not a BM25 setting"):
        open_index(tmp_path / "i")
    meta_file.write_text(json.dumps(meta))
    indptr = tmp_path / "i" / "bm25s" / "indptr.csc.index.npy"
    good = np.load(indptr)
    np.save(indptr, good[:-1])
    with pytest.raises(VectorIndexError, match="CSC"):
        open_index(tmp_path / "i")
    np.save(indptr, good)
    (tmp_path / "i" / "bm25s" / "data.csc.index.npy").write_bytes(b"not numpy")
    with pytest.raises(VectorIndexError, match="cannot read the BM25 index"):
        open_index(tmp_path / "i")


def test_without_bm25s_the_extra_is_named(monkeypatch):
    from bertfamily.runtime import MissingDependency

    monkeypatch.setitem(sys.modules, "bm25s", None)
    with pytest.raises(MissingDependency, match=r"bertfamily\[bm25\]") as info:
        BM25Index.build(CORPUS)
    assert info.value.name == "bm25s"


def test_fuse_three_lists_by_hand_computed_rrf():
    dense = [Hit(1, 0.9), Hit(2, 0.5), Hit(3, 0.1)]
    sparse = [Hit(3, 10.0), Hit(1, 5.0)]
    bm25 = [Hit(2, 7.0), Hit(3, 6.0), Hit(4, 1.0)]
    got = fuse(dense, sparse, bm25, top_k=4)
    want = {
        1: 1 / 61 + 1 / 62,
        2: 1 / 62 + 1 / 61,
        3: 1 / 63 + 1 / 61 + 1 / 62,
        4: 1 / 63,
    }
    assert [h.index for h in got] == [3, 1, 2, 4]  # 1 and 2 tie: the lower row first
    assert [h.score for h in got] == pytest.approx([want[h.index] for h in got], abs=1e-15)
    # weighted RRF and weighted linear, three lists
    got = fuse(dense, sparse, bm25, method="rrf", weights=[2, 0, 1], k=1)
    assert {h.index: h.score for h in got} == pytest.approx(
        {1: 2 / 2, 2: 2 / 3 + 1 / 2, 3: 2 / 4 + 1 / 3, 4: 1 / 4}
    )
    got = fuse(dense, sparse, bm25, method="linear")  # min-max per list, 1/3 each
    want = {1: (1 + 0) / 3, 2: (0.5 + 1) / 3, 3: (0 + 1 + 5 / 6) / 3, 4: 0.0}
    assert {h.index: h.score for h in got} == pytest.approx(want)
    # the two-list form as before
    assert fuse(dense, sparse, top_k=3) == fuse(dense, sparse, top_k=3, weights=[1, 1])
    for bad, words in (
        (lambda: fuse(dense), "two or more"),
        (lambda: fuse(dense, sparse, 3), "not a list of Hit"),
        (lambda: fuse(dense, sparse, bm25, weight=0.3), "weights="),
        (lambda: fuse(dense, sparse, weights=[1]), "2 finite numbers"),
        (lambda: fuse(dense, sparse, weights=[1, -1]), "2 finite numbers"),
        (lambda: fuse(dense, sparse, weight=0.5, weights=[1, 1]), "not both"),
        (lambda: fuse(dense, sparse, method="borda"), "method"),
        (lambda: fuse(dense, sparse, top_k=0), "top_k"),
        (lambda: fuse(dense, sparse, weights=[0, 0]), "not all be 0"),  # every score 0
        (lambda: fuse(dense, sparse, method="linear", weights=[1e308] * 2), "at most"),  # inf
    ):
        with pytest.raises(InputError, match=words):
            bad()


@pytest.fixture(scope="module")
def tiny_dense_and_splade(minilm_dir, tmp_path_factory):
    from retrieval_dirs import splade

    base = tmp_path_factory.mktemp("bm25-hybrid")
    return save_tiny(base / "dense", minilm_dir), splade(base / "splade", minilm_dir, bias=-0.7)


def _jsonl(result) -> list[list[tuple]]:
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    out: list[list[tuple]] = []
    for r in rows:
        if r["rank"] == 1:
            out.append([])
        out[-1].append((r["id"], r["score"]))
    return out


def test_cli_bm25_index_and_hybrid_search_end_to_end(cli, tiny_dense_and_splade, tmp_path):
    pytest.importorskip("faiss")
    from bertfamily.pipelines.embedding.embed import SentenceEmbedder
    from bertfamily.pipelines.embedding.sparse import SparseEncoder
    from bertfamily.pipelines.retrieval import SparseIndex, VectorIndex

    dense_dir, splade_dir = tiny_dense_and_splade
    rows = [{"id": i, "text": t} for i, t in zip(IDS, CORPUS)]
    corpus = write_jsonl(tmp_path / "corpus.jsonl", rows)
    fp32 = ("--dtype", "fp32")  # for the indexes with a model (bm25 refuses it: no model)
    for kind, extra in (("bm25", ()), ("flat", ("--model", dense_dir, *fp32)),
                        ("sparse", ("--model", splade_dir, *fp32))):  # fmt: skip
        r = cli("index", "build", "--corpus", corpus, "-o", tmp_path / kind, "--kind", kind,
                *extra)  # fmt: skip
        assert r.exit_code == 0, r.output
    queries = ["cat on a mat", "coffee music"]

    def search(*args, dtype=fp32):
        r = cli("search", *queries, "--format", "jsonl", "-k", "4", *dtype, *args)
        assert r.exit_code == 0, r.output
        return _jsonl(r)

    bm25 = BM25Index.build(CORPUS, IDS)
    want = bm25.search(queries, top_k=4)
    got = search("--index", tmp_path / "bm25", dtype=())
    assert [[g[0] for g in row] for row in got] == [[IDS[h.index] for h in row] for row in want]
    np.testing.assert_allclose([g[1] for g in got[0]], [h.score for h in want[0]], atol=1e-6)

    embedder = SentenceEmbedder(dense_dir, dtype="fp32")
    encoder = SparseEncoder(splade_dir, dtype="fp32")
    d_hits = VectorIndex.build(embedder, CORPUS).search(embedder, queries, top_k=100)
    s_hits = SparseIndex.build(encoder, CORPUS).search(encoder.encode(queries), top_k=100)
    b_hits = bm25.search(queries, top_k=100)
    for method in ("rrf", "linear"):
        fused = [fuse(d, b, top_k=4, method=method) for d, b in zip(d_hits, b_hits)]
        got = search("--index", tmp_path / "flat", "--index", tmp_path / "bm25",
                     "--model", dense_dir, "--fusion", method)  # fmt: skip
        assert [[g[0] for g in row] for row in got] == [[IDS[h.index] for h in r] for r in fused]
        np.testing.assert_allclose(
            [[g[1] for g in row] for row in got], [[h.score for h in r] for r in fused], atol=1e-6
        )
    fused = [fuse(*lists, top_k=4) for lists in zip(d_hits, b_hits, s_hits)]
    got = search("--index", tmp_path / "bm25", "--index", tmp_path / "flat", "--index",
                 tmp_path / "sparse", "--model", dense_dir,
                 "--sparse-model", splade_dir)  # fmt: skip
    # the lists are fused in the order given: bm25, dense, sparse (RRF is symmetric in them)
    assert [[g[0] for g in row] for row in got] == [[IDS[h.index] for h in r] for r in fused]

    def fails(*args) -> str:
        r = cli(*args)
        assert r.exit_code == 2, r.output
        return " ".join(r.output.split())

    assert "has no model" in fails("index", "build", "--corpus", corpus, "-o", tmp_path / "x",
                                   "--kind", "bm25", "--model", dense_dir)  # fmt: skip
    assert "at most one dense or binary index" in fails(
        "search", "q", "--index", tmp_path / "bm25", "--index", tmp_path / "bm25"
    )
    short = tmp_path / "short.jsonl"
    short.write_text(json.dumps({"id": "d0", "text": CORPUS[0]}) + "\n")
    assert cli("index", "build", "--corpus", short, "-o", tmp_path / "b1", "--kind",
               "bm25").exit_code == 0  # fmt: skip
    assert "same documents" in fails(
        "search", "q", "--index", tmp_path / "flat", "--index", tmp_path / "b1", "--model",
        dense_dir,
    )  # fmt: skip
    more = tmp_path / "more.jsonl"
    more.write_text(json.dumps({"id": "m0", "text": "a new document about trains"}) + "\n")
    assert cli("index", "add", "--index", tmp_path / "bm25", "--corpus", more).exit_code == 0
    added = open_index(tmp_path / "bm25")
    assert added.ids == [*IDS, "m0"] and added.search_texts(["new"], top_k=1)[0][0].id == "m0"
    blank = tmp_path / "blank.jsonl"
    blank.write_text(json.dumps({"id": 1, "text": ""}) + "\n")
    assert fails("index", "build", "--corpus", blank, "-o", tmp_path / "b2", "--kind", "bm25")


# --- the Cranfield benchmark: reader, metric, the committed table ---------------------------
sys.path.insert(0, str(ROOT / "benchmarks"))
import retrieval_cranfield as cranfield  # noqa: E402


def test_cranfield_reader_numbers_queries_by_file_order_and_grades_gains():
    if not (cranfield.DATA / "cran.qry").is_file():
        pytest.skip("the Cranfield files are not on this machine")
    data = cranfield.read_cranfield()
    assert len(data["docs"]) == 1398 and data["empty"] == [471, 995]
    assert len(data["queries"]) == 225 and data["queries"][2][:2] == (3, "004")
    assert data["qrels"][3][485] == -1 and "composite slab" in data["docs"][485]
    assert [cranfield.gain(c) for c in (1, 2, 3, 4, -1)] == [4, 3, 2, 1, 0]
    # NDCG@10 by hand: query 1's judged documents; a ranking of one code-3 document first
    qrels = {1: {10: 1, 20: 3, 30: -1}}
    ideal = 4 + 2 / np.log2(3)
    assert cranfield.metrics([[20, 10]], qrels)["ndcg@10"] == round((2 + 4 / np.log2(3)) / ideal, 4)
    assert cranfield.metrics([[30, 40]], qrels) == {"ndcg@10": 0.0, "recall@100": 0.0}


def test_committed_docs_table_is_rendered_from_the_committed_json():
    result = json.loads(cranfield.OUT.read_text())
    page = cranfield.PAGE.read_text(encoding="utf-8")
    assert cranfield.page_table(page) == cranfield.render_table(result)
    for row in ("bm25", "dense_minilm", "splade", "hybrid_bm25_dense_rrf"):
        assert 0 < result["rows"][row]["ndcg@10"] < 1, row
