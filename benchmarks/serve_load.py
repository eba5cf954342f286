"""Load on `bertfamily serve` beside a plain sentence-transformers FastAPI app, in one run:
all-MiniLM-L6-v2, closed-loop clients (each sends its next request when the previous one
returns), every cell of {8, 32} concurrent clients x {1, 32} texts per request.

Systems, each a subprocess on a free port with the same ``OMP_NUM_THREADS`` / torch threads:

* ``bertfamily``: ``python -m bertfamily serve --model DIR --port P``, default settings (as a
  user runs it; dynamic batching on), threads from ``OMP_NUM_THREADS``;
* ``plain``: the minimal peer written below (`peer_app`): FastAPI + uvicorn, one ``POST /embed``
  (a plain ``def`` route, so FastAPI runs it in its default threadpool) that calls
  ``SentenceTransformer.encode(texts, normalize_embeddings=True)``, same interpreter;
* with ``--no-batching-too``: ``bertfamily-no-batching`` (``serve --no-batching``), the
  batching on/off comparison.

Reports per cell and system: requests/s, texts/s, p50/p99 latency (ms, successful requests),
failed requests (count and kinds: HTTP status or exception class), and the largest absolute
difference of every answer from the direct `SentenceEmbedder.encode` of its texts (bertfamily
must be <= 1e-5; the plain app's is reported too); ratio rows bertfamily / plain per cell.
Systems run in turn within a cell, the order alternating from cell to cell.

Texts: STS-B test sentences (fetched resource ``stsb``), each within the model's token limit
(checked with the server's own tokenization: no 413 for length). Writes
benchmarks/results/serve_load.json with the CPU model, threads, load average before/after and
versions. Run from the repository root: ``python benchmarks/serve_load.py [--requests 400]``
(a fixed number of requests per cell; ``--duration S``: a fixed time instead).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import importlib.metadata
import json
import os
import platform
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
from pydantic import BaseModel

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from machine import cpu_model  # noqa: E402  (benchmarks/machine.py)

from bertfamily.files import write_text_atomic  # noqa: E402

PACKAGES = ("bertfamily", "torch", "transformers", "tokenizers", "sentence-transformers",
            "fastapi", "uvicorn", "httpx")  # fmt: skip


class PeerBody(BaseModel):
    """The plain peer's /embed body (module level: the annotations are strings)."""

    inputs: list[str]


def peer_app(model: Path, threads: int):
    """The plain peer: a FastAPI app whose ``POST /embed`` ({"inputs": [str]} -> [[float]])
    encodes with sentence-transformers in FastAPI's default threadpool; ``GET /health``."""
    import torch
    from fastapi import FastAPI
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(threads)
    st = SentenceTransformer(str(model), device="cpu")
    app = FastAPI()

    @app.post("/embed")
    def embed(body: PeerBody) -> list[list[float]]:
        return st.encode(body.inputs, normalize_embeddings=True).tolist()

    @app.get("/health")
    def health() -> dict:
        return {"status": "ok"}

    return app


