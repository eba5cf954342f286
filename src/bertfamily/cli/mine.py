"""`bertfamily mine-negatives`: hard negatives for (anchor, positive) training data."""

from __future__ import annotations

import csv
import io
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


@commands.command("mine-negatives")
@handle_errors
def mine_negatives(
    input: Path = typer.Option(..., "--input", "-i", help="anchor,positive file (CSV/TSV/JSONL)."),
    output: Path = typer.Option(..., "--output", "-o", help="CSV: anchor,positive,negative_1.."),
    model: str | None = typer.Option(
        None, help="Embedding model: directory, resource or cached org/name."
    ),
    corpus: Path | None = typer.Option(
        None, help="Candidate texts, one a line (default: the data's positives)."
    ),
    index: Path | None = typer.Option(
        None,
        help="A built index (bertfamily index build) whose texts are the candidates, searched "
        "as they are (made by --model); instead of --corpus.",
    ),
    num_negatives: int = typer.Option(3, min=1, help="Negatives per row."),
    range_min: int = typer.Option(0, min=0, help="Skip this many of the most similar."),
    range_max: int = typer.Option(100, min=1, help="Consider candidates ranked below this."),
    max_score: float | None = typer.Option(None, help="Skip candidates more similar than this."),
    min_score: float | None = typer.Option(None, help="Skip candidates less similar than this."),
    absolute_margin: float | None = typer.Option(
        None, help="Keep only candidates with cos <= cos(anchor, positive) - margin."
    ),
    relative_margin: float | None = typer.Option(
        None, help="Keep only candidates with cos <= cos(anchor, positive) * (1 - margin)."
    ),
    batch_size: int = typer.Option(64, min=1, help="Texts per forward pass."),
    threads: int = typer.Option(0, min=0, help=THREADS_HELP),
    device: str = typer.Option("auto", help=DEVICE_HELP),
):
    """For each (anchor, positive), the most similar non-positives of the corpus (exact
    cosine search in a FAISS index: built in memory, or --index), under margins and within a
    rank range (sentence-transformers' mine_hard_negatives); rows with too few are dropped."""
    compute_threads(threads)
    device = torch_device(device)
    from ..data.pairs import read_pairs
    from ..files import write_text_atomic
    from ..pipelines.embedding.embed import SentenceEmbedder
    from ..pipelines.retrieval.mining import MiningOptions, mine_hard_negatives
    from .common import model_path as resolve_model
    from .common import read_lines

    table = read_pairs(input)
    if len(table.columns) < 2:
        raise typer.BadParameter(f"{input}: needs anchor and positive columns")
    if corpus is not None and index is not None:
        raise typer.BadParameter("give --corpus or --index, not both")
    texts = None
    if corpus is not None:
        texts = read_lines(corpus)  # non-blank lines, each stripped
    embedder = SentenceEmbedder(resolve_model(model), dtype="fp32", device=device)
    built = None
    if index is not None:
        from ..pipelines.retrieval.dense import VectorIndex

        built = VectorIndex.load(index)
        built.check_model(embedder)
    options = MiningOptions(
        num_negatives, range_min, range_max, max_score, absolute_margin, relative_margin,
        min_score=min_score,
    )  # fmt: skip
    rows, counts = mine_hard_negatives(
        lambda t: embedder.encode(t, batch_size=batch_size),
        [(r[0], r[1]) for r in table.rows],
        texts,
        options,
        index=built,
    )
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["anchor", "positive", *(f"negative_{i + 1}" for i in range(num_negatives))])
    writer.writerows(rows)
    write_text_atomic(output, buf.getvalue())
    print_json({**counts, "output": str(output)})
