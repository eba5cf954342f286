"""Lexical, dense, sparse and hybrid retrieval side by side on Cranfield, human-judged.

Data: the Cranfield collection (Cleverdon 1967) in ../shared/data/cranfield/ (``--data``):
1,400 aeronautics abstracts (``cran.all.1400``), 225 queries (``cran.qry``) and graded
judgments (``cranqrel``). Two quirks of the files, read by `read_cranfield`:

- the judgments number the queries by their position in ``cran.qry`` (1..225), not by the
  ``.I`` ids written there (001..365, with gaps); checked: the judgments hold exactly the
  numbers 1..225, and query 3 (``.I 004``, heat conduction in composite slabs) has document
  485 ("linear heat flow in a composite slab") while ``.I 004`` would not exist as a number;
- the codes are 1..4 with 1 the most relevant (``cranqrel.readme``: 1 "a complete answer",
  4 "of minimum interest"), and one row per query carries -1, a code the readme does not
  define (it marks the query's source document). Gains: 5 - code (1 → 4, 2 → 3, 3 → 2,
  4 → 1); -1 → 0, as an unjudged document.

A document's text is its ``.W`` field (which repeats the title); the two documents with an
empty ``.W`` (471 and 995) have no text and are left out of every index (their judgments
still count in the ideal ranking). NDCG@10 uses linear gains and log2(rank + 1) discounts
(Järvelin & Kekäläinen 2002); Recall@100 counts documents of gain > 0.

Rows, in one run, each with build time (tokenising or encoding the corpus and building the
index), the index directory's size on disk (every file, ``texts.jsonl`` included), and
queries/s (225 queries, top 100, query encoding included); each time both on the wall clock
and in CPU seconds of the process (``time.process_time``: one thread, so on a shared machine
the CPU seconds are the steadier speed figure; the table shows them):

- ``bm25``: `BM25Index` (bm25s, lucene BM25, k1 = 1.5, b = 0.75, English stopwords, no
  stemming: PyStemmer is not installed here);
- ``dense_minilm``: all-MiniLM-L6-v2 in a flat `VectorIndex` (exact cosine; 256 tokens);
- ``splade``: splade-bert-tiny (``/root/.cache/bertfamily/splade-bert-tiny``) in `SparseIndex`;
- ``hybrid_bm25_dense_rrf`` and ``hybrid_bm25_dense_splade_rrf``: `fuse` by reciprocal rank
  over each index's top 100 (build time and size: the sum of the parts).

Optional rows (each needs a flag): ``static`` (``--static-model DIR``: a static model through
`SentenceEmbedder`), ``model2vec`` (``--model2vec DIR``: model2vec's own ``StaticModel``),
``colbert-<NAME>`` (``--colbert-model NAME=DIR``, e.g. ``ours=DIR pylate=DIR``: the "colbert"
index kind, when this tree has it).

Writes benchmarks/results/retrieval_cranfield.json with the CPU model (`machine.cpu_model`),
threads and load average, and ``--write-page`` renders its table into docs/retrieval.md.
Run from the repository root: ``nice -n 10 python benchmarks/retrieval_cranfield.py``
(one thread; a few CPU-minutes, most of it encoding the corpus with MiniLM).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bertfamily.files import write_text_atomic  # noqa: E402
from bertfamily.pipelines.retrieval import (  # noqa: E402
    KIND_CLASSES,
    BM25Index,
    SparseIndex,
    VectorIndex,
    fuse,
)

DATA = ROOT.parent / "shared" / "data" / "cranfield"  # ../shared beside the clone (CI too)
MODELS = Path("/root/.cache/bertfamily")
OUT = ROOT / "benchmarks" / "results" / "retrieval_cranfield.json"
PAGE = ROOT / "docs" / "retrieval.md"
TABLE_START, TABLE_END = "<!-- cranfield-table:start -->", "<!-- cranfield-table:end -->"
K, DEPTH = 10, 100
LABELS = {
    "bm25": "BM25 (bm25s, `BM25Index`)",
    "dense_minilm": "dense: all-MiniLM-L6-v2, flat",
    "splade": "sparse: splade-bert-tiny, `SparseIndex`",
    "hybrid_bm25_dense_rrf": "hybrid: BM25 + dense, RRF",
    "hybrid_bm25_dense_splade_rrf": "hybrid: BM25 + dense + SPLADE, RRF",
    "static": "static model (`SentenceEmbedder`), flat",
    "model2vec": "static: model2vec's own `StaticModel`, flat",
}


# --- the collection -------------------------------------------------------------------------
def _records(path: Path) -> list[tuple[str, dict[str, str]]]:
    """(``.I`` id, {field letter: text}) per record of a Cranfield file (CRLF or LF)."""
    out: list[tuple[str, dict[str, str]]] = []
    field = None
    for line in path.read_text(encoding="ascii").replace("\r", "").split("\n"):
        if line.startswith(".I"):
            out.append((line[2:].strip(), {}))
            field = None
        elif len(line) == 2 and line[0] == "." and line[1] in "TABW" and out:
            field = line[1]
            out[-1][1].setdefault(field, "")
        elif field is not None:
            out[-1][1][field] += " " + line.strip()
    return [(i, {k: " ".join(v.split()) for k, v in f.items()}) for i, f in out]


def read_cranfield(data: Path = DATA) -> dict[str, Any]:
    """The collection: ``docs`` (id → text, the ``.W`` field; empty ones left out), ``empty``
    (the ids left out), ``queries`` (list of (position 1..N, ``.I`` id, text)), ``qrels``
    (position → {document id: code}).

    Raises:
        ValueError: the judgments do not number the queries 1..N in file order, or name a
            document or code the collection does not have.
    """
    docs_all = {int(i): f.get("W", "") for i, f in _records(data / "cran.all.1400")}
    docs = {i: t for i, t in docs_all.items() if t.strip()}
    queries = [(n, i, f["W"]) for n, (i, f) in enumerate(_records(data / "cran.qry"), 1)]
    qrels: dict[int, dict[int, int]] = {}
    for line in (data / "cranqrel").read_text(encoding="ascii").split("\n"):
        if line.strip():
            q, d, code = (int(x) for x in line.split())
            qrels.setdefault(q, {})[d] = code
    if sorted(qrels) != list(range(1, len(queries) + 1)):
        raise ValueError("cranqrel does not number the queries 1..N in cran.qry's order")
    if max(int(i) for _, i, _ in queries) == len(queries):
        raise ValueError("cran.qry's .I ids are 1..N: the numbering quirk is gone, re-check")
    for q, judged in qrels.items():
        if not set(judged) <= set(docs_all) or not set(judged.values()) <= {-1, 1, 2, 3, 4}:
            raise ValueError(f"query {q}: a document or code outside the collection")
    empty = sorted(set(docs_all) - set(docs))
    return {"docs": docs, "empty": empty, "queries": queries, "qrels": qrels}


def gain(code: int) -> int:
    """The NDCG gain of a Cranfield code: 5 - code for 1..4 (1 = a complete answer → 4),
    0 for -1 (undefined by the readme; the query's source document)."""
    return 5 - code if 1 <= code <= 4 else 0


def metrics(ranked: list[list[int]], qrels: dict[int, dict[int, int]]) -> dict[str, float]:
    """Mean NDCG@10 (graded, `gain`) and Recall@100 over the queries; ``ranked[n]``: the
    document ids of query n + 1, best first."""
    ndcg, recall = [], []
    for n, docs in enumerate(ranked, 1):
        gains = {d: gain(c) for d, c in qrels[n].items() if gain(c) > 0}
        dcg = sum(gains.get(d, 0) / math.log2(r + 2) for r, d in enumerate(docs[:K]))
        ideal = sorted(gains.values(), reverse=True)[:K]
        idcg = sum(g / math.log2(r + 2) for r, g in enumerate(ideal))
        ndcg.append(dcg / idcg if idcg else 0.0)
        recall.append(len(set(docs[:DEPTH]) & set(gains)) / len(gains) if gains else 0.0)
    return {
        "ndcg@10": round(float(np.mean(ndcg)), 4),
        "recall@100": round(float(np.mean(recall)), 4),
    }


def dir_bytes(path: Path) -> int:
    """The bytes of every file under ``path``."""
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


# --- rows -----------------------------------------------------------------------------------
class Row:
    """One retriever: builds its index (timed, saved, measured) and searches (timed)."""

    def __init__(self, name: str, build, search) -> None:
        self.name, self._build, self._search = name, build, search

    def run(self, texts, ids, queries, work: Path) -> tuple[dict, list]:
        t, c = time.perf_counter(), time.process_time()
        index = self._build(texts, ids)
        built, built_cpu = time.perf_counter() - t, time.process_time() - c
        index.save(work / self.name)
        t, c = time.perf_counter(), time.process_time()
        hits = self._search(index, queries)
        took, took_cpu = time.perf_counter() - t, time.process_time() - c
        record = {
            "build_seconds": round(built, 2),
            "build_cpu_seconds": round(built_cpu, 2),
            "index_bytes": dir_bytes(work / self.name),
            "queries_per_second": round(len(queries) / took, 1),
            "queries_per_cpu_second": round(len(queries) / took_cpu, 1),
            "search_seconds": round(took, 3),
        }
        return record, hits


def bm25_row() -> Row:
    return Row(
        "bm25",
        lambda texts, ids: BM25Index.build(texts, ids),
        lambda index, queries: index.search_texts(queries, top_k=DEPTH),
    )


def embedder_row(name: str, embedder) -> Row:
    return Row(
        name,
        lambda texts, ids: VectorIndex.build(embedder, texts, ids, batch_size=32),
        lambda index, queries: index.search_texts(embedder, queries, top_k=DEPTH),
    )


def splade_row(encoder) -> Row:
    return Row(
        "splade",
        lambda texts, ids: SparseIndex.build(encoder, texts, ids, batch_size=32),
        lambda index, queries: index.search_texts(encoder, queries, top_k=DEPTH),
    )


def model2vec_row(path: str) -> Row:
    """model2vec's own ``StaticModel`` (its encode, L2-normalised) in a flat `VectorIndex` of
    bare vectors."""
    from model2vec import StaticModel

    model = StaticModel.from_pretrained(path)

    def build(texts, ids):
        vectors = model.encode(texts)
        index = VectorIndex.create(_bare_identity(vectors.shape[1]))
        index.add_vectors(_unit(vectors), texts, ids)
        return index

    return Row("model2vec", build, lambda i, q: i.search_vectors(_unit(model.encode(q)), DEPTH))


def colbert_row(name: str, path: str) -> Row:
    """The "colbert" index kind of this tree with its encoder; refused with a clear message
    while the kind is not here (another part of issue #48)."""
    import importlib

    if "colbert" not in KIND_CLASSES:
        raise RuntimeError(
            "no 'colbert' index kind in pipelines.retrieval.KIND_CLASSES yet: the ColBERT rows "
            "run once pipelines/embedding/colbert.py and the colbert kind are in the tree"
        )
    module = importlib.import_module("bertfamily.pipelines.embedding.colbert")
    cls = next(
        (getattr(module, n) for n in ("ColBERTEncoder", "ColBERT", "LateInteractionEncoder")
         if hasattr(module, n)),
        None,
    )  # fmt: skip
    if cls is None:
        raise RuntimeError("pipelines/embedding/colbert.py has no encoder class this row knows")
    encoder = cls(path)
    return Row(
        f"colbert-{name}",
        lambda texts, ids: KIND_CLASSES["colbert"].build(encoder, texts, ids),
        lambda index, queries: index.search_texts(encoder, queries, top_k=DEPTH),
    )


def _unit(v: np.ndarray) -> np.ndarray:
    v = np.asarray(v, dtype=np.float32)
    return v / np.clip(np.linalg.norm(v, axis=1, keepdims=True), 1e-12, None)


def _bare_identity(dimension: int):
    from bertfamily.pipelines.retrieval import ModelIdentity

    return ModelIdentity("0" * 64, dimension, "model2vec", "model2vec")


# --- the table ------------------------------------------------------------------------------
def render_table(result: dict) -> str:
    """The Markdown table of docs/retrieval.md's "Measured on Cranfield" from the JSON."""
    lines = [
        "| method | NDCG@10 | Recall@100 | queries per CPU-s | build (CPU s) | index on disk |",
        "|---|---|---|---|---|---|",
    ]
    for name, row in result["rows"].items():
        label = LABELS.get(name, name)
        if "skipped" in row:
            lines.append(f"| {label} | not run: {row['skipped']} | | | | |")
            continue
        size = row["index_bytes"] / 2**20
        lines.append(
            f"| {label} | {row['ndcg@10']:.4f} | {row['recall@100']:.4f} | "
            f"{row['queries_per_cpu_second']:,.1f} | {row['build_cpu_seconds']:.1f} | "
            f"{size:.2f} MiB |"
        )
    return "\n".join(lines) + "\n"


def page_table(page: str) -> str:
    """The table between the markers of docs/retrieval.md."""
    return page.split(TABLE_START, 1)[1].split(TABLE_END, 1)[0].strip("\n") + "\n"


def write_page_table(result: dict, page: Path = PAGE) -> None:
    """Replace the table between the markers of ``page`` by the one ``result`` renders."""
    text = page.read_text(encoding="utf-8")
    head, rest = text.split(TABLE_START, 1)
    tail = rest.split(TABLE_END, 1)[1]
    write_text_atomic(page, f"{head}{TABLE_START}\n\n{render_table(result)}\n{TABLE_END}{tail}")


# --- main -----------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--dense-model", default=str(MODELS / "all-MiniLM-L6-v2"))
    ap.add_argument("--splade-model", default=str(MODELS / "splade-bert-tiny"))
    ap.add_argument("--static-model", default=None, help="a static model directory (row static)")
    ap.add_argument("--model2vec", default=None, help="a model2vec directory (row model2vec)")
    ap.add_argument(
        "--colbert-model", action="append", default=[], metavar="NAME=DIR",
        help="a ColBERT directory (row colbert-NAME); repeat for ours and pylate",
    )  # fmt: skip
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--write-page", action="store_true", help="render the table into the docs")
    args = ap.parse_args(argv)

    import bm25s
    import torch
    from machine import cpu_model

    torch.set_num_threads(args.threads)
    data = read_cranfield(args.data)
    ids = sorted(data["docs"])
    texts = [data["docs"][i] for i in ids]
    queries = [q for _, _, q in data["queries"]]
    result: dict[str, Any] = {
        "cpu": cpu_model(),
        "threads": torch.get_num_threads(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "data": (
            f"Cranfield ({args.data}): {len(texts)} documents with text (left out, empty: "
            f"{data['empty']}), {len(queries)} queries, "
            f"{sum(len(j) for j in data['qrels'].values())} judgments"
        ),
        "gains": "code 1..4 -> 5 - code (1 = complete answer -> 4); -1 -> 0",
        "metrics": "NDCG@10 (linear gains, log2 discount), Recall@100 (gain > 0)",
        "versions": {"bm25s": bm25s.__version__, "torch": torch.__version__},
        "rows": {},
    }
    from bertfamily.pipelines.embedding.embed import SentenceEmbedder
    from bertfamily.pipelines.embedding.sparse import SparseEncoder

    rows: list[Row] = [bm25_row()]
    dense = SentenceEmbedder(args.dense_model, dtype="fp32")
    result["dense_max_tokens"] = getattr(dense, "max_seq_length", None)
    rows.append(embedder_row("dense_minilm", dense))
    rows.append(splade_row(SparseEncoder(args.splade_model, dtype="fp32")))
    optional: list[tuple[str, Any]] = []
    if args.static_model:
        optional.append(("static", lambda: embedder_row("static", SentenceEmbedder(
            args.static_model, dtype="fp32"))))  # fmt: skip
    if args.model2vec:
        optional.append(("model2vec", lambda: model2vec_row(args.model2vec)))
    for spec in args.colbert_model:
        name, _, path = spec.partition("=")
        optional.append((f"colbert-{name}", lambda n=name, p=path: colbert_row(n, p)))
    for name, make in optional:
        try:
            rows.append(make())
        except Exception as e:  # noqa: BLE001 - an optional row reports why it did not run
            result["rows"][name] = {"skipped": f"{type(e).__name__}: {e}"[:300]}

    hits: dict[str, list] = {}
    with tempfile.TemporaryDirectory() as work:
        for row in rows:
            try:
                record, found = row.run(texts, ids, queries, Path(work))
            except Exception as e:  # noqa: BLE001
                if row.name in ("bm25", "dense_minilm", "splade"):
                    raise
                result["rows"][row.name] = {"skipped": f"{type(e).__name__}: {e}"[:300]}
                continue
            hits[row.name] = found
            ranked = [[h.id for h in r] for r in found]
            result["rows"][row.name] = metrics(ranked, data["qrels"]) | record
            print(row.name, result["rows"][row.name], flush=True)
        by_name = {r.name: r for r in rows}
        for name, parts in (
            ("hybrid_bm25_dense_rrf", ("bm25", "dense_minilm")),
            ("hybrid_bm25_dense_splade_rrf", ("bm25", "dense_minilm", "splade")),
        ):
            loaded = [KIND_CLASSES[_kind(Path(work) / p)].load(Path(work) / p) for p in parts]
            t, c = time.perf_counter(), time.process_time()  # search every part again, fuse
            lists = [by_name[p]._search(i, queries) for p, i in zip(parts, loaded)]
            fused = [fuse(*per_query, top_k=DEPTH, method="rrf") for per_query in zip(*lists)]
            took, took_cpu = time.perf_counter() - t, time.process_time() - c
            ranked = [[ids[h.index] for h in r] for r in fused]
            result["rows"][name] = metrics(ranked, data["qrels"]) | {
                "build_seconds": round(sum(result["rows"][p]["build_seconds"] for p in parts), 2),
                "build_cpu_seconds": round(
                    sum(result["rows"][p]["build_cpu_seconds"] for p in parts), 2
                ),
                "index_bytes": sum(result["rows"][p]["index_bytes"] for p in parts),
                "queries_per_second": round(len(queries) / took, 1),
                "queries_per_cpu_second": round(len(queries) / took_cpu, 1),
                "search_seconds": round(took, 3),
            }
            print(name, result["rows"][name], flush=True)
    order = [*LABELS, *sorted(set(result["rows"]) - set(LABELS))]
    result["rows"] = {n: result["rows"][n] for n in order if n in result["rows"]}
    result["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    write_text_atomic(args.out, json.dumps(result, indent=2) + "\n")
    if args.write_page:
        write_page_table(result)
    print(render_table(result))
    return result


def _kind(path: Path) -> str:
    return json.loads((path / "meta.json").read_text())["kind"]


if __name__ == "__main__":
    main()
