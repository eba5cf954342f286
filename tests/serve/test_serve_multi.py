"""Several models behind one server and ``/v1/rerank`` in Jina's and Cohere's wire (issue 48,
item 5). Against a real ``bertfamily serve --model A --model ce=B`` process (the real MiniLM
and a tiny random cross-encoder saved by sentence-transformers' ``CrossEncoder``):
``/v1/rerank`` equal to `Reranker.rank` and to sentence-transformers' ``CrossEncoder.rank``
(1e-5), read by the ``cohere`` client unchanged (skipped when not installed); routing by the
body's ``model`` and by ``/models/{name}/``, the first model on the plain routes, unknown
models refused with 404 in each wire's shape, ``/v1/models``, ``/info`` and ``/metrics`` per
model. In process: the wire's refusals, a one-model server that ignores ``model`` as before,
and the command line's refusals."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

from fastapi.testclient import TestClient  # noqa: E402

from bertfamily.serve.settings import ServeSettings  # noqa: E402
from retrieval_dirs import classic_cross_encoder, st6_cross_encoder  # noqa: E402
from test_serve import Server  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
KEY = "multi-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
QUERY = "where do cats sleep"
DOCS = ["Cats sleep on the sofa.", "Stocks fell on Monday.", "A dog ran.", "Cats nap in the sun."]


@pytest.fixture(scope="module")
def ce_dirs(minilm_dir, tmp_path_factory):
    """(the Hugging Face layout, the same model saved by sentence-transformers' CrossEncoder)."""
    pytest.importorskip("sentence_transformers")
    root = tmp_path_factory.mktemp("multi")
    classic = classic_cross_encoder(root / "classic", minilm_dir)
    return classic, st6_cross_encoder(root / "ce", classic)


@pytest.fixture(scope="module")
def server(minilm_dir, ce_dirs):
    s = Server(minilm_dir, "--model", f"ce={ce_dirs[1]}", "--dtype", "fp32",
               env={"API_KEY": KEY})  # fmt: skip
    yield s
    s.stop()


def post(server, route: str, body: dict) -> httpx.Response:
    return httpx.post(server.url + route, json=body, headers=AUTH, timeout=60)


def test_v1_rerank_equals_reranker_rank_and_cross_encoder_rank(server, ce_dirs):
    from sentence_transformers import CrossEncoder

    from bertfamily.pipelines.reranking.rerank import Reranker

    ours = Reranker(ce_dirs[1]).rank(QUERY, DOCS, return_documents=True)
    theirs = CrossEncoder(str(ce_dirs[1])).rank(QUERY, DOCS)
    r = post(server, "/v1/rerank", {"model": "ce", "query": QUERY, "documents": DOCS})
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["model"] == "ce" and set(got) >= {"id", "results", "usage"}
    assert [x["index"] for x in got["results"]] == [d.corpus_id for d in ours]
    assert [x["index"] for x in got["results"]] == [d["corpus_id"] for d in theirs]
    scores = [x["relevance_score"] for x in got["results"]]
    np.testing.assert_allclose(scores, [d.score for d in ours], atol=1e-5)
    np.testing.assert_allclose(scores, [float(d["score"]) for d in theirs], atol=1e-5)
    assert [x["document"] for x in got["results"]] == [{"text": d.text} for d in ours]
    mask = Reranker(ce_dirs[1]).tokenizer([QUERY] * 4, DOCS, padding=True)["attention_mask"]
    assert got["usage"]["total_tokens"] == int(np.asarray(mask).sum())  # no padding counted
    # top_n, no documents, Cohere's document objects (as sent) and one rank field
    objects = [{"text": d, "id": str(i)} for i, d in enumerate(DOCS)]
    body = {"model": "ce", "query": QUERY, "documents": objects, "top_n": 2}
    best = post(server, "/v1/rerank", body).json()["results"]
    assert [x["index"] for x in best] == [d.corpus_id for d in ours[:2]]
    assert best[0]["document"] == objects[best[0]["index"]]
    titles = [{"title": d} for d in DOCS]
    body = {"model": "ce", "query": QUERY, "documents": titles, "rank_fields": ["title"],
            "return_documents": False}  # fmt: skip
    plain = post(server, "/v1/rerank", body).json()["results"]
    assert [x["index"] for x in plain] == [d.corpus_id for d in ours]
    assert all(set(x) == {"index", "relevance_score"} for x in plain)
    # TEI's /rerank of the same model, under its path prefix: the same scores
    tei = post(server, "/models/ce/rerank", {"query": QUERY, "texts": DOCS}).json()
    np.testing.assert_allclose([x["score"] for x in tei], scores, atol=1e-6)


def test_cohere_client_reads_v1_and_v2_rerank(server, ce_dirs):
    cohere = pytest.importorskip("cohere")
    try:
        cohere.Client  # noqa: B018 (its imports: fastavro, ...)
    except ImportError as e:
        pytest.skip(f"cohere's client does not import: {e}")
    from bertfamily.pipelines.reranking.rerank import Reranker

    ours = Reranker(ce_dirs[1]).rank(QUERY, DOCS, top_k=3)
    v1 = cohere.Client(api_key=KEY, base_url=server.url, timeout=60)
    answer = v1.rerank(model="ce", query=QUERY, documents=DOCS, top_n=3, return_documents=True)
    assert [x.index for x in answer.results] == [d.corpus_id for d in ours]
    np.testing.assert_allclose(
        [x.relevance_score for x in answer.results], [d.score for d in ours], atol=1e-5
    )
    assert answer.results[0].document.text == DOCS[ours[0].corpus_id]
    v2 = cohere.ClientV2(api_key=KEY, base_url=server.url, timeout=60)
    answer = v2.rerank(model="ce", query=QUERY, documents=DOCS, top_n=3)
    assert [x.index for x in answer.results] == [d.corpus_id for d in ours]
    with pytest.raises(cohere.core.api_error.ApiError) as e:
        v2.rerank(model="nope", query=QUERY, documents=DOCS)
    assert e.value.status_code == 404


def test_models_chosen_by_body_and_path_prefix(server, minilm_dir):
    from bertfamily.pipelines.embedding.embed import SentenceEmbedder

    name = minilm_dir.name
    want = SentenceEmbedder(minilm_dir, dtype="fp32").encode(DOCS[:2])
    for body in ({"input": DOCS[:2]}, {"input": DOCS[:2], "model": name}):  # default: first
        got = post(server, "/v1/embeddings", body).json()
        assert got["model"] == name
        np.testing.assert_allclose([d["embedding"] for d in got["data"]], want, atol=1e-5)
    for route in ("/embed", f"/models/{name}/embed"):
        np.testing.assert_allclose(post(server, route, {"inputs": DOCS[:2]}).json(), want,
                                   atol=1e-5)  # fmt: skip
    # the wrong kind, an unknown model, a body that contradicts its path: each wire's shape
    r = post(server, "/v1/embeddings", {"input": "a", "model": "ce"})
    assert r.status_code == 400 and r.json()["error"]["message"].startswith("ce is a reranker")
    r = post(server, "/v1/rerank", {"model": "nope", "query": "q", "documents": ["d"]})
    assert r.status_code == 404
    assert r.json()["error"] == {
        "message": f"the model 'nope' does not exist; this server has '{name}', 'ce'",
        "type": "not_found_error", "param": None, "code": "model_not_found",
    }  # fmt: skip
    r = post(server, "/models/ce/v1/rerank", {"model": name, "query": "q", "documents": ["d"]})
    assert r.status_code == 422 and "the path is for the model 'ce'" in r.text
    r = post(server, "/models/nope/rerank", {"query": "q", "texts": ["d"]})
    assert r.status_code == 404 and r.json()["error_type"] == "model_not_found"
    assert f"this server has '{name}', 'ce'" in r.json()["error"]
    r = httpx.post(server.url + "/models/nope/rerank", json={}, timeout=30)  # no key: 401 first
    assert r.status_code == 401
    assert post(server, "/rerank", {"query": "q", "texts": ["d"]}).status_code == 400  # first
    # listings, per-model /info and /health, /metrics labelled by model
    get = lambda route: httpx.get(server.url + route, headers=AUTH, timeout=30)  # noqa: E731
    assert [m["id"] for m in get("/v1/models").json()["data"]] == [name, "ce"]
    assert get("/v1/models/ce").json()["id"] == "ce"
    assert get("/v1/models/nope").status_code == 404
    info = get("/models/ce/info").json()
    assert info["model_id"] == "ce" and "reranker" in info["model_type"]
    assert get("/info").json()["models"] == [name, "ce"]
    assert get("/models/ce/health").json() == {"status": "ok"}
    assert post(server, "/v1/rerank", {"model": "ce", "query": "q", "documents": ["d"]}).is_success
    text = get("/metrics").text
    assert 'bertfamily_requests_total{model="ce",route="/v1/rerank",status="200"}' in text
    assert f'bertfamily_requests_total{{model="{name}",route="/embed",status="200"}}' in text
    own = get("/models/ce/metrics").text
    assert 'bertfamily_requests_total{route="/v1/rerank",status="200"}' in own
    assert 'route="/embed"' not in own


def test_v1_rerank_refusals_and_one_model_servers(ce_dirs, minilm_dir, tmp_path):
    from bertfamily.serve.app import create_app, load_served_model

    reranker = load_served_model(ce_dirs[1])
    with TestClient(create_app(reranker, ServeSettings(max_client_batch_size=2))) as c:
        # one model: ``model`` is ignored, as before; /v1/rerank takes openai_max_inputs
        r = c.post("/v1/rerank", json={"model": "any", "query": "q", "documents": DOCS})
        assert r.status_code == 200 and r.json()["model"] == "ce"
        refusals = {
            "documents": [{"query": "q", "documents": []}, "documents cannot be empty"],
            "query": [{"query": " ", "documents": ["d"]}, "query is empty"],
            "top_n": [{"query": "q", "documents": ["d"], "top_n": 0}, "top_n"],
            "object": [{"query": "q", "documents": [{"body": "d"}]}, "no string field 'text'"],
            "fields": [{"query": "q", "documents": ["d"], "rank_fields": ["a", "b"]}, "one"],
        }
        for name, (body, says) in refusals.items():
            r = c.post("/v1/rerank", json=body)
            assert r.status_code == 422, name
            error = r.json()["error"]
            assert error["type"] == "invalid_request_error" and says in error["message"], name
    classic = classic_cross_encoder(tmp_path / "classic", minilm_dir, 2)
    two_labels = load_served_model(st6_cross_encoder(tmp_path / "two", classic))
    with TestClient(create_app(two_labels)) as c:
        r = c.post("/v1/rerank", json={"query": "q", "documents": ["d"]})
        assert r.status_code == 422 and "rerank needs one" in r.json()["error"]["message"]
    # each model its own limits; the key and the cap are the server's
    models = {"small": (reranker, ce_dirs[1], ServeSettings(max_client_batch_size=1)),
              "big": reranker}  # fmt: skip
    with TestClient(create_app(models, ServeSettings(api_key="k"))) as c:
        body = {"query": "q", "texts": ["a", "b"]}
        assert c.post("/models/big/rerank", json=body).status_code == 401
        key = {"Authorization": "Bearer k"}
        assert c.post("/models/big/rerank", json=body, headers=key).status_code == 200
        r = c.post("/models/small/rerank", json=body, headers=key)
        assert r.status_code == 413 and "max_client_batch_size" in r.json()["error"]
        assert c.get("/info", headers=key).json()["max_client_batch_size"] == 1
    with pytest.raises(ValueError, match="at least one model"):
        create_app({})
    with pytest.raises(ValueError, match="not model_dir"):
        create_app({"a": reranker}, model_dir=ce_dirs[1])


def test_command_line_names_the_models_and_refuses_what_it_cannot(cli, ce_dirs, monkeypatch):
    import uvicorn

    ran = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: ran.update(app=app, **kw))
    ce = str(ce_dirs[1])
    result = cli("serve", "--model", ce, "--model", f"other={ce}", "--model", f"x={ce}")
    assert result.exit_code == 0, result.output
    assert list(ran["app"].state.serve.peers) == ["ce", "other", "x"]
    result = cli("serve", "--model", f"one={ce}")  # one model, named
    assert result.exit_code == 0 and ran["app"].state.serve.model_id == "one"
    result = cli("serve", "--model", ce, "--model-id", ce)  # one given twice: refused
    assert result.exit_code == 2 and "is given twice" in result.output
    result = cli("serve", "--model", f"a={ce}", "--model", f"a={ce_dirs[0]}")
    assert result.exit_code == 2 and "two models are named a" in result.output
    result = cli("serve", "--model", ce, "--model", f"b={ce}", "--workers", "2")
    assert result.exit_code == 2 and "--workers N serves one model" in result.output


