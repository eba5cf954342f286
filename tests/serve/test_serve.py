"""`bertfamily serve` as users run it: a real uvicorn process on a free port, talked to over
HTTP with httpx. Every route, every error code, the API key (401 and no work done), /embed
equal to `SentenceEmbedder.encode` (1e-6) for the real MiniLM, /predict on classification and
token-classification directories, and a graceful shutdown that answers the request in flight.
The batcher's rounds and `sorted_batches`' token budget are tested in process."""

from __future__ import annotations

import asyncio
import base64
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

import bertfamily as bf  # noqa: E402
from bertfamily.data.batching import sorted_batches  # noqa: E402
from bertfamily.serve.batcher import DynamicBatcher  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
KEY = "s3cret-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
TEXTS = ["The cat sat on the mat.", "a", "Dynamic batching answers each request in its order."]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A `bertfamily serve` subprocess; `stop` always ends it."""

    def __init__(self, model: Path, *args: str, env: dict | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        environ = {**os.environ, "PYTHONPATH": str(ROOT / "src"), **(env or {})}
        cmd = [sys.executable, "-m", "bertfamily", "serve", "--model", str(model)]
        cmd += ["--port", str(self.port), "--threads", "1", *args]
        self.proc = subprocess.Popen(
            cmd, env=environ, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        self.lines: list[str] = []  # its output, drained (the access log must never block it)
        self._drain = threading.Thread(target=self._read, daemon=True)
        self._drain.start()
        deadline = time.monotonic() + 120
        while True:
            if self.proc.poll() is not None:
                self._drain.join(5)
                raise RuntimeError(f"server exited: {''.join(self.lines)}")
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("server did not become healthy in 120 s")
            time.sleep(0.2)

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def tiny_dir(path: Path, minilm_dir: Path, heads=(), label_names=("LABEL_0", "LABEL_1")) -> Path:
    """A tiny random BERT (H=32, L=2) with MiniLM's tokenizer, saved as a model directory."""
    config = bf.EncoderConfig.from_preset(
        "tiny-bert", vocab_size=30522, max_position_embeddings=512, label_names=label_names
    )
    import torch

    torch.manual_seed(0)
    bf.build_model(config, heads).save_pretrained(path)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"):
        if (minilm_dir / name).exists():
            shutil.copy(minilm_dir / name, path / name)
    return path


@pytest.fixture(scope="module")
def minilm_server(minilm_dir):
    server = Server(
        minilm_dir,
        "--max-client-batch-size",
        "8",
        "--max-input-chars",
        "2000",
        "--dtype",
        "fp32",  # compared with fp32 at 1e-6 (auto is bf16 on a CPU with AMX-BF16)
        env={"BERTFAMILY_API_KEY": KEY},
    )
    yield server
    server.stop()


@pytest.fixture(scope="module")
def embedder(minilm_dir):
    from bertfamily.pipelines.embedding.embed import SentenceEmbedder

    return SentenceEmbedder(minilm_dir, dtype="fp32")


def metric(server: Server, name: str, **labels) -> float:
    """One sample of /metrics (0 when absent)."""
    text = httpx.get(server.url + "/metrics", headers=AUTH).text
    want = name + ("{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}" if labels else "")
    for line in text.splitlines():
        if line.startswith(want + " "):
            return float(line.split()[-1])
    return 0.0


@pytest.mark.slow
def test_embed_equals_direct_encode(minilm_server, embedder):
    r = httpx.post(minilm_server.url + "/embed", json={"inputs": TEXTS}, headers=AUTH)
    assert r.status_code == 200
    got = np.array(r.json(), dtype=np.float32)
    np.testing.assert_allclose(got, embedder.encode(TEXTS), atol=1e-6, rtol=0)
    one = httpx.post(minilm_server.url + "/embed", json={"inputs": TEXTS[0]}, headers=AUTH)
    np.testing.assert_allclose(np.array(one.json()), got[:1], atol=1e-6, rtol=0)
    raw = httpx.post(
        minilm_server.url + "/embed", json={"inputs": TEXTS, "normalize": False}, headers=AUTH
    ).json()
    norms = np.linalg.norm(np.array(raw), axis=1)
    assert not np.allclose(norms, 1.0)  # MiniLM's mean-pooled vectors before Normalize
    np.testing.assert_allclose(np.array(raw) / norms[:, None], got, atol=1e-6)


