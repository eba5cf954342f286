"""The server's layers below HTTP, in process: the admission checks (plain Python, each
refusal with its status), one adapter per kind of model, ``dimensions`` refused before the
model runs, the dtype said truthfully (/info, the start-up line and the parameters agree for
an embedding model and a reranker), and every function of the server short."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from fastapi.testclient import TestClient  # noqa: E402

from bertfamily.errors import ArgumentTypeError, InputError, ServeError  # noqa: E402
from bertfamily.serve import admission  # noqa: E402
from bertfamily.serve.settings import ServeSettings  # noqa: E402
from helpers import save_tiny  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
SETTINGS = ServeSettings(max_client_batch_size=3, max_input_chars=10)
SOURCE = Path(__file__).resolve().parents[2] / "src" / "bertfamily"


def status_of(call, *args) -> tuple[int, str]:
    with pytest.raises(ServeError) as e:
        call(*args)
    return e.value.status, str(e.value)


def test_admission_refuses_with_the_right_status():
    admission.check_texts(["abc", "de"], SETTINGS)  # within every limit: nothing raised
    assert status_of(admission.check_texts, [], SETTINGS) == (422, "inputs cannot be empty")
    assert status_of(admission.check_texts, ["a", " "], SETTINGS) == (422, "input 1 is empty")
    assert status_of(admission.check_texts, ["a"] * 4, SETTINGS)[0] == 413
    assert status_of(admission.check_texts, ["a" * 6], SETTINGS, ["b" * 5]) == (
        413,
        "input 0 has 11 characters; the maximum is 10 (max_input_chars)",
    )
    assert "surrogate" in status_of(admission.check_texts, ["\ud800"], SETTINGS)[1]
    assert admission.check_token_counts([3, 9], 5, True, SETTINGS) == [3, 5]  # cut to 5
    status, message = status_of(admission.check_token_counts, [3, 9], 5, None, SETTINGS)
    assert status == 413 and message.startswith("input 1 has 9 tokens; this model takes at most 5")
    lengths = {1: 42}
    admission.check_truncation([False, True], 5, True, SETTINGS, lengths.get)
    assert (
        "input 1 has 42 tokens"
        in status_of(admission.check_truncation, [False, True], 5, False, SETTINGS, lengths.get)[1]
    )


def test_admission_of_dimensions_predict_speed_and_ids():
    admission.check_dimensions(None, 384)
    admission.check_dimensions(384, 384)
    assert status_of(admission.check_dimensions, 385, 384) == (
        422,
        "dimensions=385 is more than the model's 384",
    )
    for bad in (0, -1, True, 2.5):
        assert status_of(admission.check_dimensions, bad, 384)[0] == 422
    assert admission.predict_items("a", SETTINGS) == ([["a"]], True)
    assert admission.predict_items(["a", "b"], SETTINGS) == ([["a", "b"]], True)
    assert admission.predict_items([["a"], ["b", "c"]], SETTINGS) == ([["a"], ["b", "c"]], False)
    assert status_of(admission.predict_items, ["a", "b", "c"], SETTINGS)[0] == 422
    assert status_of(admission.predict_items, [["a"]] * 4, SETTINGS)[0] == 413
    assert "3 texts" in status_of(admission.predict_items, [["a", "b", "c"]], SETTINGS)[1]
    admission.check_speed(None, False)
    admission.check_speed(0.5, True)
    assert "self-distilled" in status_of(admission.check_speed, 0.5, False)[1]
    assert "[0, 1]" in status_of(admission.check_speed, 1.5, True)[1]
    assert admission.check_ids([1, 2], 10) == [[1, 2]]
    assert status_of(admission.check_ids, [[1, 10]], 10) == (
        422,
        "input 0: token id 10 at position 1 is outside this model's vocabulary, ids must be "
        "in [0, 10)",
    )


@pytest.fixture(scope="module")
def tiny(minilm_dir, tmp_path_factory):
    return save_tiny(tmp_path_factory.mktemp("layers") / "tiny", minilm_dir)


def test_one_adapter_per_kind_chosen_once(tiny):
    from bertfamily.pipelines.embedding.embed import SentenceEmbedder
    from bertfamily.serve.adapters import EarlyExitModel, EmbeddingModel, adapter_for
    from bertfamily.serve.app import load_served_model, served_kind

    assert served_kind(tiny)[0] is EmbeddingModel
    served = load_served_model(tiny)
    assert isinstance(served, SentenceEmbedder)
    adapter = adapter_for(served, ServeSettings())
    assert isinstance(adapter, EmbeddingModel) and adapter.max_length == served.max_length
    assert adapter.model_type() == {"embedding": {"pooling": "mean", "dimension": 32}}
    with pytest.raises(ArgumentTypeError, match="cannot serve a str"):
        adapter_for("a model", ServeSettings())
    with pytest.raises(InputError, match="students run in fp32"):  # refused before loading
        EarlyExitModel.load(tiny / "nowhere", None, dtype="bf16", device="cpu")


def test_dimensions_wider_than_the_model_are_refused_before_it_runs(tiny):
    """/v1/embeddings and /embed: ``dimensions`` over the model's width is a 422 before the
    request is tokenized or the model runs (its encode fails the test if called)."""
    from bertfamily.pipelines.embedding.embed import SentenceEmbedder
    from bertfamily.serve.app import create_app

    model = SentenceEmbedder(tiny, dtype="fp32")
    calls = []

    def must_not_run(*args, **kwargs):
        calls.append(args)
        raise AssertionError("the model ran")

    with TestClient(create_app(model, ServeSettings())) as client:
        ok = client.post("/v1/embeddings", json={"input": ["a", "b"], "dimensions": 8})
        assert ok.status_code == 200 and len(ok.json()["data"][1]["embedding"]) == 8
        model.encode_tokenized = must_not_run
        model.tokenize = must_not_run
        r = client.post("/v1/embeddings", json={"input": ["a", "b"], "dimensions": 33})
        assert r.status_code == 422
        assert r.json() == {  # OpenAI's error object on OpenAI's wire
            "error": {
                "message": "dimensions=33 is more than the model's 32",
                "type": "invalid_request_error",
                "param": None,
                "code": "validation",
            }
        }
        r = client.post("/v1/embeddings", json={"input": "a", "dimensions": 0})
        assert r.status_code == 422 and r.json()["error"]["type"] == "invalid_request_error"
        r = client.post("/embed", json={"inputs": "a", "dimensions": 1000})
        assert r.status_code == 422 and "more than the model's 32" in r.json()["error"]
    assert calls == []


@pytest.fixture(scope="module")
def reranker_dir(minilm_dir, tmp_path_factory):
    pytest.importorskip("transformers")
    from retrieval_dirs import classic_cross_encoder

    return classic_cross_encoder(tmp_path_factory.mktemp("layers-ce") / "ce", minilm_dir)


@pytest.mark.parametrize("kind", ["embedding", "reranker"])
@pytest.mark.parametrize("dtype, name", [("auto", "float32"), ("bf16", "bfloat16")])
def test_info_and_start_up_line_say_the_dtype_it_runs_in(
    cli, tiny, reranker_dir, monkeypatch, kind, dtype, name
):
    """`bertfamily serve --dtype D` for an embedding model and a cross-encoder: the start-up
    line, /info's ``model_dtype`` and the loaded parameters agree ("auto" is fp32)."""
    import uvicorn

    ran = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: ran.update(app=app))
    model = tiny if kind == "embedding" else reranker_dir
    result = cli("serve", "--model", model, "--dtype", dtype, "--threads", 1)
    assert result.exit_code == 0, result.output
    dtype_lines = [x for x in result.stderr.splitlines() if x.startswith("dtype: ")]
    assert len(dtype_lines) == 1 and dtype_lines[0].startswith(f"dtype: {name} ("), dtype_lines
    app = ran["app"]
    parameters = {str(p.dtype) for p in app.state.model.model.parameters()}
    assert parameters == {f"torch.{name}"}
    with TestClient(app) as client:
        assert client.get("/info").json()["model_dtype"] == name