def texts_within_limit(embedder, pool: int, seed: int) -> tuple[list[str], int]:
    """``pool`` distinct STS-B test sentences (seeded order) that the served model takes
    without truncation (`SentenceEmbedder.tokenize`, the server's check), and the most tokens
    among them.

    Raises:
        RuntimeError: fewer than ``pool`` such sentences.
    """
    from bertfamily.data.pairs import read_sts
    from bertfamily.resources.cache import fetch

    pairs = read_sts(fetch("stsb") / "sts-test.csv")
    unique = sorted({s.strip() for p in pairs for s in (p.sentence1, p.sentence2) if s.strip()})
    random.Random(seed).shuffle(unique)
    rows = embedder.tokenize(unique)
    keep = [(t, n) for t, n, cut in zip(unique, rows.lengths, rows.truncated) if not cut]
    if len(keep) < pool:
        raise RuntimeError(f"only {len(keep)} sentences within the token limit, asked {pool}")
    keep = keep[:pool]
    return [t for t, _ in keep], max(n for _, n in keep)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(cmd: list[str], port: int, threads: int, log: Path) -> subprocess.Popen:
    """Start a server (stdout discarded, stderr to ``log``) and wait for its /health."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    env |= {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    with log.open("wb") as err:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc
        except httpx.TransportError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"{cmd[:5]} did not start:\n{log.read_text()[-2000:]}")


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()


def request_texts(pool: list[str], per_request: int, i: int, offset: int) -> list[str]:
    """The texts of request ``i`` of a cell: the next ``per_request`` of the pool, cyclic."""
    start = offset + i * per_request
    return [pool[(start + j) % len(pool)] for j in range(per_request)]


async def closed_loop(url, texts_of, clients: int, requests: int | None, duration: float | None,
                      reference: dict[str, np.ndarray]) -> dict:  # fmt: skip
    """``clients`` clients, each sending request ``i`` (``texts_of(i)``) when its previous one
    returns, until ``requests`` were sent or ``duration`` seconds passed. Every 200 answer is
    compared with ``reference`` at once (the largest absolute difference)."""
    sent = [0]
    latencies: list[float] = []
    failures: collections.Counter[str] = collections.Counter()
    samples: list[str] = []
    done = {"texts": 0, "worst": 0.0}

    async def client(http: httpx.AsyncClient, deadline: float) -> None:
        while (requests is None or sent[0] < requests) and time.perf_counter() < deadline:
            i, sent[0] = sent[0], sent[0] + 1
            texts = texts_of(i)
            t0 = time.perf_counter()
            try:
                r = await http.post(url + "/embed", json={"inputs": texts})
            except httpx.HTTPError as e:
                failures[type(e).__name__] += 1
                samples.append(repr(e)[:200])
                continue
            if r.status_code != 200:
                failures[f"HTTP {r.status_code}"] += 1
                samples.append(f"{r.status_code}: {r.text[:200]}")
                continue
            latencies.append(time.perf_counter() - t0)
            got = np.asarray(r.json(), dtype=np.float32)
            want = np.stack([reference[t] for t in texts])
            done["worst"] = max(done["worst"], float(np.abs(got - want).max()))
            done["texts"] += len(texts)

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(timeout=600, limits=limits) as http:
        t0 = time.perf_counter()
        deadline = t0 + (duration if duration is not None else float("inf"))
        await asyncio.gather(*(client(http, deadline) for _ in range(clients)))
        wall = time.perf_counter() - t0
    lat_ms = np.array(latencies or [float("nan")]) * 1000
    return {
        "requests": sent[0],
        "answered": len(latencies),
        "failed": sum(failures.values()),
        "failure_kinds": dict(failures),
        "failure_samples": samples[:3],
        "wall_s": round(wall, 2),
        "requests_per_s": round(len(latencies) / wall, 2),
        "texts_per_s": round(done["texts"] / wall, 1),
        "p50_ms": round(float(np.percentile(lat_ms, 50)), 1),
        "p99_ms": round(float(np.percentile(lat_ms, 99)), 1),
        "max_abs_diff_vs_encode": done["worst"],
    }


def model_calls(port: int) -> float:
    """bertfamily's model calls so far (its /metrics)."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30).text
    return sum(
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith("bertfamily_batch_requests_count")
    )


