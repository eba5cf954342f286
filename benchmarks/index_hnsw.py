"""HNSW against exact search in `bertfamily.pipelines.retrieval.dense.VectorIndex`: 100,000
random unit vectors (d=32; seeded), 200 queries; build time, query latency per query (one
batch of 200, and one at a time), recall@10 against brute force, for the settings
`tests/pipelines/test_index.py` checks.

Writes benchmarks/results/index_hnsw.json with the CPU model and thread count.
Run from the repository root: ``python benchmarks/index_hnsw.py``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from machine import cpu_model  # noqa: E402  (benchmarks/machine.py)

from bertfamily.files import write_text_atomic  # noqa: E402
from bertfamily.pipelines.retrieval.dense import ModelIdentity, VectorIndex  # noqa: E402

N, D, Q, K = 100_000, 32, 200, 10


def unit_vectors(n: int, d: int, seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def measure(kind: str, corpus, queries, want, **settings) -> dict:
    index = VectorIndex.create(ModelIdentity("x" * 64, D, "mean"), kind=kind, **settings)
    t0 = time.perf_counter()
    index.add_vectors(corpus, [""] * len(corpus), list(range(len(corpus))))
    build = time.perf_counter() - t0
    t0 = time.perf_counter()
    hits = index.search_vectors(queries, top_k=K)
    batch_ms = (time.perf_counter() - t0) / len(queries) * 1000
    t0 = time.perf_counter()
    for q in queries:
        index.search_vectors(q[None], top_k=K)
    single_ms = (time.perf_counter() - t0) / len(queries) * 1000
    recall = np.mean([len({h.index for h in row} & set(w)) / K for row, w in zip(hits, want)])
    return {
        "kind": kind,
        **settings,
        "build_s": round(build, 2),
        "query_ms_batched": round(batch_ms, 3),
        "query_ms_one_at_a_time": round(single_ms, 3),
        "recall_at_10": round(float(recall), 4),
    }


def main() -> None:
    import faiss

    corpus, queries = unit_vectors(N, D, 2), unit_vectors(Q, D, 3)
    want = np.argsort(-(queries @ corpus.T), axis=1, kind="stable")[:, :K]
    runs = [
        measure("flat", corpus, queries, want),
        measure("hnsw", corpus, queries, want, hnsw_m=16, ef_construction=40, ef_search=256),
    ]
    result = {
        "benchmark": "index_hnsw",
        "cpu": cpu_model(),
        "threads": faiss.omp_get_max_threads(),
        "cpus": os.cpu_count(),
        "vectors": N,
        "dimension": D,
        "queries": Q,
        "k": K,
        "runs": runs,
    }
    write_text_atomic(
        ROOT / "benchmarks/results/index_hnsw.json", json.dumps(result, indent=2) + "\n"
    )
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
