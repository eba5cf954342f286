"""The retrieval wire against a real `bertfamily serve` (uvicorn on loopback, httpx): every
TEI / OpenAI field on our routes, unknown fields ignored, `dimensions`, `truncation_direction`,
prompts counted in `usage`, `/embed_all`, `/similarity`, `/tokenize`, `/decode`; a
cross-encoder's `/rerank` and `/predict` (= `Reranker`); a SPLADE model's `/embed_sparse`
(= `SparseEncoder`). Request bodies copied from the anchors' documentation are marked."""

from __future__ import annotations

import base64
import json
import os

import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

from retrieval_dirs import classic_cross_encoder, splade, st6_cross_encoder  # noqa: E402
from test_serve import Server  # noqa: E402

pytestmark = pytest.mark.slow
LONG = "word " * 300


@pytest.fixture(scope="module")
def prompted_minilm(tmp_path_factory, minilm_dir):
    """MiniLM with a default prompt (links to its files, its own model settings)."""
    d = tmp_path_factory.mktemp("prompted")
    for f in minilm_dir.iterdir():
        if f.name != "config_sentence_transformers.json":
            os.symlink(f, d / f.name)
    prompts = {"query": "query: ", "passage": "passage: "}
    (d / "config_sentence_transformers.json").write_text(
        json.dumps({"prompts": prompts, "default_prompt_name": "query"})
    )
    return d


@pytest.fixture(scope="module")
def embed_server(prompted_minilm):
    server = Server(prompted_minilm, "--max-input-chars", "5000", "--dtype", "fp32")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def embedder(prompted_minilm):
    from bertfamily.pipelines.embedding.embed import SentenceEmbedder

    return SentenceEmbedder(prompted_minilm, dtype="fp32")


