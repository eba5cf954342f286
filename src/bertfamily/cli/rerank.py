"""`bertfamily rerank`: a cross-encoder (or a ColBERT model, by MaxSim) orders documents for a
query."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from ..data.text_input import read_text_lines
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
        None,
        "--input",
        "-i",
        metavar="FILE",
        help="UTF-8 file, one document per line (- for standard input).",
    ),
    model: str = typer.Option(
        ...,
        metavar="DIR|NAME",
        help="Cross-encoder directory (a sequence-classification model, plain or saved by "
        "sentence-transformers), or a ColBERT directory (PyLate's: MaxSim scores), resource "
        "name or cached org/name.",
    ),
    top_k: int | None = typer.Option(None, "--top-k", "-k", min=1, help="Keep the best K."),
    raw_scores: bool = typer.Option(
        False, "--raw-scores", help="Print logits, without the model's activation (Sigmoid)."
    ),
    batch_size: int = typer.Option(32, min=1, help="Pairs per forward pass."),
    dtype: str = typer.Option("auto", help=DTYPE_HELP),
    fmt: str = typer.Option("table", "--format", help=FORMAT_HELP),
    threads: int = typer.Option(0, min=0, help=THREADS_HELP),
    device: str = typer.Option("auto", help=DEVICE_HELP),
):
    """Order DOCUMENTs (or --input lines) by a cross-encoder's score against QUERY, best first.
    JSONL rows carry "rank", "line" (from 1: the DOCUMENT arguments first, then the file's
    lines as an editor numbers them, blank lines counted but never ranked), "score", "text"."""
    compute_threads(threads)
    device = torch_device(device)
    from ..pipelines.embedding.colbert import ColBERTEncoder, is_colbert_directory
    from ..pipelines.reranking.rerank import Reranker

    check_format(fmt)
    # every item keeps its 1-based number: arguments, then each line of the file (blank too)
    numbered = [
        (n, d)
        for n, d in enumerate(
            list(documents or []) + (read_text_lines(input, blank="keep") if input else []), 1
        )
        if d.strip()
    ]
    if not numbered:
        raise InputError("give documents as arguments or --input FILE")
    path = model_path(model)
    if is_colbert_directory(path):  # late interaction: MaxSim, no activation to leave out
        reranker = ColBERTEncoder(path, dtype=torch_dtype(dtype, device), device=device)
        ranked = reranker.rank(query, [d for _, d in numbered], top_k, True, batch_size=batch_size)
    else:
        reranker = Reranker(path, dtype=torch_dtype(dtype, device), device=device)
        ranked = reranker.rank(
            query,
            [d for _, d in numbered],
            top_k,
            return_documents=True,
            batch_size=batch_size,
            raw_scores=raw_scores,
        )
    rows = [
        {"rank": r, "line": numbered[d.corpus_id][0], "score": d.score, "text": d.text}
        for r, d in enumerate(ranked, 1)
    ]
    if fmt == "jsonl":
        sys.stdout.write("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in rows))
        sys.stdout.flush()
        return
    table = Table("rank", "score", "line", "text", title=escape(f"query: {shorten(query)}"))
    for x in rows:
        table.add_row(
            str(x["rank"]), fmt_score(x["score"], 4), str(x["line"]), escape(shorten(x["text"]))
        )
    console.print(table)
