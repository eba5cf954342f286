"""`bertfamily evaluate`: score a model on held-out data without training it."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from .common import (
    DEVICE_HELP,
    THREADS_HELP,
    App,
    compute_threads,
    handle_errors,
    print_json,
    torch_device,
)

commands = App()


@commands.command()
@handle_errors
def evaluate(
    kind: str = typer.Argument(
        ...,
        metavar="KIND",
        help="sts (embedding model) | sts-rerank (cross-encoder scores) | retrieval "
        "(embedding model; --data a BEIR directory: corpus.jsonl, queries.jsonl, qrels.tsv).",
    ),
    model: str | None = typer.Option(
        None, help="Model: directory, resource or cached org/name (default all-MiniLM-L6-v2)."
    ),
    data: str = typer.Option(
        ...,
        help="sentence1,sentence2,score file (CSV/TSV/JSONL), or stsb:train|dev|test.",
    ),
    format: str | None = typer.Option(None, help="'sts' for STS Benchmark TSV files."),
    batch_size: int = typer.Option(64, min=1, help="Texts per forward pass."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Also write the JSON here."),
    threads: int = typer.Option(0, min=0, help=THREADS_HELP),
    device: str = typer.Option("auto", help=DEVICE_HELP),
):
    """STS: Spearman and Pearson of cosine (or the reranker's score) vs the gold scores.
    Retrieval: NDCG@10, MRR@10, Recall@1/3/5/10 and MAP@100 of exact cosine search."""
    compute_threads(threads)
    device = torch_device(device)
    from ..data.pairs import read_pairs
    from ..evaluation.metrics import evaluate_sts, regression_metrics
    from ..files import write_text_atomic
    from ..notices import waiting
    from .common import model_path as resolve_model

    if kind not in ("sts", "sts-rerank", "retrieval"):
        raise typer.BadParameter(f"KIND {kind!r}: expected sts, sts-rerank or retrieval")
    path = resolve_model(model)
    if kind == "retrieval":
        from ..data.pairs import read_retrieval
        from ..evaluation.metrics import evaluate_retrieval
        from ..pipelines.embedding.embed import SentenceEmbedder

        queries, corpus, qrels = read_retrieval(data)
        embedder = SentenceEmbedder(path, dtype="fp32", device=device)
        names = embedder.prompts

        def embed(prompt_name):
            name = prompt_name if prompt_name in names else None
            return lambda t: embedder.encode(t, batch_size=batch_size, prompt_name=name)

        with waiting(f"embedding {len(queries):,} queries and {len(corpus):,} documents"):
            metrics = evaluate_retrieval(embed("query"), embed("document"), queries, corpus, qrels)
        result = {"kind": kind, "model": str(path), "data": str(data), "queries": len(queries),
                  "documents": len(corpus), **metrics}  # fmt: skip
        if output is not None:
            write_text_atomic(output, json.dumps(result, indent=2) + "\n")
        print_json(result)  # stdout: this JSON only
        return
    table = read_pairs(data, format=format)
    if table.labels is None or len(table.columns) != 2:
        raise typer.BadParameter(f"{data}: needs two text columns and a score column")
    if kind == "sts":
        from ..pipelines.embedding.embed import SentenceEmbedder

        embedder = SentenceEmbedder(path, dtype="fp32", device=device)
        with waiting(f"embedding {2 * len(table):,} sentences of {len(table):,} pairs"):
            result = evaluate_sts(
                lambda t: embedder.encode(t, batch_size=batch_size),
                table.column(0),
                table.column(1),
                table.labels,
            )
    else:
        from ..pipelines.reranking.rerank import Reranker

        reranker = Reranker(path, device=device)
        with waiting(f"scoring {len(table):,} pairs"):
            scores = reranker.predict(
                list(zip(table.column(0), table.column(1))), batch_size=batch_size
            )
        m = regression_metrics(table.labels, scores)
        result = {"spearman": m["spearman"], "pearson": m["pearson"]}
    result = {"kind": kind, "model": str(path), "data": str(data), "rows": len(table), **result}
    if output is not None:
        write_text_atomic(output, json.dumps(result, indent=2) + "\n")
    print_json(result)  # stdout: this JSON only
