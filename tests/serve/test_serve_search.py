"""``POST /search`` over persisted indexes (``serve --index``, issue 48): one index equals
`Index.search_texts` and ``bertfamily search --index`` (ids, scores ≤ 1e-6); two and three
indexes equal `fuse` of their lists (rrf, linear, weights); the refusals (unknown index 404,
empty query, bad top_k, unknown fields, weights, indexes of other documents, an index no
served model built); and in the same area: a ``--model`` given twice refused, /v1/rerank's
messages naming the query and ``documents[i]``, ``--adapter NAME=DIR`` adapting one of
several served models. In process (FastAPI's TestClient; the command line with uvicorn.run
replaced)."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("bm25s")
pytest.importorskip("faiss")

from fastapi.testclient import TestClient  # noqa: E402

from bertfamily.pipelines.retrieval import BM25Index, SparseIndex, VectorIndex, fuse  # noqa: E402
from bertfamily.serve.settings import ServeSettings  # noqa: E402
from helpers import save_tiny, save_tiny_splade  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

CORPUS = [
    "The cat sat on the warm mat near the window",
    "Dogs bark at cats; the cat runs up a tree",
    "A river flows through the valley to the sea",
    "Trains leave the station every hour, trains are late",
    "Coffee and music on a rainy morning",
    "Cats, dogs and rivers: a story about animals near water",
    "Espresso is strong coffee; the cat prefers milk",
]
IDS = [f"d{i}" for i in range(len(CORPUS))]
QUERIES = ["cat on a mat", "coffee music"]


@pytest.fixture(scope="module")
def world(minilm_dir, tmp_path_factory):
    """The tiny dense and SPLADE models (loaded as served), and their flat, sparse and bm25
    indexes of `CORPUS`, saved (plus a bm25 index of other documents)."""
    from bertfamily.serve.app import load_served_model

    root = tmp_path_factory.mktemp("search")
    dense_dir = save_tiny(root / "dense", minilm_dir)
    splade_dir = save_tiny_splade(root / "splade", minilm_dir)
    dense = load_served_model(dense_dir, dtype="fp32")
    sparse = load_served_model(splade_dir, dtype="fp32")
    VectorIndex.build(dense, CORPUS, IDS).save(root / "flat")
    SparseIndex.build(sparse, CORPUS, IDS).save(root / "sparse")
    BM25Index.build(CORPUS, IDS).save(root / "bm25")
    BM25Index.build(CORPUS[:2], IDS[:2]).save(root / "other")
    return dict(root=root, dense_dir=dense_dir, splade_dir=splade_dir, dense=dense, sparse=sparse)


@pytest.fixture(scope="module")
def client(world):
    from bertfamily.serve.app import create_app

    root = world["root"]
    models = {"dense": (world["dense"], world["dense_dir"]),
              "splade": (world["sparse"], world["splade_dir"])}  # fmt: skip
    indexes = {n: root / n for n in ("flat", "bm25", "sparse")}
    with TestClient(
        create_app(models, ServeSettings(max_client_batch_size=4), indexes=indexes)
    ) as c:
        yield c


def _lists(world, depth: int):
    """Each index's hits of `QUERIES` by the Python API: flat, bm25, sparse."""
    from bertfamily.pipelines.retrieval import open_index

    root = world["root"]
    return (
        open_index(root / "flat").search_texts(world["dense"], QUERIES, top_k=depth),
        open_index(root / "bm25").search_texts(QUERIES, top_k=depth),
        open_index(root / "sparse").search_texts(world["sparse"], QUERIES, top_k=depth),
    )


def _assert_same(got: list, want: list) -> None:
    assert [[g["id"] for g in row] for row in got] == [[w.id for w in row] for row in want]
    np.testing.assert_allclose(
        [g["score"] for row in got for g in row], [w.score for row in want for w in row],
        atol=1e-6, rtol=0,
    )  # fmt: skip


def _fused(lists, **kw) -> list:
    return [[IDS[h.index] for h in fuse(*per_query, top_k=4, **kw)] for per_query in zip(*lists)]


def _fused_scores(lists, **kw) -> list:
    return [[h.score for h in fuse(*per_query, top_k=4, **kw)] for per_query in zip(*lists)]


