"""The persisted vector index: exact search equals brute force (top-10), HNSW recall@10 >= 0.95 on
100,000 random unit vectors, a query with another model refused, saves atomic (an interrupted or
killed save leaves the previous index readable), and the CLI (`index build|add`, `search
--index`) end to end on a tiny model."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("faiss")

from bertfamily.pipelines.retrieval.dense import ModelIdentity, VectorIndex, VectorIndexError  # noqa: E402
from helpers import save_tiny  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def unit_vectors(n: int, d: int, seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def brute_force(corpus: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    return np.argsort(-(queries @ corpus.T), axis=1, kind="stable")[:, :k]


def test_exact_search_equals_brute_force_top10():
    d = 48
    corpus, queries = unit_vectors(3000, d, 0), unit_vectors(50, d, 1)
    index = VectorIndex.create(ModelIdentity("x" * 64, d, "mean"))
    index.add_vectors(corpus * 3.0, [f"t{i}" for i in range(3000)], list(range(3000)))
    hits = index.search_vectors(queries, top_k=10)
    want = brute_force(corpus, queries, 10)
    assert [[h.index for h in row] for row in hits] == want.tolist()
    sims = queries @ corpus.T
    np.testing.assert_allclose(
        [[h.score for h in row] for row in hits], np.take_along_axis(sims, want, 1), atol=1e-5
    )
    assert hits[0][0].text == f"t{want[0, 0]}" and hits[0][0].id == int(want[0, 0])


@pytest.mark.slow
def test_hnsw_recall_at_10_on_100k_vectors():
    d = 32
    corpus, queries = unit_vectors(100_000, d, 2), unit_vectors(200, d, 3)
    index = VectorIndex.create(
        ModelIdentity("x" * 64, d, "mean"),
        kind="hnsw",
        hnsw_m=16,
        ef_construction=40,
        ef_search=256,
    )
    index.add_vectors(corpus, [""] * len(corpus), list(range(len(corpus))))
    hits = index.search_vectors(queries, top_k=10)
    want = brute_force(corpus, queries, 10)
    recall = np.mean([len({h.index for h in row} & set(w)) / 10 for row, w in zip(hits, want)])
    assert recall >= 0.95, recall


def test_bad_vectors_and_ids_are_refused():
    index = VectorIndex.create(ModelIdentity("x" * 64, 4, "mean"))
    with pytest.raises(ValueError, match=r"\(N, 4\)"):
        index.add_vectors(np.zeros((2, 5)), ["a", "b"], [0, 1])
    with pytest.raises(ValueError, match="2 vectors, 1 texts"):
        index.add_vectors(np.ones((2, 4)), ["a"], [0, 1])
    index.add_vectors(np.ones((1, 4)), ["a"], ["doc-1"])
    with pytest.raises(ValueError, match="already in the index"):
        index.add_vectors(np.ones((1, 4)), ["b"], ["doc-1"])
    with pytest.raises(ValueError, match="kind"):
        VectorIndex.create(ModelIdentity("x", 4, "mean"), kind="ivf")


@pytest.fixture(scope="module")
def tiny_models(minilm_dir, tmp_path_factory):
    from bertfamily.pipelines.embedding.embed import SentenceEmbedder

    base = tmp_path_factory.mktemp("tiny-index")
    a = save_tiny(base / "a", minilm_dir)
    b = save_tiny(base / "b", minilm_dir)
    (b / "extra.txt").write_text("another directory, another digest")  # same weights
    return a, b, SentenceEmbedder(a), SentenceEmbedder(b)


DOCS = [
    f"document number {i} about {w}"
    for i, w in enumerate(["cats", "dogs", "rivers", "trains", "music", "coffee"] * 5)
]


def test_built_index_matches_semantic_search_and_refuses_another_model(tiny_models, tmp_path):
    from bertfamily.pipelines.embedding.embed import semantic_search

    _, _, emb_a, emb_b = tiny_models
    index = VectorIndex.build(emb_a, DOCS)
    index.save(tmp_path / "idx")
    loaded = VectorIndex.load(tmp_path / "idx")
    assert len(loaded) == len(DOCS) and loaded.identity == index.identity
    queries = ["about cats", "coffee and music"]
    got = loaded.search(emb_a, queries, top_k=5)
    want = semantic_search(emb_a, queries, DOCS, top_k=5)
    assert [[h.index for h in row] for row in got] == [[h.index for h in row] for row in want]
    np.testing.assert_allclose(
        [[h.score for h in row] for row in got], [[h.score for h in row] for row in want], atol=1e-5
    )
    with pytest.raises(VectorIndexError, match="built with model 'a'.*query model is 'b'"):
        loaded.search(emb_b, queries)
    with pytest.raises(VectorIndexError, match="built with model"):
        loaded.add(emb_b, ["more"])


def test_interrupted_save_leaves_the_previous_index(tiny_models, tmp_path, monkeypatch):
    import faiss

    _, _, emb_a, _ = tiny_models
    index = VectorIndex.build(emb_a, DOCS[:10])
    index.save(tmp_path / "idx")
    index.add(emb_a, DOCS[10:])

    def broken(*args):
        raise OSError("disk full")

    monkeypatch.setattr(faiss, "write_index", broken)
    with pytest.raises(OSError, match="disk full"):
        index.save(tmp_path / "idx")
    assert len(VectorIndex.load(tmp_path / "idx")) == 10
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]  # no temporaries left


KILLED_SAVE = """
import sys, numpy as np
from bertfamily.pipelines.retrieval.dense import ModelIdentity, VectorIndex
index = VectorIndex.load(sys.argv[1])
v = np.random.default_rng(0).standard_normal((50_000, 64)).astype("float32")
index.add_vectors(v, ["x" * 50] * len(v), list(range(1000, 1000 + len(v))))
print("saving", flush=True)
index.save(sys.argv[1])
"""


@pytest.mark.slow
def test_killed_save_leaves_a_readable_index(tmp_path):
    path = tmp_path / "idx"
    index = VectorIndex.create(ModelIdentity("x" * 64, 64, "mean"))
    index.add_vectors(unit_vectors(5, 64, 0), list("abcde"), [0, 1, 2, 3, 4])
    index.save(path)
    env = {"PYTHONPATH": str(ROOT / "src")}
    for delay in (0.0, 0.15, 0.4):
        proc = subprocess.Popen(
            [sys.executable, "-c", KILLED_SAVE, str(path)],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert proc.stdout.readline().strip() == "saving"
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert len(VectorIndex.load(path)) in (5, 50_005)  # the old index or the new, whole
        # A save that finished before the kill (a fast machine) leaves the new index: start the
        # next round from the old one again, or its ids 1000... would already be in the index.
        index.save(path)
    VectorIndex.create(ModelIdentity("x" * 64, 64, "mean")).save(path)  # recovers leftovers
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]


def test_cli_build_add_search(cli, tiny_models, tmp_path):
    a, b, emb_a, _ = tiny_models
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(DOCS[:20]) + "\n\n", encoding="utf-8")
    out = tmp_path / "idx"
    r = cli("index", "build", "--corpus", corpus, "--output", out, "--model", a)
    assert r.exit_code == 0, r.output
    more = tmp_path / "more.jsonl"
    more.write_text(
        "\n".join(json.dumps({"id": f"m{i}", "text": t}) for i, t in enumerate(DOCS[20:])),
        encoding="utf-8",
    )
    r = cli("index", "add", "--index", out, "--corpus", more, "--model", a)
    assert r.exit_code == 0, r.output
    meta = json.loads((out / "meta.json").read_text())
    assert meta["count"] == len(DOCS) and meta["kind"] == "flat"
    assert meta["model"]["dimension"] == 32 and meta["model"]["pooling"] == "mean"
    r = cli("search", DOCS[25], "--index", out, "--model", a, "--format", "jsonl", "-k", "3")
    assert r.exit_code == 0, r.output
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert rows[0]["id"] == "m5" and rows[0]["text"] == DOCS[25]
    assert rows[0]["score"] == pytest.approx(1.0, abs=1e-5)
    r = cli("search", "q", "--index", out, "--model", b)
    assert r.exit_code == 2 and "built with model" in r.output
    r = cli("search", "q", "--index", tmp_path / "nope", "--model", a)
    assert r.exit_code == 2 and "not an index directory" in r.output
    r = cli("search", "q", "--model", a)
    assert r.exit_code == 2 and "--corpus FILE or --index DIR" in r.output


@pytest.fixture(scope="module")
def tiny_splade(minilm_dir, tmp_path_factory):
    from bertfamily.pipelines.embedding.sparse import SparseEncoder
    from retrieval_dirs import splade

    path = splade(tmp_path_factory.mktemp("tiny-splade") / "splade", minilm_dir, bias=-0.7)
    return path, SparseEncoder(path)


def _jsonl(result) -> list[list[tuple]]:
    """(id, score, text) per hit, one list per query, of `search --format jsonl` (scores
    printed to 6 decimals)."""
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    out: list[list[tuple]] = []
    for r in rows:
        if r["rank"] == 1:
            out.append([])
        out[-1].append((r["id"], r["score"], r["text"]))
    return out


def _same(got, want, ids, **tol) -> None:
    """`_jsonl` hits equal in-memory hits (row → id; scores to ``tol``)."""
    assert [[g[0] for g in row] for row in got] == [[ids[h.index] for h in row] for row in want]
    scores = [[g[1] for g in row] for row in got]
    np.testing.assert_allclose(scores, [[h.score for h in row] for row in want], **tol)


def test_cli_binary_sparse_and_hybrid_indexes(cli, tiny_models, tiny_splade, tmp_path):
    from bertfamily.pipelines.embedding.embed import SentenceEmbedder
    from bertfamily.pipelines.retrieval.indexes import BinaryIndex, SparseIndex, fuse

    a = tiny_models[0]
    emb_a = SentenceEmbedder(a, dtype="fp32")  # the commands below run in fp32 (auto: bf16)
    splade_dir, encoder = tiny_splade
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(DOCS[:12]) + "\n\n" + "\n".join(DOCS[12:]) + "\n", encoding="utf-8")
    texts, ids = DOCS, list(range(1, 13)) + list(range(14, 32))  # line numbers; line 13 blank
    for kind, model in (("binary", a), ("sparse", splade_dir), ("flat", a)):
        r = cli("index", "build", "--corpus", corpus, "-o", tmp_path / kind, "--kind", kind,
                "--model", model, "--dtype", "fp32")  # fmt: skip
        assert r.exit_code == 0, r.output
        assert json.loads((tmp_path / kind / "meta.json").read_text())["kind"] == kind
    queries = ["about cats and coffee", "document number 7"]

    def search(*args):
        r = cli("search", *queries, "--format", "jsonl", "-k", "4", "--dtype", "fp32", *args)
        assert r.exit_code == 0, r.output
        return _jsonl(r)

    binary = BinaryIndex(emb_a.encode(texts))
    want = binary.search(emb_a.encode(queries), top_k=4, rescore=40)
    got = search("--index", tmp_path / "binary", "--model", a)
    _same(got, want, ids, atol=1e-6)
    assert got[0][0][2] == texts[want[0][0].index]
    got = search("--index", tmp_path / "binary", "--model", a, "--rescore", "0")
    plain = binary.search(emb_a.encode(queries), top_k=4, rescore=None)
    assert [[g[1] for g in row] for row in got] == [[h.score for h in row] for row in plain]

    sparse = SparseIndex(encoder.encode(texts))
    s_want = sparse.search(encoder.encode(queries), top_k=4)
    got = search("--index", tmp_path / "sparse", "--model", splade_dir)
    _same(got, s_want, ids, rtol=1e-5, atol=1e-6)

    from bertfamily.pipelines.retrieval.dense import VectorIndex

    dense = VectorIndex.build(emb_a, texts)
    d_hits = dense.search(emb_a, queries, top_k=100)
    s_hits = sparse.search(encoder.encode(queries), top_k=100)
    for method in ("rrf", "linear"):
        fused = [fuse(d, s, top_k=4, method=method) for d, s in zip(d_hits, s_hits)]
        got = search("--index", tmp_path / "flat", "--index", tmp_path / "sparse", "--model", a,
                     "--sparse-model", splade_dir, "--fusion", method)  # fmt: skip
        _same(got, fused, ids, atol=1e-6)

    more = tmp_path / "more.jsonl"
    more.write_text(json.dumps({"id": "m0", "text": "a new document about trains"}) + "\n")
    r = cli("index", "add", "--index", tmp_path / "sparse", "--corpus", more, "--model", splade_dir)
    assert r.exit_code == 0, r.output
    assert SparseIndex.load(tmp_path / "sparse").ids[-1] == "m0"
    r = cli("index", "add", "--index", tmp_path / "binary", "--corpus", more, "--model", a)
    assert r.exit_code == 0, r.output
    assert len(BinaryIndex.load(tmp_path / "binary")) == 31

    def fails(*args) -> str:
        r = cli(*args)
        assert r.exit_code == 2, r.output
        return " ".join(r.output.split())

    assert "built with model" in fails("search", "q", "--index", tmp_path / "binary", "--model",
                                       tiny_models[1])  # fmt: skip
    assert "SPLADE" in fails("search", "q", "--index", tmp_path / "sparse", "--model", a)
    assert "same documents" in fails(
        "search",
        "q",
        "--index",
        tmp_path / "flat",
        "--index",
        tmp_path / "sparse",
        "--model",
        a,
        "--sparse-model",
        splade_dir,
    )  # fmt: skip  (the sparse index has one more row)
    assert "one dense or binary index and one sparse" in fails(
        "search", "q", "--index", tmp_path / "flat", "--index", tmp_path / "binary"
    )
    assert "--kind must be one of" in fails("index", "build", "--corpus", corpus, "-o",
                                            tmp_path / "x", "--kind", "ivf")  # fmt: skip
    assert "--embeddings builds flat or hnsw" in fails(
        "index", "build", "--embeddings", tmp_path / "e.parquet", "-o", tmp_path / "x",
        "--kind", "binary")  # fmt: skip


def test_cli_options_an_index_kind_does_not_use_are_refused(
    cli, tiny_models, tiny_splade, tmp_path
):
    """One sparse index takes its SPLADE model from --sparse-model as from --model (the same
    hits); an option no index of the search (or build, add) uses is an error naming it, never
    ignored (issue #48: --sparse-model was ignored with one sparse index)."""
    pytest.importorskip("bm25s")
    from bertfamily.pipelines.retrieval.indexes import SparseIndex

    a = tiny_models[0]
    splade_dir, encoder = tiny_splade
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(DOCS) + "\n", encoding="utf-8")
    for kind, extra in (("flat", ("--model", a)), ("sparse", ("--model", splade_dir)),
                        ("bm25", ())):  # fmt: skip
        r = cli("index", "build", "--corpus", corpus, "-o", tmp_path / kind, "--kind", kind, *extra)
        assert r.exit_code == 0, r.output
    queries = ["about cats and coffee", "document number 7"]
    want = SparseIndex.build(encoder, DOCS).search(encoder.encode(queries), top_k=4)
    ids = list(range(1, len(DOCS) + 1))
    for model in (("--sparse-model", splade_dir), ("--model", splade_dir),
                  ("--model", splade_dir, "--sparse-model", splade_dir)):  # fmt: skip
        r = cli("search", *queries, "--index", tmp_path / "sparse", *model, "--format", "jsonl",
                "-k", "4")  # fmt: skip
        assert r.exit_code == 0, r.output
        _same(_jsonl(r), want, ids, atol=1e-5)

    def fails(*args) -> str:
        r = cli(*args)
        assert r.exit_code == 2, r.output
        return " ".join(r.output.split())

    flat, sparse, bm25 = (tmp_path / k for k in ("flat", "sparse", "bm25"))
    different = fails("search", "q", "--index", sparse, "--model", splade_dir, "--sparse-model", a)
    assert "a sparse index has one model" in different and different.endswith("give one of them")
    assert "needs its SPLADE model" in fails("search", "q", "--index", sparse)
    for args, says in [
        (("--index", flat, "--model", a, "--sparse-model", splade_dir),
         "--sparse-model: not used by a flat index; leave it out"),
        (("--index", flat, "--model", a, "--rescore", "10", "--fusion", "linear"),
         "--fusion, --rescore: not used by a flat index; leave them out"),
        (("--index", sparse, "--index", bm25, "--sparse-model", splade_dir, "--runtime",
          "torch"), "--runtime: not used by a hybrid search of sparse, bm25 indexes"),
        (("--index", bm25, "--dtype", "fp32"), "--dtype: not used by a bm25 index (it has no"),
        (("--index", bm25, "--index", sparse, "--model", a, "--sparse-model", splade_dir),
         "--model: not used by a hybrid search of bm25, sparse indexes"),
        (("--index", flat, "--index", bm25, "--model", a, "--sparse-model", splade_dir),
         "--sparse-model: not used by a hybrid search of flat, bm25 indexes"),
        (("--corpus", corpus, "--model", a, "--rescore", "3"),
         "--rescore: not used by a search of --corpus"),
    ]:  # fmt: skip
        assert says in fails("search", "q", *args), args
    build = ("index", "build", "--corpus", corpus, "-o", tmp_path / "x")
    assert "--ef-search: not used by a flat index" in fails(*build, "--model", a,
                                                           "--ef-search", "5")  # fmt: skip
    assert "--batch-size: not used by a bm25 index" in fails(*build, "--kind", "bm25",
                                                            "--batch-size", "4")  # fmt: skip
    assert not (tmp_path / "x").exists()
    assert "--device: not used by a bm25 index" in fails(
        "index", "add", "--index", bm25, "--corpus", corpus, "--device", "cpu"
    )