@pytest.fixture(scope="module")
def multivector_dirs(minilm_dir, tmp_path_factory):
    """(a tiny ColBERT built and saved by PyLate, a tiny BGE-M3 directory in FlagEmbedding's
    layout: an XLM-R trunk with ``colbert_linear.pt`` and ``sparse_linear.pt``)."""
    import shutil

    import torch
    import transformers

    pytest.importorskip("pylate")
    from helpers import save_hf_tiny
    from reference.pylate_colbert import make_pylate_colbert

    root = tmp_path_factory.mktemp("multivector")
    base = root / "bert"
    save_hf_tiny("bert", "BertModel", base, vocab_size=30522, max_position_embeddings=64,
                 hidden_size=32)  # fmt: skip
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        shutil.copy(minilm_dir / name, base / name)
    colbert = make_pylate_colbert(
        base, root / "colbert", embedding_size=16, query_length=12, document_length=20
    )
    m3 = root / "m3"
    words = sorted({w.strip(".,") for d in DOCS for w in d.lower().split()})
    chars = sorted({c for d in DOCS for c in d.lower() if not c.isspace()})
    vocab = [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("▁", -3.0)]
    vocab += [("▁" + w, -2.0) for w in words] + [(c, -6.0) for c in chars] + [("<mask>", 0.0)]
    tokenizer = transformers.XLMRobertaTokenizer(vocab=vocab)
    tokenizer.save_pretrained(m3)
    save_hf_tiny("xlm-roberta", "XLMRobertaModel", m3, vocab_size=len(tokenizer),
                 initializer_range=0.4)  # fmt: skip
    torch.manual_seed(3)
    torch.save(torch.nn.Linear(32, 24).state_dict(), m3 / "colbert_linear.pt")
    torch.save(torch.nn.Linear(32, 1).state_dict(), m3 / "sparse_linear.pt")
    return colbert, m3


