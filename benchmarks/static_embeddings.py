"""Static embeddings distilled from all-MiniLM-L6-v2: ours (`recipes.static.distill_static`)
against model2vec's ``distill`` with the same settings (256 PCA dimensions, SIF coefficient
1e-4 over Zipf ranks, ``[unusedN]`` removed, float32 rows), and MiniLM itself.

Measured, in one run:

- the two distillations: wall time (one thread), tokens kept, the largest difference between
  the two tables (same vocabulary order);
- STS-B test Spearman (cosine, ×100) of MiniLM (bertfamily), our static model (bertfamily's
  `SentenceEmbedder`) and model2vec's static model (model2vec's ``StaticModel.encode``);
- encode speed, sentences/s on one thread, over the STS-B test sentences (both sides of every
  pair): MiniLM (bertfamily, batch 32), our static model run by bertfamily, model2vec's
  static model run by model2vec (``use_multiprocessing=False``) and by sentence-transformers
  (batch 1024 for the static ones, model2vec's default); ``--rounds`` interleaved rounds (every
  engine once per round, in turn), the median reported with every round's value.

Not measured: retrieval quality, other base models, GPU speed. Data: the fetched ``stsb``
resource (``bertfamily fetch stsb``). Writes benchmarks/results/static_embeddings.json with the
CPU model (`machine.cpu_model`) and the load average, and its table into docs/retrieval.md
(between the ``static-table`` markers; ``--docs-only`` rewrites the table from the JSON). Run
from the repository root: ``nice -n 10 python benchmarks/static_embeddings.py`` (a few
CPU-minutes).
"""

from __future__ import annotations

import os

os.environ["OMP_NUM_THREADS"] = "1"  # one thread, before torch loads
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import textwrap  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from machine import cpu_model  # noqa: E402  (benchmarks/machine.py)

from bertfamily.data.pairs import read_sts  # noqa: E402
from bertfamily.evaluation.metrics import similarity_metrics  # noqa: E402
from bertfamily.files import write_text_atomic  # noqa: E402
from bertfamily.pipelines.embedding.embed import SentenceEmbedder  # noqa: E402
from bertfamily.recipes.static import distill_static  # noqa: E402
from bertfamily.resources.cache import fetch  # noqa: E402

DIMS = 256
SIF = 1e-4
STATIC_BATCH = 1024  # model2vec's default batch size of encode
OUT = ROOT / "benchmarks" / "results" / "static_embeddings.json"
DOCS = ROOT / "docs" / "retrieval.md"
TABLE_START, TABLE_END = "<!-- static-table:start -->", "<!-- static-table:end -->"


def render_table(result: dict) -> str:
    """The docs table of ``result`` (this script's JSON): Spearman and speed per engine."""
    speed, quality = result["sentences_per_second"], result["sts_spearman_x100"]
    lines = [
        "| model (run by) | dims | STS-B test Spearman ×100 | sentences/s, 1 thread (median) "
        "| × MiniLM |",
        "|---|---|---|---|---|",
    ]
    dims = result["settings"]["pca_dims"]
    for name, width in [
        ("MiniLM (bertfamily)", 384),
        ("ours-static (bertfamily)", dims),
        ("ours-static (model2vec)", dims),
        ("model2vec-static (model2vec)", dims),
        ("model2vec-static (bertfamily)", dims),
        ("model2vec-static (sentence-transformers)", dims),
    ]:
        q = quality.get(name)
        v = speed.get(name) or {}
        rate = f"{v['median']:,.0f}" if v else "—"
        times = f"{v['x_minilm']:g}" if v else "—"
        spearman = "—" if q is None else f"{q:.2f}"
        lines.append(f"| {name} | {width} | {spearman} | {rate} | {times} |")
    d, m = result["distillation"], result["machine"]
    lines += [
        "",
        f"Distillation, one thread: ours {d['ours_seconds']:g} s, model2vec's "
        f"{d['model2vec_seconds']:g} s; {d['tokens']:,} tokens; the same vocabulary: "
        f"{'yes' if d['same_vocabulary'] else 'no'}; largest difference between the two tables "
        f"{d['max_abs_table_difference']:.1e} (largest entry {d['max_abs_table_value']:.2f}). "
        f"{result['data']}; median of {result['settings']['rounds']} rounds; "
        f"{m['cpu']}, {m['cores']} cores, load average "
        f"{m['load_average'][0]:g} (a shared machine: the speeds are indicative).",
    ]
    return "\n".join(lines[:-1] + textwrap.wrap(lines[-1], 100))


def update_docs(result: dict) -> None:
    """Put `render_table` between the markers of docs/retrieval.md (re-read just before)."""
    text = DOCS.read_text(encoding="utf-8")
    if TABLE_START not in text or TABLE_END not in text:
        return
    head, rest = text.split(TABLE_START, 1)
    _, tail = rest.split(TABLE_END, 1)
    body = f"{TABLE_START}\n\n{render_table(result)}\n\n{TABLE_END}"
    write_text_atomic(DOCS, head + body + tail)