@pytest.mark.slow
def test_concurrent_requests_each_get_their_own_rows(minilm_server, embedder):
    groups = [
        [f"request {i} sentence {j} " + "word " * (i * 3 % 17) for j in range(1 + i % 4)]
        for i in range(12)
    ]
    results: dict[int, np.ndarray] = {}

    def call(i: int) -> None:
        r = httpx.post(
            minilm_server.url + "/embed", json={"inputs": groups[i]}, headers=AUTH, timeout=60
        )
        results[i] = np.array(r.json(), dtype=np.float32)

    rounds_before = metric(minilm_server, "bertfamily_batch_requests_count")
    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(groups))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, texts in enumerate(groups):
        np.testing.assert_allclose(results[i], embedder.encode(texts), atol=1e-5, rtol=0)
    rounds = metric(minilm_server, "bertfamily_batch_requests_count") - rounds_before
    assert 1 <= rounds <= len(groups)


@pytest.mark.slow
def test_openai_route_shapes_and_usage(minilm_server, embedder):
    r = httpx.post(
        minilm_server.url + "/v1/embeddings", json={"input": TEXTS, "model": "x"}, headers=AUTH
    )
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "list" and body["model"] == "all-MiniLM-L6-v2"
    assert [d["index"] for d in body["data"]] == [0, 1, 2]
    assert {d["object"] for d in body["data"]} == {"embedding"}
    tokens = sum(
        len(ids)
        for ids in embedder.tokenizer(TEXTS, padding=False, return_tensors=None)["input_ids"]
    )
    assert body["usage"] == {"prompt_tokens": tokens, "total_tokens": tokens}
    want = embedder.encode(TEXTS)
    np.testing.assert_allclose([d["embedding"] for d in body["data"]], want, atol=1e-6, rtol=0)
    b64 = httpx.post(
        minilm_server.url + "/v1/embeddings",
        json={"input": TEXTS[1], "encoding_format": "base64"},
        headers=AUTH,
    ).json()
    vec = np.frombuffer(base64.b64decode(b64["data"][0]["embedding"]), dtype="<f4")
    np.testing.assert_allclose(vec, want[1], atol=1e-6, rtol=0)


@pytest.mark.slow
def test_health_info_metrics(minilm_server):
    assert httpx.get(minilm_server.url + "/health").json() == {"status": "ok"}  # no key needed
    info = httpx.get(minilm_server.url + "/info", headers=AUTH).json()
    assert info["model_type"] == {"embedding": {"pooling": "mean", "dimension": 384}}
    assert (info["dimension"], info["max_input_length"], info["model_dtype"]) == (
        384,
        256,
        "float32",
    )
    assert len(info["model_sha"]) == 64 and info["max_client_batch_size"] == 8
    before = metric(minilm_server, "bertfamily_tokens_total", route="/embed")
    httpx.post(minilm_server.url + "/embed", json={"inputs": ["a b"]}, headers=AUTH)
    assert metric(minilm_server, "bertfamily_tokens_total", route="/embed") == before + 4
    text = httpx.get(minilm_server.url + "/metrics", headers=AUTH).text
    for name in (
        "bertfamily_requests_total",
        "bertfamily_batch_inputs_bucket",
        "bertfamily_request_duration_seconds_bucket",
    ):
        assert name in text