def _long_functions(path: Path, limit: int) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        f"{path.name}:{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno - node.lineno + 1 > limit
    ]


def test_no_function_of_the_server_is_long():
    files = [*(SOURCE / "serve").rglob("*.py"), SOURCE / "cli" / "serve.py"]
    assert len(files) > 10
    assert [f for path in files for f in _long_functions(path, 100)] == []


@pytest.fixture(scope="module")
def predictors(minilm_dir, reranker_dir, tmp_path_factory):
    """A cross-encoder, a classifier, a token classifier and a SPLADE model, each loaded as
    the server loads it."""
    from bertfamily.serve.app import load_served_model
    from helpers import save_tiny_splade
    from test_serve import tiny_dir

    root = tmp_path_factory.mktemp("layers-predict")
    clf = tiny_dir(root / "clf", minilm_dir, ["classify"], ("neg", "pos", "mixed"))
    ner = tiny_dir(root / "ner", minilm_dir, ["tokens"], ("O", "B-PER", "I-PER"))
    splade = save_tiny_splade(root / "splade", minilm_dir)
    dirs = {"rerank": reranker_dir, "classify": clf, "tag": ner, "sparse": splade}
    return {k: (load_served_model(d), d) for k, d in dirs.items()}


@pytest.mark.parametrize(
    "kind, route, body, texts",
    [
        ("rerank", "/rerank", {"query": "q a", "texts": ["b c", "d", "e f g"]}, 3),
        ("rerank", "/predict", {"inputs": [["q", "a"], ["r", "b c"]]}, 2),
        ("classify", "/predict", {"inputs": [["a b"], ["c", "d"], ["e"]]}, None),
        ("tag", "/predict", {"inputs": [["John Smith"], ["Ann"]]}, 2),
        ("sparse", "/embed_sparse", {"inputs": ["a cat", "b", "c d e"]}, 3),
    ],
)
def test_rerank_sparse_and_predict_tokenize_each_request_once(predictors, kind, route, body, texts):
    """The server tokenizes a request once (limits, metrics and the model's input all come
    from it; /predict once per group: the single texts, the pairs) and answers what the
    pipeline answers."""
    from bertfamily.serve.app import create_app
    from bertfamily.tokenization.tokenizer import Tokenizer

    model, path = predictors[kind]
    calls = []
    real = Tokenizer.__call__

    def counting(self, *a, **k):
        calls.append(len(a[0]) if a and isinstance(a[0], list) else 1)
        return real(self, *a, **k)

    with TestClient(create_app(model, ServeSettings(), model_dir=path)) as client:
        Tokenizer.__call__ = counting
        try:
            r = client.post(route, json=body)
        finally:
            Tokenizer.__call__ = real
    assert r.status_code == 200, r.text
    assert calls == ([texts] if texts else [2, 1])  # /predict: 2 single texts, then 1 pair
    got = r.json()
    if kind == "rerank" and route == "/rerank":
        want = model.predict([("q a", t) for t in body["texts"]])
        assert sorted(x["index"] for x in got) == [0, 1, 2]
        for x in got:
            assert x["score"] == pytest.approx(float(want[x["index"]]), abs=1e-6)
    elif kind == "rerank":
        want = model.predict([tuple(p) for p in body["inputs"]])
        assert [row[0]["score"] for row in got] == pytest.approx(want.tolist(), abs=1e-6)
    elif kind == "classify":
        singles, pairs = model(["a b", "e"], top_k=None), model(["c"], ["d"], top_k=None)
        for got_row, want_row in zip(got, [singles[0], pairs[0], singles[1]]):
            assert [p["label"] for p in got_row] == [p["label"] for p in want_row]
            assert [p["score"] for p in got_row] == pytest.approx(
                [p["score"] for p in want_row], abs=1e-6
            )
    elif kind == "tag":
        want = model(["John Smith", "Ann"])
        assert [[(e["type"], e["start"], e["end"]) for e in row] for row in got] == [
            [(e.type, e.start, e.end) for e in row] for row in want
        ]
    else:
        want = model.encode(body["inputs"])
        assert [[x["index"] for x in row] for row in got] == [w.indices.tolist() for w in want]
        for row, w in zip(got, want):
            assert [x["value"] for x in row] == pytest.approx(w.values.tolist(), abs=1e-6)