def test_one_index_equals_python_and_the_command_line(client, world, cli):
    flat, bm25, sparse = _lists(world, 4)
    for name, want in (("flat", flat), ("bm25", bm25), ("sparse", sparse)):
        assert all(want), name  # every query has hits: the comparison counts
        r = client.post("/search", json={"query": QUERIES, "top_k": 4, "index": name})
        assert r.status_code == 200, r.text
        _assert_same(r.json(), want)
        assert r.json()[0][0]["text"] == CORPUS[IDS.index(want[0][0].id)]
    r = cli("search", *QUERIES, "--index", world["root"] / "flat", "--model", world["dense_dir"],
            "--format", "jsonl", "-k", "4", "--dtype", "fp32")  # fmt: skip
    assert r.exit_code == 0, r.output
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    got = client.post("/search", json={"query": QUERIES, "top_k": 4, "index": "flat"}).json()
    assert [(x["id"], x["query_number"]) for x in rows] == [
        (h["id"], q) for q, hits in enumerate(got, 1) for h in hits
    ]
    np.testing.assert_allclose([x["score"] for x in rows], [h["score"] for h in sum(got, [])],
                               atol=1e-6, rtol=0)  # fmt: skip
    one = client.post("/search", json={"query": QUERIES[0], "index": "flat", "top_k": 2}).json()
    assert [h["id"] for h in one[0]] == [h.id for h in flat[0][:2]] and len(one) == 1
    bare = {"query": QUERIES, "index": "flat", "top_k": 2, "return_documents": False}
    assert all(set(h) == {"id", "score"} for h in client.post("/search", json=bare).json()[0])


def test_hybrid_equals_fuse_of_the_lists(client, world):
    flat, bm25, sparse = _lists(world, 100)
    for fusion in ("rrf", "linear"):
        body = {"query": QUERIES, "top_k": 4, "index": ["flat", "bm25"], "fusion": fusion}
        got = client.post("/search", json=body).json()
        assert [[h["id"] for h in row] for row in got] == _fused((flat, bm25), method=fusion)
        scores = [[h["score"] for h in row] for row in got]
        np.testing.assert_allclose(scores, _fused_scores((flat, bm25), method=fusion), atol=1e-6)
    body = {"query": QUERIES, "top_k": 4, "index": ["bm25", "flat"], "weights": [3, 0.5]}
    got = client.post("/search", json=body).json()
    assert [[h["id"] for h in row] for row in got] == _fused((bm25, flat), weights=[3, 0.5])
    scores = [[h["score"] for h in row] for row in got]
    np.testing.assert_allclose(scores, _fused_scores((bm25, flat), weights=[3, 0.5]), atol=1e-6)
    # no "index": every loaded one, in load order (flat, bm25, sparse)
    got = client.post("/search", json={"query": QUERIES, "top_k": 4}).json()
    assert [[h["id"] for h in row] for row in got] == _fused((flat, bm25, sparse))
    # under /models/dense/: its index and the bm25 one
    got = client.post("/models/dense/search", json={"query": QUERIES, "top_k": 4}).json()
    assert [[h["id"] for h in row] for row in got] == _fused((flat, bm25))
    r = client.post("/models/splade/search", json={"query": "cat", "index": "flat"})
    assert r.status_code == 422 and "model 'dense', not 'splade'" in r.json()["error"]


