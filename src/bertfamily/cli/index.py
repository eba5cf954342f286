"""`bertfamily index build|add`: the persisted indexes that `search --index` reads: dense
(FAISS flat or HNSW), binary (FAISS binary flat, float rescoring), sparse (SPLADE, an
inverted index) and bm25 (lexical, bm25s; no model)."""

from __future__ import annotations

from pathlib import Path

import typer

from ..errors import InputError
from .common import (
    DEVICE_HELP,
    DTYPE_HELP,
    RUNTIME_HELP,
    THREADS_HELP,
    App,
    check_runtime,
    compute_threads,
    err,
    handle_errors,
    load_embedder,
    model_path,
    require_extras,
    torch_device,
    torch_dtype,
)

commands = App()


index_app = App(
    help="A persisted index of a corpus (dense FAISS flat/HNSW, binary, sparse SPLADE, or "
    "lexical BM25): "
    "build, add; query with `bertfamily search --index DIR`."
)


commands.add_typer(index_app, name="index")


CORPUS_HELP = (
    "UTF-8 text file, one document per line (blank lines skipped; a document's id is its line "
    "number, from 1), .csv / .tsv (a header row) or .jsonl (one object a line), with "
    "--text-column and --id-column (default id: the line number), or .parquet / a directory of "
    "Parquet files (default id: the row number); - or /dev/stdin: text lines from standard input."
)
ID_COLUMN = typer.Option(
    "id", "--id-column", help="Column (CSV header name or JSON key) of the ids of a table."
)
TEXT_COLUMN = typer.Option(
    "text", "--text-column", help="Column (CSV header name or JSON key) of the texts."
)


def read_corpus(path: Path, id_column: str = "id", text_column: str = "text") -> tuple[list, list]:
    """(texts, ids) of a corpus (`data.table_io.read_id_texts`): plain lines (ids: 1-based line
    numbers), JSONL or Parquet rows; blank texts hold no document.

    Raises:
        DataError: an unreadable file, no text, or a table row without the text column or
            whose text is null, not a string or empty (line named); nothing is written.
    """
    from ..data.table_io import read_id_texts

    ids, texts = read_id_texts(path, id_column=id_column, text_column=text_column)
    return texts, ids


KIND_HELP = (
    "flat (exact search), hnsw (approximate, large corpora), binary (1 bit per dimension, the "
    "best candidates rescored in float), sparse (SPLADE vectors, an inverted index; --model "
    "is then a SPLADE directory), bm25 (lexical BM25 with bm25s's tokenizer; no --model) or "
    "colbert (late interaction: every token's vector, MaxSim; --model is a ColBERT directory)."
)
INDEX_KINDS = ("flat", "hnsw", "binary", "sparse", "bm25", "colbert")


#: The options of `search` and `index build|add` that only some index kinds use; one given on
#: the command line to a kind that does not use it is refused (`refuse_unused`), never ignored.
KIND_OPTIONS = (
    "model",
    "sparse_model",
    "rescore",
    "fusion",
    "hnsw_m",
    "ef_construction",
    "ef_search",
    "dtype",
    "device",
    "runtime",
    "batch_size",
)
GIVEN = ("COMMANDLINE", "ENVIRONMENT")  # click's sources of a value the user gave
#: Index kinds whose model is ``--model``'s kind of model, a dense embedder or a ColBERT one
#: ("corpus": `search --corpus`, embedded with --model).
_DENSE_MODEL_KINDS = ("corpus", "flat", "hnsw", "binary", "colbert")


def search_options(kinds: list[str]) -> set[str]:
    """The `KIND_OPTIONS` a `search` of ``kinds`` uses: the kind of each ``--index``, or
    ``["corpus"]`` for ``--corpus``. --model and --runtime: a dense, binary or ColBERT index,
    or one sparse index alone (its SPLADE model: --model or --sparse-model; SPLADE runs in
    torch, `index_encoder`); --sparse-model: a sparse index; --rescore: a binary index;
    --fusion: two or more indexes; --dtype, --device, --batch-size: any index with a model
    (every kind but bm25)."""
    used = set()
    if any(k != "bm25" for k in kinds):
        used |= {"dtype", "device", "batch_size"}
    if any(k in _DENSE_MODEL_KINDS for k in kinds):
        used |= {"model", "runtime"}
    if "sparse" in kinds:
        used |= {"sparse_model"} | ({"model", "runtime"} if len(kinds) == 1 else set())
    if "binary" in kinds:
        used.add("rescore")
    if len(kinds) > 1:
        used.add("fusion")
    return used


def build_options(kind: str, from_embeddings: bool = False, with_model: bool = True) -> set[str]:
    """The `KIND_OPTIONS` that `index build` (``from_embeddings``: with --embeddings; then the
    model, if any, only names the query model) or `index add` uses for an index of ``kind``:
    the HNSW settings for hnsw; the model and how it runs for every kind but bm25."""
    used = {"hnsw_m", "ef_construction", "ef_search"} if kind == "hnsw" else set()
    if kind != "bm25":
        used.add("model")
        if with_model:
            used |= {"dtype", "device", "runtime"}
        if not from_embeddings:
            used.add("batch_size")
    return used


