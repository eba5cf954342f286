"""`bertfamily index build|add`: the persisted vector index (FAISS) that `search --index` reads."""

from __future__ import annotations

from pathlib import Path

import typer

from ..errors import InputError
from .common import (
    DTYPE_HELP,
    App,
    err,
    handle_errors,
    model_path,
    torch_dtype,
)

commands = App()


index_app = App(
    help="A persisted vector index of a corpus (FAISS): build, add; query with "
    "`bertfamily search --index DIR`."
)


commands.add_typer(index_app, name="index")


CORPUS_HELP = (
    "UTF-8 text file, one document per line (blank lines skipped; a document's id is its "
    'line number, from 1), or .jsonl with {"id", "text"} per line (default id: the line number).'
)


def read_corpus(path: Path) -> tuple[list[str], list | None]:
    """(texts, ids) of a corpus file: plain lines, or JSONL rows with "id" and "text". Blank
    lines (and JSONL rows with a blank text) hold no document; a document's id is its 1-based
    line number in the file unless its JSONL row gives an "id".

    Raises:
        ValueError: an unreadable file, no text, or JSONL rows that are not objects with a
            "text" string (null, a list, an object, a bool, empty or only whitespace): every
            such row is counted and the first three are named by line.
    """
    import json

    if not path.is_file():
        raise InputError(f"cannot read corpus {path}: it does not exist or is a directory")
    try:
        lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"cannot read {path}: {e}") from e
    if not any(lines):
        raise InputError(f"corpus {path} is empty (no text on any line)")
    if path.suffix != ".jsonl":
        kept = [(n, t) for n, t in enumerate(lines, 1) if t]
        return [t for _, t in kept], [n for n, _ in kept]
    texts, ids, bad = [], [], []
    for n, line in enumerate(lines, 1):
        if not line:
            continue
        try:
            row = json.loads(line)
        except ValueError as e:
            bad.append(f"line {n}: not JSON ({e})")
            continue
        if not isinstance(row, dict) or "text" not in row:
            bad.append(f'line {n}: not a JSON object with "text"')
            continue
        text = row["text"]
        if isinstance(text, bool) or not isinstance(text, (str, int, float)):
            what = "null" if text is None else f"a {type(text).__name__}"
            bad.append(f'line {n}: "text" is {what}, not a string')
            continue
        text = str(text)
        if not text.strip():
            bad.append(f'line {n}: "text" is empty')
            continue
        texts.append(text)
        ids.append(row.get("id", n))
    if bad:
        more = f" (and {len(bad) - 3} more)" if len(bad) > 3 else ""
        raise InputError(
            f"{path}: {len(bad)} rows cannot be indexed: {'; '.join(bad[:3])}{more}; "
            "nothing was written"
        )
    if not texts:
        raise InputError(f"corpus {path} holds no text (every row is blank)")
    return texts, ids


def _index_embedder(model: str | None, dtype: str):
    from ..pipelines.embed import SentenceEmbedder

    return SentenceEmbedder(model_path(model), dtype=torch_dtype(dtype))


def _with_bar(total: int, work):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from .common import err as console_err

    with Progress(
        TextColumn("embedding"), BarColumn(), MofNCompleteColumn(), console=console_err
    ) as bar:
        task = bar.add_task("embed", total=total)
        return work(lambda n: bar.advance(task, n))


@index_app.command("build")
@handle_errors
def index_build(
    corpus: Path = typer.Option(..., metavar="FILE", help=CORPUS_HELP),
    output: Path = typer.Option(..., "--output", "-o", metavar="DIR", help="Index directory."),
    model: str | None = typer.Option(None, metavar="DIR|NAME", help="Embedding model."),
    kind: str = typer.Option("flat", help="flat (exact search) or hnsw (approximate, large)."),
    hnsw_m: int = typer.Option(32, min=1, help="HNSW: neighbours per node."),
    ef_construction: int = typer.Option(200, min=1, help="HNSW: build-time candidates."),
    ef_search: int = typer.Option(128, min=1, help="HNSW: query-time candidates."),
    batch_size: int = typer.Option(32, min=1, help="Texts per forward pass."),
    dtype: str = typer.Option("auto", help=DTYPE_HELP),
):
    """Embed a corpus into a new index directory (replaces DIR atomically)."""
    from ..pipelines.index import VectorIndex

    texts, ids = read_corpus(corpus)
    embedder = _index_embedder(model, dtype)
    index = _with_bar(
        len(texts),
        lambda progress: VectorIndex.build(
            embedder,
            texts,
            ids,
            batch_size=batch_size,
            progress=progress,
            kind=kind,
            hnsw_m=hnsw_m,
            ef_construction=ef_construction,
            ef_search=ef_search,
        ),
    )
    index.save(output)
    err.print(f"wrote {len(index)} × {index.identity.dimension} ({kind}) to {output}")


@index_app.command("add")
@handle_errors
def index_add(
    index_dir: Path = typer.Option(..., "--index", metavar="DIR", help="Index directory."),
    corpus: Path = typer.Option(..., metavar="FILE", help=CORPUS_HELP),
    model: str | None = typer.Option(None, metavar="DIR|NAME", help="The index's model."),
    batch_size: int = typer.Option(32, min=1, help="Texts per forward pass."),
    dtype: str = typer.Option("auto", help=DTYPE_HELP),
):
    """Append a corpus to an index (the model must be the one that built it); the new version
    replaces DIR atomically."""
    import json

    from ..pipelines.index import VectorIndex

    index = VectorIndex.load(index_dir)
    texts, ids = read_corpus(corpus)
    taken = set(map(json.dumps, index.ids))
    clash = next((i for i in ids if json.dumps(i) in taken), None)
    if clash is not None:
        where = "line" if corpus.suffix != ".jsonl" else "id"
        raise InputError(
            f"{corpus}: {where} {clash!r} is already an id in {index_dir} (a plain text corpus "
            'numbers its documents by line); add a .jsonl corpus whose rows give new "id"s'
        )
    embedder = _index_embedder(model, dtype)
    _with_bar(
        len(texts),
        lambda progress: index.add(embedder, texts, ids, batch_size=batch_size, progress=progress),
    )
    index.save(index_dir)
    err.print(f"{index_dir}: {len(index)} rows")