@pytest.mark.parametrize(
    "body, status, says",
    [
        ({"query": "cat", "index": "nope"}, 404, "no index named 'nope'; this server has 'flat'"),
        ({"query": "cat", "index": ["flat", "flat"]}, 422, "'flat' more than once"),
        ({"query": "cat", "index": []}, 422, "index cannot be empty"),
        ({"query": ""}, 422, "query is empty"),
        ({"query": ["cat", " "]}, 422, "query[1] is empty"),
        ({"query": []}, 422, "query cannot be empty"),
        ({"query": ["a"] * 5}, 413, "5 inputs in one request; the maximum is 4"),
        ({"query": "cat", "top_k": 0}, 422, "top_k"),
        ({"query": "cat", "top_k": "3"}, 422, "top_k"),
        ({"query": "cat", "topk": 3}, 422, "topk: Extra inputs are not permitted"),
        ({"query": "cat", "fusion": "max"}, 422, "fusion"),
        ({"query": "cat", "index": ["flat", "bm25"], "weights": [1]}, 422, "weights must be 2"),
        ({"query": "cat", "index": ["flat", "bm25"], "weights": [1, -1]}, 422, "weights must"),
        ({"query": "cat", "index": ["flat", "bm25"], "weights": [0, 0]}, 422, "not all be 0"),
        (  # a linear sum of these overflowed to a null score at rank 1
            {"query": "cat", "index": ["flat", "bm25"], "fusion": "linear", "weights": [1e308] * 2},
            422,
            "at most 1e+06",
        ),
        ({"query": "cat", "index": "flat", "fusion": "linear"}, 422, "fusion: not used when one"),
        ({"query": "cat", "index": "flat", "weights": [3]}, 422, "weights: not used when one"),
    ],
)
def test_search_refusals(client, body, status, says):
    r = client.post("/search", json=body)
    assert r.status_code == status, r.text
    assert says in r.json()["error"], r.json()


def test_indexes_checked_at_start_up(world, cli, monkeypatch):
    import uvicorn

    from bertfamily.errors import InputError, VectorIndexError
    from bertfamily.serve.app import create_app

    root, dense = world["root"], world["dense"]
    with TestClient(
        create_app(dense, indexes={"flat": root / "flat", "other": root / "other"})
    ) as c:
        r = c.post("/search", json={"query": "cat", "index": ["flat", "other"]})
        assert r.status_code == 422 and "do not hold the same documents" in r.json()["error"]
        assert c.post("/search", json={"query": "cat", "index": "other"}).status_code == 200
    with TestClient(create_app(dense, indexes={"a": root / "flat", "b": root / "flat"})) as c:
        r = c.post("/search", json={"query": "cat", "index": ["a", "b"]})  # as the CLI refuses
        assert r.status_code == 422 and "fuses different retrievers" in r.json()["error"]
    with TestClient(create_app(dense)) as c:
        r = c.post("/search", json={"query": "cat"})
        assert r.status_code == 404 and "holds no index" in r.json()["error"]
    with pytest.raises(InputError, match="no served model of its kind"):
        create_app(dense, indexes={"sparse": root / "sparse"})
    other_dir = save_tiny(root / "dense2", world["dense_dir"], seed=5)
    from bertfamily.serve.app import load_served_model

    with pytest.raises(VectorIndexError, match="index 'flat': this index was built with model"):
        create_app(load_served_model(other_dir), indexes={"flat": root / "flat"})
    ran = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: ran.update(app=app))
    d, s = world["dense_dir"], world["splade_dir"]
    r = cli("serve", "--model", d, "--model", s, "--index", f"f={root / 'flat'}",
            "--index", root / "sparse", "--index", root / "bm25")  # fmt: skip
    assert r.exit_code == 0, r.output
    served = ran["app"].state.indexes
    assert list(served) == ["f", "sparse", "bm25"]
    assert [x.state and x.state.model_id for x in served.values()] == ["dense", "splade", None]

    def fails(*args) -> str:
        r = cli("serve", *args)
        assert r.exit_code == 2, r.output
        return " ".join(r.output.split())

    assert "not an index directory" in fails("--model", d, "--index", root / "missing")
    assert "two indexes are named 'bm25'" in fails(
        "--model", d, "--index", root / "bm25", "--index", f"bm25={root / 'other'}"
    )
    assert "this index was built with model" in fails("--model", s, "--model", other_dir,
                                                      "--index", root / "flat")  # fmt: skip
    # a --model given twice (or two of one NAME) is refused, no longer served once
    assert "--model" in fails("--model", d, "--model", d) and "given twice" in fails(
        "--model", d, "--model-id", d
    )
    assert "two models are named a" in fails("--model", f"a={d}", "--model", f"a={s}")