def test_multivector_routes_equal_the_pipelines(multivector_dirs, cli, monkeypatch):
    """/embed_multivector of a ColBERT model equals `ColBERTEncoder.encode` (queries and
    documents; its parity with PyLate is tests/pipelines/test_colbert.py's), /embed_m3 and
    /embed_multivector of a BGE-M3 model equal `BGEM3Encoder.encode` (FlagEmbedding's parity:
    tests/pipelines/test_bge_m3.py), both models behind one server."""
    import uvicorn

    from bertfamily.pipelines.embedding.bge_m3 import BGEM3Encoder
    from bertfamily.pipelines.embedding.colbert import ColBERTEncoder
    from bertfamily.serve.app import create_app, load_served_model

    colbert_dir, m3_dir = multivector_dirs
    models = {"colbert": load_served_model(colbert_dir), "m3": load_served_model(m3_dir)}
    ran = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: ran.update(app=app, **kw))
    result = cli("serve", "--model", str(colbert_dir), "--model", f"m3={m3_dir}")
    assert result.exit_code == 0, result.output
    assert "dtype: float32" in result.output and list(ran["app"].state.serve.peers) == [
        "colbert", "m3"
    ]  # fmt: skip
    colbert, m3 = ColBERTEncoder(colbert_dir), BGEM3Encoder(m3_dir)
    texts = [d.lower() for d in DOCS[:3]]
    with TestClient(create_app(models)) as c:
        for is_query in (True, False):
            body = {"inputs": texts, "is_query": is_query, "truncate": True}
            got = c.post("/embed_multivector", json=body).json()
            want = colbert.encode(texts, is_query=is_query)
            assert [np.asarray(g).shape for g in got] == [w.shape for w in want]
            for g, w in zip(got, want):
                np.testing.assert_allclose(g, w, atol=1e-6)
        info = c.get("/info").json()
        assert info["model_type"] == {"embedding": {"pooling": "colbert", "dimension": 16}}
        long = {"inputs": ["word " * 40]}  # over document_length 20: 413 unless truncating
        assert c.post("/embed_multivector", json=long).status_code == 413
        want = m3.encode(texts)
        got = c.post("/models/m3/embed_m3", json={"inputs": texts}).json()
        np.testing.assert_allclose([g["dense"] for g in got], want.dense, atol=1e-6)
        for g, v, w in zip(got, want.sparse, want.colbert):
            assert {int(k) for k in g["sparse"]} == set(v.indices.tolist())
            np.testing.assert_allclose(list(g["sparse"].values()), v.values, atol=1e-6)
            np.testing.assert_allclose(g["colbert"], w, atol=1e-6)
        only = c.post("/models/m3/embed_m3", json={"inputs": texts, "outputs": ["dense"]}).json()
        assert all(set(g) == {"dense"} for g in only)
        vectors = c.post("/models/m3/embed_multivector", json={"inputs": texts}).json()
        for g, w in zip(vectors, want.colbert):
            np.testing.assert_allclose(g, w, atol=1e-6)
        r = c.post("/embed_m3", json={"inputs": texts})  # the default model is the ColBERT one
        assert r.status_code == 400 and r.json()["error"].startswith("colbert is a ColBERT")
        r = c.post("/models/m3/embed_m3", json={"inputs": texts, "outputs": ["nope"]})
        assert r.status_code == 422