def refuse_unused(ctx: typer.Context, used: set[str], what: str) -> None:
    """Refuse the `KIND_OPTIONS` of the command of ``ctx`` given on the command line (or by
    the environment) that ``what`` does not use (``used``).

    Raises:
        InputError: naming each such option and ``what``.
    """
    unused = [
        p.opts[0]
        for p in ctx.command.params
        if p.name in KIND_OPTIONS
        and p.name not in used
        and getattr(ctx.get_parameter_source(p.name), "name", None) in GIVEN
    ]
    if unused:
        it = "it" if len(unused) == 1 else "them"
        raise InputError(f"{', '.join(unused)}: not used by {what}; leave {it} out")


def described(kinds: list[str]) -> str:
    """``kinds`` in a message: "a flat index", "a search of --corpus", "a hybrid search of
    flat, sparse indexes"."""
    if kinds == ["corpus"]:
        return "a search of --corpus"
    if kinds == ["bm25"]:
        return "a bm25 index (it has no model)"
    if len(kinds) == 1:
        return f"a {kinds[0]} index"
    return f"a hybrid search of {', '.join(kinds)} indexes"


def sparse_index_model(model: str | None, sparse_model: str | None) -> str | None:
    """The SPLADE model of a `search` of one sparse index: --model or --sparse-model (either
    names it; the index refuses a model other than the one that built it).

    Raises:
        InputError: neither given, or both, naming different models.
    """
    if model is None and sparse_model is None:
        raise InputError("a sparse index needs its SPLADE model: give --model or --sparse-model")
    if model is not None and sparse_model is not None and model != sparse_model:
        raise InputError(
            f"a sparse index has one model: --model {model} and --sparse-model {sparse_model} "
            "differ; give one of them"
        )
    return model if sparse_model is None else sparse_model


def index_encoder(
    kind: str, model: str | None, dtype: str, device: str = "cpu", runtime: str = "torch"
):
    """The model of an index kind on ``device``: a `SparseEncoder` (SPLADE) for "sparse", None
    for "bm25" (no model), else a `SentenceEmbedder` (`common.load_embedder`, with
    ``runtime``).

    Raises:
        InputError: ``runtime`` other than torch for a sparse index (SPLADE runs in torch), or
            a model for a bm25 index.
    """
    if kind == "bm25":
        if model is not None:
            raise InputError("a bm25 index has no model: leave out --model")
        return None
    if kind == "colbert":  # late interaction: a ColBERT (PyLate) directory
        from ..pipelines.embedding.colbert import ColBERTEncoder

        if model is None:
            raise InputError("a colbert index needs --model DIR (a ColBERT directory, PyLate's)")
        if runtime != "torch":
            raise InputError(f"--runtime {runtime} is for dense models; ColBERT runs in torch")
        return ColBERTEncoder(model_path(model), dtype=torch_dtype(dtype, device), device=device)
    if kind != "sparse":
        return load_embedder(model, dtype, device=device, runtime=runtime)
    if runtime != "torch":
        raise InputError(f"--runtime {runtime} is for dense models; a SPLADE model runs in torch")
    from ..pipelines.embedding.sparse import SparseEncoder

    return SparseEncoder(model_path(model), dtype=torch_dtype(dtype, device), device=device)


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
    ctx: typer.Context,
    corpus: Path | None = typer.Option(None, metavar="FILE", help=CORPUS_HELP),
    embeddings: Path | None = typer.Option(
        None,
        "--embeddings",
        metavar="FILE|DIR",
        help="Instead of --corpus: the Parquet written by `embed --output x.parquet` (or the "
        "directory of shards of `embed --engine ray`); its vectors are used as they are and "
        "every row keeps its id.",
    ),
    output: Path = typer.Option(..., "--output", "-o", metavar="DIR", help="Index directory."),
    id_column: str = ID_COLUMN,
    text_column: str = TEXT_COLUMN,
    model: str | None = typer.Option(
        None, metavar="DIR|NAME", help="Embedding model (a SPLADE directory for --kind sparse)."
    ),
    kind: str = typer.Option("flat", help=KIND_HELP),
    hnsw_m: int = typer.Option(32, min=1, help="HNSW: neighbours per node."),
    ef_construction: int = typer.Option(200, min=1, help="HNSW: build-time candidates."),
    ef_search: int = typer.Option(128, min=1, help="HNSW: query-time candidates."),
    batch_size: int = typer.Option(32, min=1, help="Texts per forward pass."),
    dtype: str = typer.Option("auto", help=DTYPE_HELP),
    threads: int = typer.Option(0, min=0, help=THREADS_HELP),
    device: str = typer.Option("auto", help=DEVICE_HELP),
    runtime: str = typer.Option("torch", help=RUNTIME_HELP),
):
    """Embed a corpus into a new index directory, or index the vectors of --embeddings
    (replaces DIR atomically)."""
    compute_threads(threads)
    device = torch_device(device)
    from ..pipelines.retrieval import KIND_CLASSES, VectorIndex

    if kind not in INDEX_KINDS:
        raise InputError(f"--kind must be one of {', '.join(INDEX_KINDS)}, got {kind!r}")
    check_runtime(runtime, device=device, packages=False)  # packages: load_embedder
    require_extras(*(() if kind in ("sparse", "bm25") else ("faiss",)), tables=(corpus, embeddings))
    if (corpus is None) == (embeddings is None):
        raise InputError("give --corpus FILE or --embeddings FILE|DIR (one of them)")
    refuse_unused(
        ctx,
        build_options(kind, embeddings is not None, embeddings is None or model is not None),
        described([kind]) + (" from --embeddings" if embeddings is not None else ""),
    )
    settings = dict(kind=kind, hnsw_m=hnsw_m, ef_construction=ef_construction, ef_search=ef_search)
    kind_settings = settings if kind in ("flat", "hnsw") else {}  # binary and sparse: none
    if embeddings is not None:
        if kind not in ("flat", "hnsw"):
            raise InputError(f"--embeddings builds flat or hnsw indexes, not {kind}")
        embedder = index_encoder(kind, model, dtype, device, runtime) if model is not None else None
        index = VectorIndex.from_embeddings(
            embeddings, embedder=embedder, id_column=id_column, text_column=text_column, **settings
        )
        index.save(output)
        _wrote(index, kind, output)
        return
    texts, ids = read_corpus(corpus, id_column, text_column)
    encoder = index_encoder(kind, model, dtype, device, runtime)

    def build(progress):
        if encoder is None:  # bm25: texts, no model
            return KIND_CLASSES[kind].build(texts, ids, progress=progress)
        return KIND_CLASSES[kind].build(
            encoder, texts, ids, batch_size=batch_size, progress=progress, **kind_settings
        )

    index = _with_bar(len(texts), build)
    index.save(output)
    _wrote(index, kind, output)


