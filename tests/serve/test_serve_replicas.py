"""Serving replicas (#33 item 4): `bertfamily serve --workers 2` on loopback is two processes
behind one port; both answer, and every answer equals `SentenceEmbedder.encode`."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from helpers import save_tiny

httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")
pytest.importorskip("fastapi")

from test_serve import Server  # noqa: E402  (the `bertfamily serve` subprocess helper)

TEXTS = [f"replica request {i} about {w}" for i, w in enumerate(["cats", "dogs", "rivers"] * 4)]


@pytest.fixture(scope="module")
def tiny(minilm_dir, tmp_path_factory):
    return save_tiny(tmp_path_factory.mktemp("replica-model") / "tiny", minilm_dir)


@pytest.mark.slow
@pytest.mark.long
def test_two_replicas_behind_one_port_answer_like_encode(tiny):
    from bertfamily.pipelines.embedding.embed import SentenceEmbedder

    want = SentenceEmbedder(tiny, dtype="fp32").encode(TEXTS)
    server = Server(tiny, "--workers", "2", "--dtype", "fp32")
    try:

        def call(i: int):
            with httpx.Client(timeout=60) as client:  # a new connection each time
                r = client.post(server.url + "/embed", json={"inputs": [TEXTS[i % len(TEXTS)]]})
                r.raise_for_status()
                return i % len(TEXTS), r.headers["X-Replica"], r.json()[0]

        replicas: set[str] = set()
        sent = 0
        for _ in range(10):  # the kernel spreads connections; both replicas answer soon
            with ThreadPoolExecutor(8) as pool:
                answers = list(pool.map(call, range(48)))
            sent += 48
            for i, replica, vector in answers:
                np.testing.assert_allclose(vector, want[i], atol=1e-5)
                replicas.add(replica)
            if len(replicas) == 2:
                break
        assert len(replicas) == 2, f"one replica answered everything: {replicas}"
        # /metrics adds up every replica's series (prometheus_client's multiprocess mode),
        # whichever replica answers the scrape
        for _ in range(4):
            text = httpx.get(server.url + "/metrics").text
            counts = [line for line in text.splitlines() if line.startswith("te_request_count{")]
            assert sum(float(line.split()[-1]) for line in counts) == sent, counts
    finally:
        assert server.stop() == 0


def test_a_replica_app_is_built_from_its_environment(tiny, monkeypatch):
    """What each of `serve --workers N`'s processes builds, in process: the settings (batching,
    limits) and the model travel in BERTFAMILY_SERVE_REPLICA; the app batches, applies the
    limits and names itself in X-Replica."""
    import json
    import os

    from fastapi.testclient import TestClient

    from bertfamily.pipelines.embedding.embed import SentenceEmbedder
    from bertfamily.serve.app import ServeSettings
    from bertfamily.serve.replicas import ENV, app_from_environment, replica_environment

    settings = ServeSettings(max_batch_tokens=512, batch_size=4, max_client_batch_size=3)
    body = replica_environment(tiny, settings, dtype="fp32", speed=0.5)
    assert json.loads(body)["speed"] == 0.5 and json.loads(body)["settings"]["batch_size"] == 4
    monkeypatch.setenv(ENV, replica_environment(tiny, settings, dtype="fp32"))
    want = SentenceEmbedder(tiny, dtype="fp32").encode(TEXTS[:3])
    with TestClient(app_from_environment()) as client:
        r = client.post("/embed", json={"inputs": TEXTS[:3]})
        assert r.status_code == 200 and r.headers["X-Replica"] == str(os.getpid())
        np.testing.assert_allclose(r.json(), want, rtol=0, atol=1e-5)
        assert client.post("/embed", json={"inputs": TEXTS[:4]}).status_code == 413
        info = client.get("/info").json()
        assert info["max_batch_tokens"] == 512 and info["max_client_batch_size"] == 3, info


def test_a_replica_with_automatic_threads_follows_the_load(tiny, monkeypatch):
    """`serve --workers N` without --threads: each replica applies the one thread policy
    (`runtime.apply_threads`): its share of the free cores, and a governor capped at its share
    of the physical cores (`runtime.AdaptiveThreads`); with --threads none is started."""
    import torch

    from bertfamily import runtime
    from bertfamily.serve.app import ServeSettings
    from bertfamily.serve.replicas import ENV, app_from_environment, replica_environment

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(runtime, "physical_cores", lambda: 4)
    monkeypatch.setattr(runtime, "free_cores", lambda sample_s=0.1: 3.0)
    before = torch.get_num_threads()
    try:
        env = replica_environment(tiny, ServeSettings(), threads=0, processes=2)
        monkeypatch.setenv(ENV, env)
        app_from_environment()
        gov = runtime.active_governor()
        assert gov is not None and (gov.max_threads, gov.threads) == (2, 1)  # 4 // 2, 3 // 2
        assert torch.get_num_threads() == 1
        gov.stop()
        monkeypatch.setenv(ENV, replica_environment(tiny, ServeSettings(), threads=1, processes=2))
        app_from_environment()
        assert runtime.active_governor() is None and torch.get_num_threads() == 1
    finally:
        while runtime.active_governor() is not None:
            runtime.active_governor().stop()
        torch.set_num_threads(before)
