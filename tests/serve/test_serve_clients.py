"""Real clients, unchanged, against a real ``bertfamily serve`` process (issue 44, "done when";
extra ``clients``): the ``openai`` client (float, base64, ``dimensions``, token ids, 2,048
inputs), ``huggingface_hub.InferenceClient`` on the root URL (feature extraction, sentence
similarity), langchain-openai's ``OpenAIEmbeddings`` at its default batch size, and
``/metrics`` parsed by prometheus_client with TEI's names. Each part skips when its package is
not installed."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

from helpers import save_tiny  # noqa: E402
from test_serve import Server  # noqa: E402

KEY = "client-key"
TEXTS = ["The cat sat on the mat.", "A dog ran in the park.", "Stocks fell on Monday."]


@pytest.fixture(scope="module")
def tiny(minilm_dir, tmp_path_factory):
    return save_tiny(tmp_path_factory.mktemp("clients") / "tiny", minilm_dir)


@pytest.fixture(scope="module")
def embedder(tiny):
    from bertfamily.pipelines.embedding.embed import SentenceEmbedder

    return SentenceEmbedder(tiny, dtype="fp32")


@pytest.fixture(scope="module")
def server(tiny):
    s = Server(tiny, "--dtype", "fp32", env={"API_KEY": KEY})
    yield s
    s.stop()


@pytest.mark.slow
def test_openai_client(server, embedder):
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0)
    want = embedder.encode(TEXTS)
    floats = client.embeddings.create(input=TEXTS, model="tiny", encoding_format="float")
    np.testing.assert_allclose([d.embedding for d in floats.data], want, atol=1e-5)
    packed = client.embeddings.create(input=TEXTS, model="tiny")  # the client's default: base64
    np.testing.assert_allclose([d.embedding for d in packed.data], want, atol=1e-5)
    short = client.embeddings.create(input=TEXTS[:1], model="tiny", dimensions=8)
    cut = want[0, :8] / np.linalg.norm(want[0, :8])
    np.testing.assert_allclose(short.data[0].embedding, cut, atol=1e-5)
    ids = embedder.tokenizer([TEXTS[0]])["input_ids"][0]
    ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
    by_ids = client.embeddings.create(input=[ids], model="tiny")
    np.testing.assert_allclose(by_ids.data[0].embedding, want[0], atol=1e-5)
    many = client.embeddings.create(input=[f"text {i}" for i in range(2048)], model="tiny")
    assert len(many.data) == 2048 and many.usage.prompt_tokens > 2048
    assert [m.id for m in client.models.list()] == [str(server_model(server))]
    with pytest.raises(openai.UnprocessableEntityError) as e:  # 422 in OpenAI's error object
        client.embeddings.create(input=[[101, 10**6]], model="tiny")
    assert e.value.status_code == 422 and "outside this model's vocabulary" in e.value.message


def server_model(server) -> str:
    return httpx.get(server.url + "/info", headers={"Authorization": f"Bearer {KEY}"}).json()[
        "model_id"
    ]


@pytest.mark.slow
def test_huggingface_hub_inference_client_on_the_root_url(server, embedder, monkeypatch):
    hub = pytest.importorskip("huggingface_hub")
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # the tests' offline flag
    client = hub.InferenceClient(base_url=server.url, api_key=KEY)
    vector = np.asarray(client.feature_extraction(TEXTS[0]))
    np.testing.assert_allclose(vector.reshape(-1), embedder.encode(TEXTS[:1])[0], atol=1e-5)
    scores = client.sentence_similarity(TEXTS[0], other_sentences=TEXTS)
    want = embedder.encode(TEXTS) @ embedder.encode(TEXTS[:1])[0]
    np.testing.assert_allclose(scores, want, atol=1e-5)


@pytest.mark.slow
def test_langchain_openai_embeddings_default_batch_size(server, embedder):
    lc = pytest.importorskip("langchain_openai")
    # check_embedding_ctx_length=False: by default langchain-openai sends tiktoken's ids of
    # OpenAI's tokenizer (cl100k, ids up to 100k: not this model's vocabulary, and tiktoken
    # downloads its encoding, which this offline test cannot); texts are what it sends here
    emb = lc.OpenAIEmbeddings(
        model="tiny", base_url=server.url + "/v1", api_key=KEY, check_embedding_ctx_length=False,
        max_retries=0,
    )  # fmt: skip
    assert emb.chunk_size == 1000  # its default batch: over TEI's 32, under OpenAI's 2,048
    texts = [f"{TEXTS[i % 3]} {i}" for i in range(1200)]  # two requests: 1000 + 200
    got = np.asarray(emb.embed_documents(texts))
    np.testing.assert_allclose(got[[0, 999, 1000, 1199]], embedder.encode(
        [texts[0], texts[999], texts[1000], texts[1199]]), atol=1e-5)  # fmt: skip
    np.testing.assert_allclose(emb.embed_query(TEXTS[1]), embedder.encode(TEXTS[1:2])[0], atol=1e-5)


@pytest.mark.slow
def test_metrics_parse_with_tei_names(server):
    parser = pytest.importorskip("prometheus_client.parser")
    auth = {"Authorization": f"Bearer {KEY}"}
    assert httpx.post(server.url + "/embed", json={"inputs": "x"}, headers=auth).status_code == 200
    text = httpx.get(server.url + "/metrics", headers=auth).text
    families = {f.name: f for f in parser.text_string_to_metric_families(text)}
    for name in ("te_request_count", "te_request_success", "te_request_duration",
                 "te_queue_duration", "te_inference_duration", "te_batch_next_size",
                 "te_embed_count", "bertfamily_requests"):  # fmt: skip
        assert name in families, name
    assert sum(s.value for s in families["te_request_count"].samples) >= 1