def run_cell(servers, pool, reference, clients, per_request, args, flip: bool) -> dict:
    """One cell: every system in turn (order reversed when ``flip``), each warmed up with
    ``clients`` requests first."""
    names = list(servers)[::-1] if flip else list(servers)
    offset = random.Random(clients * 1000 + per_request).randrange(len(pool))
    out: dict[str, dict] = {}
    for name in names:
        port = servers[name][1]
        url = f"http://127.0.0.1:{port}"

        def texts_of(i: int) -> list[str]:
            return request_texts(pool, per_request, i, offset)

        asyncio.run(closed_loop(url, texts_of, clients, clients, None, reference))  # warm-up
        calls = model_calls(port) if name.startswith("bertfamily") else None
        load = os.getloadavg()[0]
        row = asyncio.run(
            closed_loop(url, texts_of, clients, args.requests, args.duration, reference)
        )
        row["loadavg_1m_before"] = round(load, 2)
        if calls is not None:
            row["model_calls"] = int(model_calls(port) - calls)
            row["requests_per_model_call"] = round(row["answered"] / max(row["model_calls"], 1), 2)
        out[name] = row
        print(f"  {clients:>2} clients x {per_request:>2} texts  {name:<24} "
              f"{row['requests_per_s']:>8.2f} req/s {row['texts_per_s']:>8.1f} texts/s "
              f"p50 {row['p50_ms']:>8.1f} p99 {row['p99_ms']:>8.1f} ms  "
              f"failed {row['failed']}", file=sys.stderr, flush=True)  # fmt: skip
    out = {name: out[name] for name in servers}
    cell = {"clients": clients, "texts_per_request": per_request, "systems": out}
    if "bertfamily" in out and "plain" in out:
        a, b = out["bertfamily"], out["plain"]
        cell["bertfamily_over_plain"] = {
            k: round(a[k] / b[k], 2) if b[k] else None
            for k in ("requests_per_s", "texts_per_s", "p50_ms", "p99_ms")
        }
    return cell


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for p in PACKAGES:
        try:
            out[p] = importlib.metadata.version(p)
        except importlib.metadata.PackageNotFoundError:
            out[p] = "not installed"
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--texts", type=int, nargs="+", default=[1, 32], help="per request")
    parser.add_argument("--requests", type=int, default=400, help="per cell and system")
    parser.add_argument("--duration", type=float, default=None, help="seconds per cell instead")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--pool", type=int, default=1024, help="distinct sentences")
    parser.add_argument("--no-batching-too", action="store_true")
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks/results/serve_load.json")
    parser.add_argument("--peer", action="store_true", help=argparse.SUPPRESS)  # the plain app
    parser.add_argument("--port", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--model", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peer:
        import uvicorn

        uvicorn.run(peer_app(args.model, args.threads), host="127.0.0.1", port=args.port)
        return
    if args.duration is not None:
        args.requests = None
    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # this process's reference encode
    import torch

    from bertfamily.pipelines.embedding.embed import SentenceEmbedder
    from bertfamily.resources.cache import fetch

    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()
    model = fetch("all-MiniLM-L6-v2")
    embedder = SentenceEmbedder(model)
    pool, max_tokens = texts_within_limit(embedder, args.pool, seed=0)
    reference = dict(zip(pool, embedder.encode(pool, batch_size=64)))
    serve = [sys.executable, "-m", "bertfamily", "serve", "--model", str(model), "--port"]
    peer = [sys.executable, __file__, "--peer", "--model", str(model), "--threads",
            str(args.threads), "--port"]  # fmt: skip
    commands = {"bertfamily": (serve, []), "plain": (peer, [])}
    if args.no_batching_too:
        commands["bertfamily-no-batching"] = (serve, ["--no-batching"])
    logs = Path(tempfile.mkdtemp(prefix="serve_load_"))
    servers: dict[str, tuple[subprocess.Popen, int]] = {}
    try:
        for name, (cmd, extra) in commands.items():
            port = free_port()
            proc = start([*cmd, str(port), *extra], port, args.threads, logs / f"{name}.log")
            servers[name] = (proc, port)
        cells = [
            run_cell(servers, pool, reference, c, k, args, flip=n % 2 == 1)
            for n, (c, k) in enumerate((c, k) for c in args.clients for k in args.texts)
        ]
    finally:
        for proc, _ in servers.values():
            stop(proc)
    bertfamily_rows = [cell["systems"]["bertfamily"] for cell in cells]
    result = {
        "benchmark": "serve_load",
        "cpu": cpu_model(),
        "threads": args.threads,
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "versions": versions(),
        "model": "all-MiniLM-L6-v2",
        "model_max_tokens": embedder.max_length,
        "texts": f"{len(pool)} distinct STS-B test sentences, at most {max_tokens} tokens each",
        "load": "closed loop: each client sends its next request when the previous returns",
        "per_cell": f"{args.duration} s" if args.requests is None else f"{args.requests} requests",
        "server_commands": {
            n: " ".join(["python", *c[1:], "PORT", *e]) for n, (c, e) in commands.items()
        },
        "server_stderr": {n: (logs / f"{n}.log").read_text()[-500:] for n in commands},
        "cells": cells,
        "failed_requests": {n: sum(c["systems"][n]["failed"] for c in cells) for n in commands},
        "bertfamily_all_equal_to_encode_1e-5": all(
            r["failed"] == 0 and r["max_abs_diff_vs_encode"] <= 1e-5 for r in bertfamily_rows
        ),
    }
    write_text_atomic(args.output, json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
