"""Load on `bertfamily serve`: 32 concurrent clients send 2,000 /embed requests of 1-16 sentences
to a real uvicorn process serving all-MiniLM-L6-v2, once with dynamic batching and once with it
turned off (`--no-batching`), in one run; so the gain from batching is a measured ratio.

Reports per mode: throughput (requests/s, sentences/s), p50/p99 latency, errors (must be 0), and
that every response equals the direct `SentenceEmbedder.encode` of its inputs (largest absolute
difference, must be <= 1e-5). Sentences are synthetic (seeded words, 3-40 words each).

Writes benchmarks/results/serve_load.json with the CPU model and thread count.
Run from the repository root: ``python benchmarks/serve_load.py [--requests 2000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from machine import cpu_model  # noqa: E402  (benchmarks/machine.py)

from bertfamily.files import write_text_atomic  # noqa: E402
from bertfamily.pipelines.embedding.embed import SentenceEmbedder  # noqa: E402
from bertfamily.resources.cache import fetch  # noqa: E402

WORDS = (
    "the a model server request batch token sentence vector index search query answer fast slow "
    "river mountain city night morning coffee language music history science data memory cat dog "
    "train learns reads writes runs jumps quickly carefully under over between with without"
).split()


def workload(n: int, seed: int = 0) -> list[list[str]]:
    rng = random.Random(seed)
    return [
        [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 40))) for _ in range(k)]
        for k in (rng.randint(1, 16) for _ in range(n))
    ]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(model: Path, port: int, batching: bool, threads: int) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "bertfamily", "serve", "--model", str(model), "--port", str(port)]
    cmd += ["--threads", str(threads), "--batching" if batching else "--no-batching"]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc
        except httpx.TransportError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("server did not start")


async def load(url: str, requests: list[list[str]], clients: int):
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(len(requests)):
        queue.put_nowait(i)
    latencies: list[float] = []
    answers: dict[int, list] = {}
    errors: list[str] = []

    async def client(http: httpx.AsyncClient) -> None:
        while not queue.empty():
            i = queue.get_nowait()
            t0 = time.perf_counter()
            try:
                r = await http.post(url + "/embed", json={"inputs": requests[i]})
                if r.status_code != 200:
                    errors.append(f"{r.status_code}: {r.text[:200]}")
                    continue
                answers[i] = r.json()
            except httpx.HTTPError as e:
                errors.append(repr(e))
                continue
            latencies.append(time.perf_counter() - t0)

    limits = httpx.Limits(max_connections=clients)
    async with httpx.AsyncClient(timeout=300, limits=limits) as http:
        t0 = time.perf_counter()
        await asyncio.gather(*(client(http) for _ in range(clients)))
        wall = time.perf_counter() - t0
    return wall, latencies, answers, errors


def run_mode(model, requests, reference, clients, batching, threads) -> dict:
    port = free_port()
    proc = start_server(model, port, batching, threads)
    try:
        wall, lat, answers, errors = asyncio.run(
            load(f"http://127.0.0.1:{port}", requests, clients)
        )
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics").text
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    worst = 0.0
    for i, rows in answers.items():
        want = np.stack([reference[t] for t in requests[i]])
        worst = max(worst, float(np.abs(np.asarray(rows, dtype=np.float32) - want).max()))
    calls = sum(
        float(line.split()[-1])
        for line in metrics.splitlines()
        if line.startswith("bertfamily_batch_requests_count")
    )
    sentences = sum(len(requests[i]) for i in answers)
    lat_ms = np.array(lat) * 1000
    return {
        "batching": batching,
        "requests": len(requests),
        "answered": len(answers),
        "errors": len(errors),
        "error_samples": errors[:3],
        "wall_s": round(wall, 2),
        "requests_per_s": round(len(answers) / wall, 2),
        "sentences_per_s": round(sentences / wall, 1),
        "p50_ms": round(float(np.percentile(lat_ms, 50)), 1),
        "p99_ms": round(float(np.percentile(lat_ms, 99)), 1),
        "model_calls": int(calls),
        "requests_per_model_call": round(len(answers) / max(calls, 1), 2),
        "max_abs_diff_vs_encode": worst,
        "all_equal_to_encode_1e-5": bool(len(answers) == len(requests) and worst <= 1e-5),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks/results/serve_load.json")
    args = parser.parse_args()
    model = fetch("all-MiniLM-L6-v2")
    requests = workload(args.requests)
    unique = sorted({t for r in requests for t in r})
    import torch

    torch.set_num_threads(args.threads)
    vectors = SentenceEmbedder(model).encode(unique, batch_size=64)
    reference = dict(zip(unique, vectors))
    modes = [
        run_mode(model, requests, reference, args.clients, b, args.threads) for b in (True, False)
    ]
    result = {
        "benchmark": "serve_load",
        "cpu": cpu_model(),
        "threads": args.threads,
        "python": platform.python_version(),
        "model": "all-MiniLM-L6-v2",
        "clients": args.clients,
        "sentences_per_request": "1-16 (uniform)",
        "words_per_sentence": "3-40 (uniform, synthetic)",
        "modes": modes,
        "batching_speedup_requests_per_s": round(
            modes[0]["requests_per_s"] / modes[1]["requests_per_s"], 2
        ),
        "batching_p99_ratio_off_over_on": round(modes[1]["p99_ms"] / modes[0]["p99_ms"], 2),
    }
    write_text_atomic(args.output, json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