def test_rerank_messages_name_the_query_and_the_documents(minilm_dir, tmp_path):
    from bertfamily.errors import ServeError
    from bertfamily.serve.admission import InputNames, check_truncation
    from bertfamily.serve.app import create_app, load_served_model
    from retrieval_dirs import classic_cross_encoder

    reranker = load_served_model(classic_cross_encoder(tmp_path / "ce", minilm_dir))
    settings = ServeSettings(max_input_chars=30)
    json_body = {"content-type": "application/json"}  # lone surrogates as JSON escapes
    with TestClient(create_app(reranker, settings)) as c:
        cases = [
            ({"query": "q\ud800", "documents": ["a"]}, "query is not valid Unicode"),
            ({"query": "q", "documents": ["a", "b\ud800"]}, "documents[1] is not valid Unicode"),
            ({"query": "q", "documents": ["a", " "]}, "documents[1] is empty"),
            ({"query": "q", "documents": ["a", "b" * 40]},
             "the query with documents[1] has 41 characters; the maximum is 30"),
        ]  # fmt: skip
        for body, says in cases:
            r = c.post("/v1/rerank", content=json.dumps(body), headers=json_body)
            assert r.status_code in (413, 422), r.text
            assert r.json()["error"]["message"].startswith(says), r.json()
        r = c.post("/rerank", json={"query": "q", "texts": ["a", ""]})
        assert r.status_code == 422 and r.json()["error"] == "texts[1] is empty"
        r = c.post("/predict", json={"inputs": [["q", "a"], ["q", " "]]})
        assert r.status_code == 422 and r.json()["error"] == "input 1 is empty"  # as before
    with pytest.raises(ServeError, match=r"^the query with documents\[1\] has 9 tokens; this"):
        names = InputNames("query", "documents")
        check_truncation([False, True], 5, False, ServeSettings(), lambda i: 9, names)


def test_adapter_name_targets_one_of_several_models(cli, monkeypatch, tmp_path):
    peft = pytest.importorskip("peft")
    transformers = pytest.importorskip("transformers")
    import torch
    import uvicorn

    from bertfamily.pipelines.embedding.embed import SentenceEmbedder
    from helpers import make_tiny

    tiny = make_tiny(tmp_path / "tiny")
    torch.manual_seed(0)
    base = transformers.BertModel.from_pretrained(tiny)
    config = peft.LoraConfig(init_lora_weights=False, r=4, target_modules=["query", "value"])
    peft.get_peft_model(base, config).save_pretrained(tmp_path / "lora")
    ran = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: ran.update(app=app))
    r = cli("serve", "--model", f"a={tiny}", "--model", f"b={tiny}", "--adapter",
            f"b={tmp_path / 'lora'}", "--dtype", "fp32")  # fmt: skip
    assert r.exit_code == 0, r.output
    texts = ["the cat sat on a mat", "a dog ran far away"]
    adapted = SentenceEmbedder(tiny, adapter=tmp_path / "lora").encode(texts)
    plain = SentenceEmbedder(tiny).encode(texts)
    assert np.abs(adapted - plain).max() > 1e-3
    with TestClient(ran["app"]) as c:
        np.testing.assert_allclose(c.post("/models/b/embed", json={"inputs": texts}).json(),
                                   adapted, atol=1e-5, rtol=0)  # fmt: skip
        np.testing.assert_allclose(c.post("/models/a/embed", json={"inputs": texts}).json(),
                                   plain, atol=1e-5, rtol=0)  # fmt: skip
    r = cli("serve", "--model", tiny, "--adapter", tmp_path / "lora", "--dtype", "fp32")
    assert r.exit_code == 0, r.output  # one model: DIR alone, as before
    with TestClient(ran["app"]) as c:
        np.testing.assert_allclose(c.post("/embed", json={"inputs": texts}).json(), adapted,
                                   atol=1e-5, rtol=0)  # fmt: skip

    def fails(*args) -> str:
        r = cli("serve", "--model", f"a={tiny}", "--model", f"b={tiny}", *args)
        assert r.exit_code == 2, r.output
        return " ".join(r.output.split())

    assert "give --adapter NAME=DIR" in fails("--adapter", tmp_path / "lora")
    assert "no served model is named 'c'" in fails("--adapter", f"c={tmp_path / 'lora'}")
    lora = tmp_path / "lora"
    assert "given two adapters" in fails("--adapter", f"a={lora}", "--adapter", f"a={lora}")
