"""The server holds under abuse (issue 34, item 7), on loopback with a fixed number of requests
and seconds: oversized bodies are refused before they are read, idle connections are closed
within the configured timeout, /health answers within 1 s while the model is saturated, one
bad request fails alone, and malformed bodies get the JSON error shape, never a 500."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from test_serve import free_port, tiny_dir

pytestmark = pytest.mark.usefixtures("one_thread")

LIMIT = 64 * 1024
KEEP_ALIVE = 1.0


@pytest.fixture(scope="module")
def server(minilm_dir, tmp_path_factory):
    """A uvicorn server in a thread over a tiny embedder whose encode is slowed (0.5 s a call)
    and refuses texts holding "POISON" (as a token id outside the vocabulary is refused)."""
    import uvicorn

    from bertfamily.pipelines.embedding.embed import SentenceEmbedder
    from bertfamily.serve.app import ServeSettings, create_app
    from bertfamily.serve.http import connection_limits

    model = SentenceEmbedder(tiny_dir(tmp_path_factory.mktemp("abuse") / "m", minilm_dir))
    encode = model.encode_tokenized  # what the server runs on the tokens of a request
    poison = set(model.tokenizer.encode("POISON", add_special_tokens=False))

    def slow_encode(encoded, **kw):
        time.sleep(0.5)  # a busy model
        if any(poison <= set(row) for row in encoded.rows["input_ids"]):
            raise ValueError("input_ids contain 40000, outside [0, vocab_size=30522)")
        return encode(encoded, **kw)

    model.encode_tokenized = slow_encode
    settings = ServeSettings(max_body_bytes=LIMIT, timeout_keep_alive=KEEP_ALIVE)
    port = free_port()
    config = uvicorn.Config(
        create_app(model, settings),
        host="127.0.0.1",
        port=port,
        log_level="warning",
        lifespan="on",
        **connection_limits(settings.timeout_keep_alive),  # as `bertfamily serve` runs it
    )
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            time.sleep(0.1)
    yield url, port
    srv.should_exit = True
    thread.join(timeout=30)


def _raw(port: int, data: bytes, read_timeout: float = 5.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=read_timeout) as s:
        s.sendall(data)
        chunks = []
        try:
            while True:
                got = s.recv(65536)
                if not got:
                    break
                chunks.append(got)
                if b"\r\n\r\n" in b"".join(chunks) and b"}" in got:
                    break
        except (TimeoutError, ConnectionResetError):
            pass
        return b"".join(chunks)


def test_oversized_body_is_refused_from_its_header_before_it_is_read(server):
    _, port = server
    head = (
        b"POST /embed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 300000000\r\n\r\n"
    )
    t0 = time.monotonic()
    reply = _raw(port, head + b'{"inputs": "')  # 300 MB announced, 12 bytes sent
    assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
    assert b'"error_type":"Validation"' in reply and b"300,000,000 bytes" in reply
    assert time.monotonic() - t0 < 2


def test_chunked_body_is_cut_off_while_it_streams(server):
    url, _ = server

    def chunks():
        yield b'{"inputs": "'
        for _ in range(100):  # 100 x 8 KiB = 800 KiB offered; the limit is 64 KiB
            yield b"a" * 8192

    r = httpx.post(url + "/embed", content=chunks(), timeout=10)
    assert r.status_code == 413 and "max_body_bytes" in r.json()["error"]


def test_idle_connections_are_closed_within_the_timeout(server):
    _, port = server
    socks = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(50)]
    socks[0].sendall(b"GET /health HTTP/1.1\r\nHo")  # a header that never ends
    t0 = time.monotonic()
    closed = 0
    for s in socks:
        s.settimeout(max(0.1, KEEP_ALIVE + 3 - (time.monotonic() - t0)))
        try:
            while s.recv(4096):
                pass
            closed += 1
        except (TimeoutError, ConnectionResetError):
            pass
        finally:
            s.close()
    assert closed == 50
    assert time.monotonic() - t0 < KEEP_ALIVE + 3


def test_health_answers_while_the_model_is_saturated_and_bad_requests_fail_alone(server):
    url, _ = server
    body = {"inputs": ["word " * 400] * 8, "truncate": True}

    async def main():
        async with httpx.AsyncClient(timeout=60) as client:
            work = [asyncio.create_task(client.post(url + "/embed", json=body)) for _ in range(8)]
            poison = asyncio.create_task(
                client.post(url + "/embed", json={"inputs": ["POISON here"]})
            )
            await asyncio.sleep(0.3)
            health = []
            for _ in range(5):
                t0 = time.monotonic()
                r = await client.get(url + "/health")
                health.append((r.status_code, time.monotonic() - t0))
                await asyncio.sleep(0.2)
            done = await asyncio.gather(*work)
            return health, done, await poison

    health, done, poison = asyncio.run(main())
    assert all(code == 200 and dt < 1.0 for code, dt in health), health
    assert [r.status_code for r in done] == [200] * 8
    assert all(len(r.json()) == 8 for r in done)
    assert poison.status_code == 422 and "outside [0, vocab_size" in poison.json()["error"]


@pytest.mark.parametrize(
    "body, status",
    [
        (b'{"inputs": "\\ud800"}', 422),  # lone surrogate
        (b'{"inputs": ["ok", "\\udfff x"]}', 422),
        (b"\xff\xfe\x00{not json", 422),  # not UTF-8
        (b"[" * 100_000 + b"]" * 100_000, None),  # deep nesting (within the body limit)
        (b'{"inputs": ' + b"[" * 5000 + b'"a"' + b"]" * 5000 + b"}", None),
        (b'{"inputs": "unterminated', 422),
        (b"", 422),
    ],
    ids=["surrogate", "surrogate-list", "non-utf8", "deep", "deep-inputs", "bad-json", "empty"],
)
def test_malformed_bodies_get_the_json_error_shape_never_500(server, body, status):
    url, _ = server
    r = httpx.post(
        url + "/embed", content=body, headers={"content-type": "application/json"}, timeout=10
    )
    assert r.status_code in (400, 413, 422) and (status is None or r.status_code == status)
    assert r.headers["content-type"].startswith("application/json"), r.text[:200]
    assert set(r.json()) == {"error", "error_type"}, r.text[:200]


def test_no_500_under_a_burst_of_mixed_requests(server):
    url, _ = server
    bodies = [
        b'{"inputs": "fine"}',
        b'{"inputs": "\\ud800"}',
        b"\xff",
        b'{"inputs": []}',
        b'{"inputs": "x", "unknown": 1}',  # an unknown field is ignored, as TEI does: 200
        b'{"inputs": "POISON"}',
    ] * 4

    def post(b):
        return httpx.post(
            url + "/embed", content=b, headers={"content-type": "application/json"}, timeout=30
        ).status_code

    with ThreadPoolExecutor(8) as pool:
        codes = list(pool.map(post, bodies))
    assert 500 not in codes and codes.count(200) == 8, codes


def test_serve_cli_flags_set_the_body_limit_and_the_header_timeout(cli, minilm_dir, tmp_path,
                                                                   monkeypatch):  # fmt: skip
    """`bertfamily serve --max-body-bytes N --timeout-keep-alive S`: the app refuses bodies over
    N with 413 before reading them, and uvicorn runs with the header-timeout protocol at S."""
    import uvicorn
    from starlette.testclient import TestClient

    from bertfamily.serve.http import MAX_HEADER_BYTES

    ran = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: ran.update(app=app, **kw))
    model = tiny_dir(tmp_path / "m", minilm_dir)
    result = cli("serve", "--model", model, "--max-body-bytes", 1000, "--timeout-keep-alive", 0.5)
    assert result.exit_code == 0, result.output
    assert ran["timeout_keep_alive"] == 0.5
    assert ran["http"] == "bertfamily.serve.http:HeaderTimeoutProtocol"
    assert ran["h11_max_incomplete_event_size"] == MAX_HEADER_BYTES
    with TestClient(ran["app"]) as client:
        assert client.post("/embed", json={"inputs": "x" * 900}).status_code == 200
        big = client.post("/embed", json={"inputs": "x" * 1000})
        assert big.status_code == 413 and "max_body_bytes" in big.json()["error"]
    assert cli("serve", "--model", model, "--max-body-bytes", 0).exit_code == 2