def _wrote(index, kind: str, output: Path) -> None:
    """Say what `index build` wrote, naming the FAISS file other tools read (docs/retrieval.md):
    ``DIR/index.faiss`` (``faiss.read_index``; binary: ``faiss.read_index_binary``)."""
    if kind == "bm25":
        terms = sum(1 for w in index.retriever.vocab_dict if w)  # not bm25s's "" entry
        err.print(f"wrote {len(index)} documents, {terms} terms (bm25) to {output}")
        return
    if kind == "colbert":
        err.print(
            f"wrote {len(index)} documents, {len(index.vectors)} token vectors × "
            f"{index.identity.dimension} (colbert) to {output}"
        )
        return
    where = "" if kind == "sparse" else f"; FAISS file: {output / 'index.faiss'}"
    err.print(f"wrote {len(index)} × {index.identity.dimension} ({kind}) to {output}{where}")


@index_app.command("add")
@handle_errors
def index_add(
    ctx: typer.Context,
    index_dir: Path = typer.Option(..., "--index", metavar="DIR", help="Index directory."),
    corpus: Path = typer.Option(..., metavar="FILE", help=CORPUS_HELP),
    id_column: str = ID_COLUMN,
    text_column: str = TEXT_COLUMN,
    model: str | None = typer.Option(
        None, metavar="DIR|NAME", help="The index's model (a SPLADE directory for sparse)."
    ),
    batch_size: int = typer.Option(32, min=1, help="Texts per forward pass."),
    dtype: str = typer.Option("auto", help=DTYPE_HELP),
    threads: int = typer.Option(0, min=0, help=THREADS_HELP),
    device: str = typer.Option("auto", help=DEVICE_HELP),
    runtime: str = typer.Option("torch", help=RUNTIME_HELP),
):
    """Append a corpus to an index of any kind (the model must be the one that built it); the
    new version replaces DIR atomically."""
    compute_threads(threads)
    device = torch_device(device)
    import json

    from ..pipelines.retrieval import open_index

    check_runtime(runtime, device=device)
    require_extras(tables=(corpus,))
    index = open_index(index_dir)
    refuse_unused(ctx, build_options(index_kind(index)), described([index_kind(index)]))
    texts, ids = read_corpus(corpus, id_column, text_column)
    taken = set(map(json.dumps, index.ids))
    clash = next((i for i in ids if json.dumps(i) in taken), None)
    if clash is not None:
        where = "line" if corpus.suffix not in (".jsonl", ".parquet") else "id"
        raise InputError(
            f"{corpus}: {where} {clash!r} is already an id in {index_dir} (a plain text corpus "
            'numbers its documents by line); add a .jsonl corpus whose rows give new "id"s'
        )
    encoder = index_encoder(index_kind(index), model, dtype, device, runtime)
    if encoder is None:  # bm25: texts, no model
        index.add(texts, ids)
    else:
        _with_bar(
            len(texts),
            lambda progress: index.add(
                encoder, texts, ids, batch_size=batch_size, progress=progress
            ),
        )
    index.save(index_dir)
    err.print(f"{index_dir}: {len(index)} rows")


def index_kind(index) -> str:
    """ "flat", "hnsw", "binary", "sparse" or "bm25" of an opened index (`retrieval.Index.kind`)."""
    return index.kind