@pytest.mark.slow
@pytest.mark.parametrize(
    "body, status, words",
    [
        ({"inputs": []}, 422, "cannot be empty"),
        ({"inputs": ["ok", "  "]}, 422, "input 1 is empty"),
        ({"inputs": ["x"] * 9}, 413, "9 inputs"),
        ({"inputs": ["y" * 2001]}, 413, "2,001 characters"),
        ({"inputs": ["word " * 300]}, 413, "302 tokens"),
        ({"inputs": "hi", "normalize": "yes please"}, 422, "normalize"),
        ({"inputs": 3}, 422, "inputs"),
        ({"inputs": "hi", "prompt_name": "query"}, 422, "unknown prompt_name"),
    ],
)
def test_embed_errors(minilm_server, body, status, words):
    r = httpx.post(minilm_server.url + "/embed", json=body, headers=AUTH)
    assert r.status_code == status
    assert words in r.json()["error"] and r.json()["error_type"]


@pytest.mark.slow
def test_truncate_and_openai_error_shape(minilm_server, embedder):
    long = "word " * 300
    r = httpx.post(
        minilm_server.url + "/embed", json={"inputs": [long], "truncate": True}, headers=AUTH
    )
    assert r.status_code == 200
    np.testing.assert_allclose(r.json(), embedder.encode([long]), atol=1e-6, rtol=0)
    r = httpx.post(minilm_server.url + "/v1/embeddings", json={"input": [long]}, headers=AUTH)
    assert r.status_code == 413
    error = r.json()["error"]  # OpenAI's error object
    assert error["type"] == "invalid_request_error" and "302 tokens" in error["message"]
    r = httpx.post(minilm_server.url + "/predict", json={"inputs": "x"}, headers=AUTH)
    assert r.status_code == 400 and "/embed" in r.json()["error"]


@pytest.mark.slow
def test_api_key_required_and_no_work_done(minilm_server):
    tokens = metric(minilm_server, "bertfamily_tokens_total", route="/embed")
    refused = metric(minilm_server, "bertfamily_requests_total", route="/embed", status="401")
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}):
        for route, body in (("/embed", {"inputs": "x"}), ("/v1/embeddings", {"input": "x"})):
            r = httpx.post(minilm_server.url + route, json=body, headers=headers)
            assert r.status_code == 401
        assert httpx.get(minilm_server.url + "/info", headers=headers).status_code == 401
    assert httpx.post(minilm_server.url + "/embed", json={"inputz": 1}).status_code == 401
    assert metric(minilm_server, "bertfamily_tokens_total", route="/embed") == tokens
    after = metric(minilm_server, "bertfamily_requests_total", route="/embed", status="401")
    assert after == refused + 4