def post(server, route, body):
    r = httpx.post(server.url + route, json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def test_tei_embed_fields_and_unknown_fields(embed_server, embedder):
    # TEI README: curl 127.0.0.1:8080/embed -X POST -d '{"inputs":"What is Deep Learning?"}'
    got = post(embed_server, "/embed", {"inputs": "What is Deep Learning?"})
    np.testing.assert_allclose(got, embedder.encode(["What is Deep Learning?"]), atol=1e-6)
    body = {
        "inputs": ["a cat", LONG],
        "truncate": True,
        "truncation_direction": "Left",
        "normalize": True,
        "prompt_name": "passage",
        "dimensions": 128,
        "some_future_field": {"x": 1},
    }
    got = np.array(post(embed_server, "/embed", body))
    want = embedder.encode(
        ["a cat", LONG], prompt_name="passage", dimensions=128, truncation_side="left"
    )
    assert got.shape == (2, 128)
    np.testing.assert_allclose(got, want, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1, atol=1e-5)
    right = embedder.encode([LONG], prompt_name="passage", dimensions=128)
    assert not np.allclose(got[1], right[0], atol=1e-3)  # the left cut kept the other end
    raw = np.array(
        post(embed_server, "/embed", {"inputs": "x", "normalize": False, "dimensions": 8})
    )
    full = embedder.encode(["x"], normalize=False)
    np.testing.assert_allclose(raw, full[:, :8], atol=1e-6)
    bad = httpx.post(embed_server.url + "/embed", json={"inputs": "x", "dimensions": 999})
    assert bad.status_code == 422 and "384" in bad.json()["error"]
    bad = httpx.post(
        embed_server.url + "/embed", json={"inputs": "x", "truncation_direction": "up"}
    )
    assert bad.status_code == 422


def test_openai_fields_prompt_in_usage(embed_server, embedder):
    # OpenAI API reference, "Create embeddings"
    body = {
        "input": "The food was delicious and the waiter...",
        "model": "text-embedding-ada-002",
        "encoding_format": "float",
    }
    r = post(embed_server, "/v1/embeddings", body)
    want = embedder.encode([body["input"]])  # the default prompt "query: " applies
    np.testing.assert_allclose(r["data"][0]["embedding"], want[0], atol=1e-6)
    n = len(embedder.tokenizer(["query: " + body["input"]], return_tensors=None)["input_ids"][0])
    assert r["usage"] == {"prompt_tokens": n, "total_tokens": n}
    body = {"input": ["a", "b"], "model": "m", "dimensions": 256, "user": "user-1234",
            "encoding_format": "base64", "extra": True}  # fmt: skip
    r = post(embed_server, "/v1/embeddings", body)
    vec = np.frombuffer(base64.b64decode(r["data"][1]["embedding"]), dtype="<f4")
    np.testing.assert_allclose(vec, embedder.encode(["b"], dimensions=256)[0], atol=1e-6)


def test_embed_all_similarity_tokenize_decode(embed_server, embedder):
    rows = post(embed_server, "/embed_all", {"inputs": ["a cat", "b"], "prompt_name": "passage"})
    want = embedder.encode_tokens(["a cat", "b"], prompt_name="passage")
    assert [len(r) for r in rows] == [len(w) for w in want] and len(rows[0][0]) == 384
    np.testing.assert_allclose(np.array(rows[0]), want[0], atol=1e-5)
    # TEI's /similarity (the sentence-similarity task body)
    body = {
        "inputs": {
            "source_sentence": "What is Deep Learning?",
            "sentences": ["What is Machine Learning?", "The cat sat."],
        }
    }
    sims = post(embed_server, "/similarity", body)
    v = embedder.encode([body["inputs"]["source_sentence"], *body["inputs"]["sentences"]])
    np.testing.assert_allclose(sims, v[1:] @ v[0], atol=1e-6)
    # TEI README: curl 127.0.0.1:8080/tokenize -X POST -d '{"inputs":"test"}'
    toks = post(embed_server, "/tokenize", {"inputs": "test", "prompt_name": "passage"})[0]
    assert [t["text"] for t in toks] == ["[CLS]", "passage", ":", "test", "[SEP]"]
    assert toks[0]["special"] and toks[0]["start"] is None
    assert (toks[3]["start"], toks[3]["stop"]) == (9, 13)
    plain = post(embed_server, "/tokenize", {"inputs": ["a b"], "add_special_tokens": False})
    # the default prompt ("query: ") applies here too, as on /embed
    assert [t["text"] for t in plain[0]] == ["query", ":", "a", "b"]
    assert [t["id"] for t in plain[0]][2:] == [1037, 1038]
    ids = [t["id"] for t in toks]
    assert post(embed_server, "/decode", {"ids": ids}) == ["passage : test"]
    got = post(
        embed_server, "/decode", {"ids": [ids, [101, 1037, 102]], "skip_special_tokens": False}
    )
    assert got[1] == "[CLS] a [SEP]"
    assert httpx.post(embed_server.url + "/decode", json={"ids": [10**9]}).status_code == 422
    assert (
        httpx.post(embed_server.url + "/rerank", json={"query": "q", "texts": ["t"]}).status_code
        == 400
    )


@pytest.fixture(scope="module")
def ce_dir(tmp_path_factory, minilm_dir):
    root = tmp_path_factory.mktemp("ce-serve")
    return st6_cross_encoder(root / "st6", classic_cross_encoder(root / "classic", minilm_dir))


def test_rerank_and_predict(ce_dir):
    from bertfamily.pipelines.reranking.rerank import Reranker

    ours = Reranker(ce_dir)
    server = Server(ce_dir)
    try:
        # TEI README: the /rerank example body
        texts = ["Deep Learning is not...", "Deep learning is..."]
        body = {"query": "What is Deep Learning?", "texts": texts}
        got = post(server, "/rerank", body)
        want = ours.rank(body["query"], body["texts"])
        assert [g["index"] for g in got] == [w.corpus_id for w in want]
        np.testing.assert_allclose([g["score"] for g in got], [w.score for w in want], atol=1e-6)
        assert "text" not in got[0]
        body |= {"raw_scores": True, "return_text": True, "truncate": True,
                 "truncation_direction": "Left", "unknown": 1}  # fmt: skip
        got = post(server, "/rerank", body)
        raw = ours.predict([(body["query"], t) for t in body["texts"]], raw_scores=True)
        # raw logits (|x| ~ 2): the server's threads may sum in another order (oneDNN)
        np.testing.assert_allclose(
            sorted(g["score"] for g in got), sorted(raw), rtol=2e-6, atol=1e-6
        )
        assert {g["text"] for g in got} == set(body["texts"])
        pairs = [["What is Deep Learning?", "Deep Learning is not..."], ["a", "b"]]
        got = post(server, "/predict", {"inputs": pairs})
        want = ours.predict(pairs)
        assert [row[0]["label"] for row in got] == ["LABEL_0", "LABEL_0"]
        np.testing.assert_allclose([row[0]["score"] for row in got], want, atol=1e-6)
        # TEI: a list of two strings is ONE pair, answered with one flat list
        one = post(
            server, "/predict", {"inputs": ["What is Deep Learning?", "Deep Learning is not..."]}
        )
        assert [p["label"] for p in one] == ["LABEL_0"]
        np.testing.assert_allclose(one[0]["score"], want[0], atol=1e-6)
        for single in ("a", ["a"], [["a"], ["b", "c"]]):  # a reranker scores pairs only
            bad = httpx.post(server.url + "/predict", json={"inputs": single})
            assert bad.status_code == 422 and "scores pairs" in bad.json()["error"]
        assert httpx.post(server.url + "/embed", json={"inputs": "a"}).status_code == 400
        assert post(server, "/tokenize", {"inputs": "a"})[0][1]["text"] == "a"
        info = httpx.get(server.url + "/info").json()
        assert info["model_type"] == {
            "reranker": {"id2label": {"0": "LABEL_0"}, "label2id": {"LABEL_0": 0}}
        }
    finally:
        server.stop()


def test_embed_sparse(tmp_path, minilm_dir):
    from bertfamily.pipelines.embedding.sparse import SparseEncoder

    d = splade(tmp_path / "splade", minilm_dir, bias=-0.7)
    server = Server(d)
    try:
        # TEI README: curl 127.0.0.1:8080/embed_sparse -X POST -d '{"inputs":"I like you."}'
        got = post(server, "/embed_sparse", {"inputs": "I like you."})
        want = SparseEncoder(d).encode(["I like you."])[0]
        assert [g["index"] for g in got[0]] == want.indices.tolist()
        np.testing.assert_allclose([g["value"] for g in got[0]], want.values, atol=1e-6)
        assert 0 < len(got[0]) < 30522
        both = post(server, "/embed_sparse", {"inputs": ["a", "b c"], "truncate": True, "x": 0})
        assert len(both) == 2
        assert httpx.post(server.url + "/embed", json={"inputs": "a"}).status_code == 400
        info = httpx.get(server.url + "/info").json()
        assert info["model_type"] == {"embedding": {"pooling": "splade", "dimension": 30522}}
    finally:
        server.stop()