def test_a_long_input_is_refused_from_its_one_tokenization(predictors):
    """Without ``truncate``, an input over the model's limit is refused with 413 and its
    length (counted uncut, for the message: [CLS] q [SEP] + 138 words + [SEP]); with it, the
    cut input is answered."""
    from bertfamily.serve.app import create_app

    model, path = predictors["rerank"]
    long = "word " * (model.max_length + 10)
    with TestClient(create_app(model, ServeSettings(), model_dir=path)) as client:
        r = client.post("/rerank", json={"query": "q", "texts": ["short", long]})
        assert r.status_code == 413
        said = f"the query with texts[1] has {model.max_length + 14} tokens"
        assert r.json()["error"].startswith(said)
        r = client.post("/rerank", json={"query": "q", "texts": ["short", long], "truncate": True})
        assert r.status_code == 200 and len(r.json()) == 2


@pytest.mark.parametrize("route", ["/embed", "/embed_all"])
def test_embedding_routes_tokenize_each_request_once(tiny, route):
    """/embed and /embed_all tokenize a request once (its limits, metrics and the model's
    input come from that one tokenization) and answer what the embedder answers."""
    import numpy as np

    from bertfamily.pipelines.embedding.embed import SentenceEmbedder
    from bertfamily.serve.app import create_app
    from bertfamily.tokenization.tokenizer import Tokenizer

    embedder = SentenceEmbedder(tiny)
    texts = ["a cat sat", "b", "c d e f"]
    calls = []
    real = Tokenizer.__call__

    def counting(self, *a, **k):
        calls.append(len(a[0]) if a and isinstance(a[0], list) else 1)
        return real(self, *a, **k)

    with TestClient(create_app(embedder, ServeSettings(), model_dir=tiny)) as client:
        Tokenizer.__call__ = counting
        try:
            r = client.post(route, json={"inputs": texts})
        finally:
            Tokenizer.__call__ = real
    assert r.status_code == 200, r.text
    assert calls == [3]
    if route == "/embed":
        np.testing.assert_array_equal(np.array(r.json(), np.float32), embedder.encode(texts))
    else:
        want = embedder.encode_tokens(texts)
        assert [np.array(x, np.float32).shape for x in r.json()] == [w.shape for w in want]
        for got, w in zip(r.json(), want):
            np.testing.assert_array_equal(np.array(got, np.float32), w)