@pytest.mark.slow
def test_predict_classifier_and_tagger(minilm_dir, tmp_path):
    from bertfamily.pipelines.tasks.classify import TextClassifier
    from bertfamily.pipelines.tasks.ner import EntityTagger

    clf_dir = tiny_dir(tmp_path / "clf", minilm_dir, ["classify"], ("neg", "pos", "mixed"))
    server = Server(clf_dir)
    try:
        clf = TextClassifier(clf_dir)
        r = httpx.post(server.url + "/predict", json={"inputs": "great film"})
        assert r.status_code == 200
        got = r.json()
        want = clf(["great film"], top_k=None)[0]
        assert [p["label"] for p in got] == [p["label"] for p in want]
        np.testing.assert_allclose([p["score"] for p in got], [p["score"] for p in want], atol=1e-6)
        assert sum(p["score"] for p in got) == pytest.approx(1.0, abs=1e-6)  # softmax
        batch = httpx.post(
            server.url + "/predict", json={"inputs": [["a", "b"], ["c d", "e"]], "raw_scores": True}
        ).json()
        want = clf(["a", "c d"], ["b", "e"], top_k=None, function_to_apply="none")
        assert [[p["label"] for p in row] for row in batch] == [
            [p["label"] for p in row] for row in want
        ]
        np.testing.assert_allclose(batch[1][0]["score"], want[1][0]["score"], atol=1e-6)
        # TEI's PredictInput (router/src/http/types.rs): "a string, a pair of strings
        # [string, string] or a batch of mixed strings and pairs [[string], [string, string]]"
        pair = httpx.post(server.url + "/predict", json={"inputs": ["a", "b"], "x": 1}).json()
        want = clf(["a"], ["b"], top_k=None)[0]  # one pair, one flat answer; unknown field ignored
        assert [p["label"] for p in pair] == [p["label"] for p in want]
        np.testing.assert_allclose(
            [p["score"] for p in pair], [p["score"] for p in want], atol=1e-6
        )
        one = httpx.post(server.url + "/predict", json={"inputs": ["a"]}).json()
        np.testing.assert_allclose(
            one[0]["score"], clf(["a"], top_k=None)[0][0]["score"], atol=1e-6
        )
        mixed = httpx.post(server.url + "/predict", json={"inputs": [["a"], ["b", "c"], ["d"]]})
        assert mixed.status_code == 200
        singles, pairs = clf(["a", "d"], top_k=None), clf(["b"], ["c"], top_k=None)
        for got_row, want_row in zip(mixed.json(), [singles[0], pairs[0], singles[1]]):
            assert [p["label"] for p in got_row] == [p["label"] for p in want_row]
            np.testing.assert_allclose(
                [p["score"] for p in got_row], [p["score"] for p in want_row], atol=1e-6
            )
        bad = httpx.post(server.url + "/predict", json={"inputs": [["a", "b", "c"]]})
        assert bad.status_code == 422 and "3 texts" in bad.json()["error"]
        bad = httpx.post(server.url + "/predict", json={"inputs": ["a", "b", "c"]})
        assert bad.status_code == 422 and 'send a batch as [["a"], ["b"]' in bad.json()["error"]
        bad = httpx.post(server.url + "/predict", json={"inputs": ["a", ["b"]]})
        assert bad.status_code == 422
        assert httpx.post(server.url + "/embed", json={"inputs": "a"}).status_code == 400
        info = httpx.get(server.url + "/info").json()
        assert info["model_type"]["classifier"]["label2id"] == {"neg": 0, "pos": 1, "mixed": 2}
    finally:
        assert server.stop() in (0, -signal.SIGTERM)  # uvicorn re-raises SIGTERM once done

    ner_dir = tiny_dir(tmp_path / "ner", minilm_dir, ["tokens"], ("O", "B-PER", "I-PER"))
    server = Server(ner_dir)
    try:
        text = "John Smith lives in Paris"
        r = httpx.post(server.url + "/predict", json={"inputs": [[text], ["Ann"]]})
        assert r.status_code == 200
        want = EntityTagger(ner_dir)([text, "Ann"])
        got = r.json()
        assert [[(e["type"], e["start"], e["end"]) for e in row] for row in got] == [
            [(e.type, e.start, e.end) for e in row] for row in want
        ]
        for e in got[0]:
            assert text[e["start"] : e["end"]] == e["text"]
    finally:
        server.stop()


@pytest.mark.slow
def test_graceful_shutdown_answers_the_request_in_flight(minilm_dir):
    server = Server(
        minilm_dir, "--max-client-batch-size", "512", "--auto-truncate", "--graceful-timeout", "120"
    )
    try:
        # 64 × 512 tokens: several seconds of computing even on an idle machine
        texts = [f"sentence {i} " + "token " * 600 for i in range(64)]
        result: dict = {}

        def call() -> None:
            try:
                result["r"] = httpx.post(server.url + "/embed", json={"inputs": texts}, timeout=120)
            except httpx.HTTPError as e:
                result["e"] = e

        t = threading.Thread(target=call)
        t.start()
        time.sleep(0.5)  # the request has arrived and is being computed
        assert "r" not in result, "the request finished before the shutdown signal"
        server.proc.send_signal(signal.SIGTERM)
        t.join(timeout=120)
        assert result.get("r") is not None and result["r"].status_code == 200, result
        assert len(result["r"].json()) == 64
        assert server.proc.wait(timeout=60) in (0, -signal.SIGTERM)
    finally:
        server.stop()


