"""`bertfamily rerank`: a cross-encoder orders documents for a query."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from ..errors import InputError
from .common import (
    DEVICE_HELP,
    DTYPE_HELP,
    FORMAT_HELP,
    THREADS_HELP,
    App,
    check_format,
    compute_threads,
    console,
    fmt_score,
    handle_errors,
    model_path,
    read_lines,
    shorten,
    torch_device,
    torch_dtype,
)

commands = App()


@commands.command()
@handle_errors
def rerank(
    query: str = typer.Argument(..., metavar="QUERY", help="The query.", show_default=False),
    documents: list[str] = typer.Argument(
        None, metavar="DOCUMENT", help="Documents to order.", show_default=False
    ),
    input: Path | None = typer.Option(
        None, "--input", "-i", metavar="FILE", help="UTF-8 file, one document per line."
    ),
    model: str = typer.Option(
        ...,
        metavar="DIR|NAME",
        help="Cross-encoder directory (a sequence-classification model, plain or saved by "
        "sentence-transformers), resource name or cached org/name.",
    ),
    top_k: int | None = typer.Option(None, "--top-k", "-k", min=1, help="Keep the best K."),
    raw_scores: bool = typer.Option(
        False, "--raw-scores", help="Print logits, without the model's activation (Sigmoid)."
    ),
    batch_size: int = typer.Option(32, min=1, help="Pairs per forward pass."),
    dtype: str = typer.Option("fp32", help=DTYPE_HELP),
    fmt: str = typer.Option("table", "--format", help=FORMAT_HELP),
    threads: int = typer.Option(0, min=0, help=THREADS_HELP),
    device: str = typer.Option("auto", help=DEVICE_HELP),
):
    """Order DOCUMENTs (or --input lines) by a cross-encoder's score against QUERY, best first.
    JSONL rows carry "rank", "index" (0-based, in the order given), "score" and "text"."""
    compute_threads(threads)
    device = torch_device(device)
    from ..pipelines.reranking.rerank import Reranker

    check_format(fmt)
    docs = list(documents or []) + (read_lines(input) if input is not None else [])
    if not docs:
        raise InputError("give documents as arguments or --input FILE")
    reranker = Reranker(model_path(model), dtype=torch_dtype(dtype, device), device=device)
    ranked = reranker.rank(
        query, docs, top_k, return_documents=True, batch_size=batch_size, raw_scores=raw_scores
    )
    if fmt == "jsonl":
        rows = [
            {"rank": r, "index": d.corpus_id, "score": d.score, "text": d.text}
            for r, d in enumerate(ranked, 1)
        ]
        sys.stdout.write("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in rows))
        sys.stdout.flush()
        return
    table = Table("rank", "score", "index", "text", title=escape(f"query: {shorten(query)}"))
    for r, d in enumerate(ranked, 1):
        table.add_row(str(r), fmt_score(d.score, 4), str(d.corpus_id), escape(shorten(d.text)))
    console.print(table)
