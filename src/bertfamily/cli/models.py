"""Running models: `fetch`, `embed`, `search`, `fill-mask`."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .common import console, err, handle_errors, read_lines, torch_dtype

commands = typer.Typer()


def _embedder(model: str | None, dtype: str):
    from ..fetch import resolve_model
    from ..pipelines.embed import SentenceEmbedder

    return SentenceEmbedder(resolve_model(model), dtype=torch_dtype(dtype))


def _encode_with_progress(embedder, texts: list[str], batch_size: int):
    if len(texts) < 4 * batch_size:
        return embedder.encode(texts, batch_size=batch_size)
    with Progress(
        TextColumn("embedding"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=err
    ) as bar:
        task = bar.add_task("embed", total=len(texts))
        return embedder.encode(
            texts, batch_size=batch_size, progress=lambda n: bar.advance(task, n)
        )


@commands.command()
@handle_errors
def fetch(
    name: list[str] = typer.Argument(
        None, help="Resources to fetch (default: the default model). See --list."
    ),
    list_: bool = typer.Option(False, "--list", help="List the known resources."),
    force: bool = typer.Option(
        False, help="Delete the cached entry and download it again (repairs a corrupt entry)."
    ),
    verify: bool = typer.Option(
        False,
        "--verify",
        help="Only check cached entries (sha256 of every file), never download; "
        "default: every cached resource. Exits 1 when one fails.",
    ),
):
    """Download a registered resource (weights, corpora) into the cache, sha256-checked; a cached
    entry is checked file by file against its manifest."""
    from .. import fetch as f

    if list_:
        table = Table("name", "package", "description")
        for r in f.RESOURCES.values():
            table.add_row(r.name, f"{r.package}=={r.version}", r.description)
        console.print(table)
        console.print(f"cache: {f.cache_dir()}")
        return
    if verify:
        if force:
            raise ValueError("--verify only checks the cache; it cannot be combined with --force")
        names = name or f.cached()
        if not names:
            console.print(f"nothing cached in {f.cache_dir()}")
        failed = 0
        for n in names:
            try:
                console.print(f"{n}: ok ({f.verify(n)})")
            except f.FetchError as e:
                failed += 1
                err.print("[bold red]error:[/]", escape(str(e)))
        if failed:
            raise typer.Exit(code=1)
        return
    for n in name or [f.DEFAULT_MODEL]:
        console.print(f"{n}: {f.fetch(n, force=force, verify=True)}")


@commands.command()
@handle_errors
def embed(
    sentences: list[str] = typer.Argument(None, help="Sentences to embed."),
    input: Path | None = typer.Option(
        None, "--input", "-i", help="Text file, one sentence per line."
    ),
    output: Path | None = typer.Option(
        None, "--output", "-o", help="Write embeddings to .npy or .jsonl."
    ),
    model: str | None = typer.Option(
        None,
        help="Model directory or resource name (default: all-MiniLM-L6-v2, fetched on first use).",
    ),
    batch_size: int = typer.Option(32, min=1),
    dtype: str = typer.Option("fp32", help="fp32 or bf16."),
):
    """Sentence embeddings; prints the cosine-similarity matrix (or writes --output)."""
    import numpy as np

    from ..files import atomic_write
    from ..pipelines.embed import cosine_matrix

    texts = list(sentences or []) + (read_lines(input) if input else [])
    if not texts:
        raise ValueError("give sentences as arguments or --input FILE")
    if output is not None and output.suffix not in (".npy", ".jsonl"):
        raise ValueError(f"--output must end in .npy or .jsonl, got {output.name}")
    embedder = _embedder(model, dtype)
    vectors = _encode_with_progress(embedder, texts, batch_size)
    if output is not None:
        if output.suffix == ".npy":

            def save(tmp: Path) -> None:
                with open(tmp, "wb") as fh:
                    np.save(fh, vectors)

            atomic_write(output, save)
        else:
            body = "".join(
                json.dumps({"text": t, "embedding": v.tolist()}) + "\n"
                for t, v in zip(texts, vectors)
            )
            atomic_write(output, lambda tmp: tmp.write_text(body, encoding="utf-8"))
        console.print(f"wrote {len(texts)} × {vectors.shape[1]} embeddings to {output}")
        return
    sims = cosine_matrix(vectors, vectors)
    if len(texts) > 12:
        console.print(
            f"{len(texts)} embeddings of dimension {vectors.shape[1]}; use --output to save them"
        )
        return
    table = Table(title=f"cosine similarity ({embedder.path.name}, dim {vectors.shape[1]})")
    table.add_column("#")
    table.add_column("sentence", max_width=40)
    for j in range(len(texts)):
        table.add_column(str(j), justify="right")
    for i, t in enumerate(texts):
        table.add_row(str(i), t, *[f"{sims[i, j]:.3f}" for j in range(len(texts))])
    console.print(table)


@commands.command()
@handle_errors
def search(
    query: list[str] = typer.Argument(..., help="One or more queries."),
    corpus: Path = typer.Option(..., help="Text file, one document per line."),
    top_k: int = typer.Option(5, "--top-k", "-k", min=1),
    model: str | None = typer.Option(None, help="Model directory or resource name."),
    batch_size: int = typer.Option(32, min=1),
    dtype: str = typer.Option("fp32", help="fp32 or bf16."),
):
    """Semantic search: the corpus lines closest to each query."""
    from ..pipelines.embed import semantic_search

    docs = read_lines(corpus)
    embedder = _embedder(model, dtype)
    corpus_vectors = _encode_with_progress(embedder, docs, batch_size)
    results = semantic_search(embedder, query, docs, top_k=top_k, corpus_embeddings=corpus_vectors)
    for q, hits in zip(query, results):
        table = Table("rank", "score", "line", "text", title=f"query: {q}")
        for rank, h in enumerate(hits, 1):
            table.add_row(str(rank), f"{h.score:.4f}", str(h.index + 1), h.text)
        console.print(table)


@commands.command("fill-mask")
@handle_errors
def fill_mask(
    text: list[str] = typer.Argument(..., help="Texts with [MASK] or <mask>."),
    model: Path = typer.Option(..., help="Model directory with an MLM head."),
    top_k: int = typer.Option(5, "--top-k", "-k", min=1),
):
    """The most likely tokens at each mask."""
    from ..pipelines.fill_mask import FillMask

    pipe = FillMask(model)
    for t in text:
        for m, preds in enumerate(pipe(t, top_k=top_k)):
            table = Table(
                "rank",
                "token",
                "score",
                "sequence",
                title=f"{t}" + (f" (mask {m + 1})" if m else ""),
            )
            for r, p in enumerate(preds, 1):
                table.add_row(str(r), p.token, f"{p.score:.4f}", p.sequence)
            console.print(table)