def distil(minilm: Path, work: Path) -> tuple[dict, Path, Path]:
    """Both distillations (one thread each); returns their record and the two directories."""
    from model2vec.distill import distill

    ours_dir, m2v_dir = work / "ours", work / "model2vec"
    t0 = time.perf_counter()
    summary = distill_static(minilm, ours_dir, dims=DIMS, sif_coefficient=SIF, threads=1)
    ours_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    ref = distill(str(minilm), pca_dims=DIMS, sif_coefficient=SIF, quantize_to="float32")
    m2v_s = time.perf_counter() - t0
    ref.save_pretrained(m2v_dir)
    from model2vec import StaticModel

    ours = StaticModel.from_pretrained(ours_dir)
    same_vocab = ours.tokens == ref.tokens
    diff = float(np.abs(ours.embedding - ref.embedding).max()) if same_vocab else None
    return (
        {
            "ours_seconds": round(ours_s, 1),
            "model2vec_seconds": round(m2v_s, 1),
            "tokens": summary["tokens"],
            "model2vec_tokens": len(ref.tokens),
            "same_vocabulary": same_vocab,
            "max_abs_table_difference": diff,
            "max_abs_table_value": float(np.abs(ref.embedding).max()),
            "pca_explained_variance": round(summary["explained_variance"], 4),
        },
        ours_dir,
        m2v_dir,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--work", type=Path, default=Path("/tmp/bertfamily-static-bench"))
    parser.add_argument(
        "--docs-only", action="store_true", help="Only write the docs table from the JSON."
    )
    args = parser.parse_args()
    if args.docs_only:
        update_docs(json.loads(OUT.read_text()))
        return
    torch.set_num_threads(1)
    from model2vec import StaticModel
    from sentence_transformers import SentenceTransformer

    minilm = fetch("all-MiniLM-L6-v2")
    pairs = read_sts(fetch("stsb") / "sts-test.csv")
    s1 = [p.sentence1 for p in pairs]
    s2 = [p.sentence2 for p in pairs]
    gold = [p.score for p in pairs]
    sentences = s1 + s2

    distillation, ours_dir, m2v_dir = distil(minilm, args.work)
    dense = SentenceEmbedder(minilm, threads=1)
    ours = SentenceEmbedder(ours_dir, threads=1)
    m2v = StaticModel.from_pretrained(m2v_dir)
    st_static = SentenceTransformer(str(m2v_dir), device="cpu")

    engines = {
        "MiniLM (bertfamily)": lambda t: dense.encode(t, batch_size=32),
        "ours-static (bertfamily)": lambda t: ours.encode(t, batch_size=STATIC_BATCH),
        "model2vec-static (model2vec)": lambda t: m2v.encode(
            t, batch_size=STATIC_BATCH, use_multiprocessing=False
        ),
        "model2vec-static (sentence-transformers)": lambda t: st_static.encode(
            t, batch_size=STATIC_BATCH, convert_to_numpy=True
        ),
    }
    quality = {}
    for name in ("MiniLM (bertfamily)", "ours-static (bertfamily)", "model2vec-static (model2vec)"):
        vecs = engines[name](sentences)
        m = similarity_metrics(vecs[: len(s1)], vecs[len(s1) :], gold)
        quality[name] = round(100 * m["spearman"], 2)
    # the same texts by our engine on model2vec's directory and by model2vec on ours
    cross = {
        "model2vec-static (bertfamily)": SentenceEmbedder(m2v_dir, threads=1).encode(sentences),
        "ours-static (model2vec)": StaticModel.from_pretrained(ours_dir).encode(sentences),
    }
    for name, vecs in cross.items():
        m = similarity_metrics(vecs[: len(s1)], vecs[len(s1) :], gold)
        quality[name] = round(100 * m["spearman"], 2)

    rounds: dict[str, list[float]] = {name: [] for name in engines}
    for _ in range(args.rounds):
        for name, run in engines.items():
            t0 = time.perf_counter()
            run(sentences)
            rounds[name].append(len(sentences) / (time.perf_counter() - t0))
    speed = {
        name: {"median": round(statistics.median(v), 1), "rounds": [round(x, 1) for x in v]}
        for name, v in rounds.items()
    }
    base = speed["MiniLM (bertfamily)"]["median"]
    for v in speed.values():
        v["x_minilm"] = round(v["median"] / base, 1)
    result = {
        "benchmark": "static embeddings distilled from all-MiniLM-L6-v2",
        "data": f"STS-B test (stsb resource): {len(pairs)} pairs, {len(sentences)} sentences",
        "settings": {
            "pca_dims": DIMS,
            "sif_coefficient": SIF,
            "remove_pattern": r"\[unused\d+\]",
            "dtype": "float32",
            "threads": 1,
            "static_batch_size": STATIC_BATCH,
            "minilm_batch_size": 32,
            "rounds": args.rounds,
        },
        "distillation": distillation,
        "sts_spearman_x100": quality,
        "sentences_per_second": speed,
        "machine": {
            "cpu": cpu_model(),
            "cores": os.cpu_count(),
            "load_average": [round(x, 2) for x in os.getloadavg()],
        },
        "versions": {
            "torch": torch.__version__,
            "model2vec": __import__("model2vec").__version__,
            "sentence_transformers": __import__("sentence_transformers").__version__,
        },
    }
    write_text_atomic(OUT, json.dumps(result, indent=2) + "\n")
    update_docs(result)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