def _run_batcher(max_batch_tokens: int, keys: list, batching: bool = True):
    """Submit one 2-input, 4-token request per key at once; (answers, model calls)."""
    calls: list[tuple] = []

    def run(key, inputs):
        calls.append((key, list(inputs)))
        return [f"{key}:{x}" for x in inputs]

    async def main():
        b = DynamicBatcher(run, max_batch_tokens=max_batch_tokens, batching=batching)
        await b.start()
        jobs = [b.submit([f"r{i}a", f"r{i}b"], 4, key=k) for i, k in enumerate(keys)]
        out = await asyncio.gather(*jobs)
        await b.stop()
        return out

    return asyncio.run(main()), calls


def test_batcher_gathers_waiting_requests_within_the_token_budget():
    out, calls = _run_batcher(10, [0] * 5)
    assert out == [[f"0:r{i}a", f"0:r{i}b"] for i in range(5)]  # each its own rows, in order
    assert [c[1] for c in calls] == [  # 4 + 4 tokens fit the budget of 10, a third does not
        ["r0a", "r0b", "r1a", "r1b"],
        ["r2a", "r2b", "r3a", "r3b"],
        ["r4a", "r4b"],
    ]
    _, calls = _run_batcher(10, [0] * 5, batching=False)
    assert [len(c[1]) for c in calls] == [2] * 5


def test_batcher_splits_a_round_by_options():
    out, calls = _run_batcher(100, [0, 1, 0, 1, 0])
    assert out == [[f"{i % 2}:r{i}a", f"{i % 2}:r{i}b"] for i in range(5)]
    assert calls == [
        (0, ["r0a", "r0b", "r2a", "r2b", "r4a", "r4b"]),
        (1, ["r1a", "r1b", "r3a", "r3b"]),
    ]
    with pytest.raises(ValueError, match="max_batch_tokens"):
        DynamicBatcher(lambda k, x: x, 0)


def test_batcher_passes_a_model_error_to_every_request_of_the_group():
    def run(key, inputs):
        raise RuntimeError("boom")

    async def main():
        b = DynamicBatcher(run, max_batch_tokens=100)
        await b.start()
        out = await asyncio.gather(b.submit([1], 1), b.submit([2], 1), return_exceptions=True)
        await b.stop()
        with pytest.raises(RuntimeError, match="not running"):
            await b.submit([3], 1)
        return out

    out = asyncio.run(main())
    assert [str(e) for e in out] == ["boom", "boom"]


def test_sorted_batches_token_budget():
    lengths = [5, 1, 9, 3, 9, 2, 7]
    batches = list(sorted_batches(lengths, 100, max_tokens=20))
    assert [[lengths[i] for i in b] for b in batches] == [[9, 9], [7, 5], [3, 2, 1]]
    assert all(len(b) * lengths[b[0]] <= 20 for b in batches)
    assert [len(b) for b in sorted_batches([50, 3], 8, max_tokens=10)] == [1, 1]  # too long: alone
    with pytest.raises(ValueError, match="max_tokens"):
        list(sorted_batches(lengths, 3, max_tokens=0))


def test_one_embed_request_is_tokenized_once(minilm_dir, embedder):
    """The server tokenizes an /embed request once (limits, usage and the model's input all
    come from that one tokenization) and answers what `encode` answers."""
    from fastapi.testclient import TestClient

    from bertfamily.pipelines.embedding.embed import SentenceEmbedder
    from bertfamily.serve.app import ServeSettings, create_app
    from bertfamily.tokenization.tokenizer import Tokenizer

    model = SentenceEmbedder(minilm_dir, dtype="fp32")
    calls = []
    real = Tokenizer.__call__

    def counting(self, *a, **k):
        calls.append(len(a[0]) if a and isinstance(a[0], list) else 1)
        return real(self, *a, **k)

    texts = ["a cat sat on the mat", "stock markets fell", "the weather is fine today"]
    with TestClient(create_app(model, ServeSettings())) as client:
        Tokenizer.__call__ = counting
        try:
            r = client.post("/embed", json={"inputs": texts})
        finally:
            Tokenizer.__call__ = real
    assert r.status_code == 200
    assert calls == [3]  # one call, for the three texts
    np.testing.assert_allclose(r.json(), embedder.encode(texts), atol=1e-6, rtol=0)
