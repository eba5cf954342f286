"""`bertfamily embed` and `bertfamily search`: sentence embeddings and semantic search."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..errors import InputError
from .common import (
    DEVICE_HELP,
    DTYPE_HELP,
    FORMAT_HELP,
    QUANTIZE_HELP,
    RUNTIME_HELP,
    SHOWN_CHARS,
    THREADS_HELP,
    App,
    check_format,
    check_runtime,
    compute_threads,
    console,
    err,
    fmt_score,
    handle_errors,
    load_embedder,
    model_path,
    require_extras,
    shorten,
    torch_device,
    torch_dtype,
    write_out,
)

commands = App()


def read_input_lines(path: Path) -> list[str]:
    """Every line of a UTF-8 text file, stripped; an empty line stays (as ""), so line i of the
    file is item i. Lines end at \n (or \r\n) only, as `data.tables.text_lines` and every
    other reader count them (``wc -l``, ``sed -n Np``): a lone \r, \u2028 or \x0c stays part
    of its line. A missing, unreadable, non-UTF-8 or empty file is an error naming it, and so
    is a table (.csv/.tsv/.jsonl/.parquet), whose rows are not lines of text.
    """
    from ..data.table_io import table_kind
    from ..data.text_input import check_input_file, read_text_lines

    check_input_file(path)  # a file, or standard input (-)
    kind = table_kind(path)
    if kind != "text":
        raise InputError(
            f"{path} is a {kind.upper()} table, and this reads plain text, one document a "
            "line: build an index of its text column (bertfamily index build --corpus "
            f"{path.name} --text-column NAME) and search --index, or pass a .txt file"
        )
    return read_text_lines(path, blank="keep")  # the one reader (data.text_input)


def _report_truncation(embedder, texts: list[str], what: str = "inputs") -> None:
    """Warn on stderr when the last `encode` cut texts to the model's limit."""
    n = getattr(embedder, "last_truncated", 0)
    if not n:
        return
    # no re-tokenising: the texts are whole here (a 10 MB line would cost gigabytes)
    rows = [r for r in getattr(embedder, "last_truncated_rows", []) if r < len(texts)]
    longest = ""
    if rows:
        r = max(rows, key=lambda i: len(texts[i]))
        shown = ", ".join(str(i + 1) for i in rows[:5]) + (", ..." if len(rows) > 5 else "")
        longest = f" (number {shown}; longest: {len(texts[r]):,} characters, number {r + 1})"
    err.print(
        f"[yellow]warning:[/] {n} of {len(texts)} {what} were longer than the model's limit of "
        f"{embedder.max_length} tokens and were truncated{longest}; only their first "
        f"{embedder.max_length} tokens were embedded"
    )


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


# embed's options that take more than a line, declared once here to keep its signature short
SENTENCES_ARGUMENT = typer.Argument(
    None, metavar="SENTENCE", help="Sentences to embed.", show_default=False
)
INPUT_OPTION = typer.Option(
    None,
    "--input",
    "-i",
    metavar="FILE",
    help="UTF-8 text file, one sentence per line (- or /dev/stdin: standard input). Every "
    "line gives exactly one output row (an empty line gives the embedding of the empty "
    "string), so row i is line i+1. Or a "
    "table: .csv, .tsv, .jsonl, .parquet or a directory of Parquet files (--id-column, "
    "--text-column; default id: the line, or the Parquet row number; "
    "a row whose text is null, not a string or empty refuses the table, every such row "
    "counted); with --output FILE.parquet a text file's ids are its line "
    "numbers (blank lines skipped).",
)
OUTPUT_OPTION = typer.Option(
    None,
    "--output",
    "-o",
    metavar="FILE|DIR",
    help="Write embeddings to FILE.npy (rows in input order) or FILE.jsonl "
    '({"line", "text", "embedding"} a line, "line" counting from 1); or, with --input, to a '
    "directory (a path without .npy/.jsonl, or an existing directory): bulk mode, which "
    "streams a file of any "
    "size in shards of --shard-size lines (shard-00000.npy, … and manifest.json), resumes "
    "after the finished shards when run again, and splits the shards across processes "
    "under torchrun. FILE.parquet: one (id, vector) row per text, streamed (any input "
    "kind); a SPLADE model writes (id, sparse_indices, sparse_values). With --engine ray: "
    "a directory of Parquet shards written by Ray Data.",
)
TEXT_COLUMN_OPTION = typer.Option("text", "--text-column", help="Table input: column of the texts.")
WITH_TEXT_OPTION = typer.Option(
    False, "--with-text", help="Parquet output: keep a text column beside id and vector."
)
ENGINE_OPTION = typer.Option(
    "local",
    help="local (this process) or ray (Ray Data: --input a Parquet/JSONL table, local or "
    's3://…, --output DIR; needs pip install "bertfamily[ray]"; joins a running cluster '
    "when RAY_ADDRESS is set, else starts one on this machine).",
)
CONCURRENCY_OPTION = typer.Option(
    None,
    min=1,
    help="--engine ray: embedding actors, each loads the model once  [default: sized from the "
    "cluster: one per CPU, less one CPU left to Ray's read tasks; 2 CPUs: 1]",
    show_default=False,
)
ACTOR_CPUS_OPTION = typer.Option(
    None,
    "--actor-cpus",
    min=0.01,
    help="--engine ray: CPUs each actor reserves; a setting whose actors leave Ray's read tasks "
    "no CPU is refused  [default: sized from the cluster: 1, or 0.5 on a 1-CPU cluster]",
    show_default=False,
)
STALL_TIMEOUT_OPTION = typer.Option(
    300.0,
    "--stall-timeout",
    min=1.0,
    metavar="SECONDS",
    help="--engine ray: stop with an error (naming the stalled Ray Data operator) when no batch "
    "of rows has finished for this long.",
)
MODEL_OPTION = typer.Option(
    None,
    metavar="DIR|NAME",
    help="Model directory, resource name (default: all-MiniLM-L6-v2, fetched on first use), "
    "or org/name of a model in the local Hugging Face cache.",
)
SHARD_SIZE_OPTION = typer.Option(
    None,
    "--shard-size",
    min=1,
    metavar="LINES",
    help="Bulk mode (--output DIR): lines per shard; memory grows with it, not with the "
    "file  [default: 10000]",
    show_default=False,
)
DIMENSIONS_OPTION = typer.Option(
    None,
    min=1,
    help="Keep the first N coordinates, renormalised (Matryoshka models).",
    show_default=False,
)
PRECISION_OPTION = typer.Option(
    "float32",
    help="float32, int8, uint8, binary or ubinary (sentence-transformers' "
    "quantize_embeddings; int8 ranges from these rows). With --output FILE.parquet: a "
    "vector_<precision> column beside vector (ranges of every row, in the metadata). Not "
    "for bulk shards or --engine ray.",
)

ADAPTER_OPTION = typer.Option(
    None,
    metavar="DIR",
    help="A PEFT LoRA adapter directory trained on --model (e.g. by finetune --lora), merged "
    "into its weights.",
)
NPY_JSONL = (".npy", ".jsonl")


OUTPUT_VALUE_OPTION = typer.Option(
    None,
    "--output-value",
    help="A BGE-M3 directory (an XLM-R model with colbert_linear.pt and sparse_linear.pt): "
    "dense, sparse, colbert or all, from one encoder pass, as JSONL rows (line, text and "
    '"dense": H floats, "sparse": {"token id": weight}, "colbert": one D-float vector per '
    "token after the first) on standard output or to --output FILE.jsonl.",
    show_default=False,
)


@commands.command()
@handle_errors
def embed(
    sentences: list[str] = SENTENCES_ARGUMENT,
    input: str | None = INPUT_OPTION,
    output: str | None = OUTPUT_OPTION,
    id_column: str = typer.Option("id", "--id-column", help="Table input: column of the ids."),
    text_column: str = TEXT_COLUMN_OPTION,
    with_text: bool = WITH_TEXT_OPTION,
    engine: str = ENGINE_OPTION,
    concurrency: int | None = CONCURRENCY_OPTION,
    actor_cpus: float | None = ACTOR_CPUS_OPTION,
    stall_timeout: float = STALL_TIMEOUT_OPTION,
    model: str | None = MODEL_OPTION,
    batch_size: int = typer.Option(32, min=1, help="Texts per forward pass."),
    dtype: str = typer.Option("auto", help=DTYPE_HELP),
    quantize: str | None = typer.Option(None, metavar="int8", help=QUANTIZE_HELP),
    fmt: str = typer.Option("table", "--format", help=FORMAT_HELP),
    shard_size: int | None = SHARD_SIZE_OPTION,
    dimensions: int | None = DIMENSIONS_OPTION,
    precision: str = PRECISION_OPTION,
    threads: int = typer.Option(0, min=0, help=THREADS_HELP),
    device: str = typer.Option("auto", help=DEVICE_HELP),
    runtime: str = typer.Option("torch", help=RUNTIME_HELP),
    adapter: Path | None = ADAPTER_OPTION,
    output_value: str | None = OUTPUT_VALUE_OPTION,
):
    """Sentence embeddings; prints the cosine-similarity matrix (or writes --output, or JSONL
    with --format jsonl). Inputs longer than the model's limit are truncated, with a warning.
    With --input FILE --output DIR it embeds a file of any size in resumable shards."""
    compute_threads(threads)
    device = torch_device(device)
    from ..data.table_io import table_kind

    check_format(fmt)
    check_runtime(runtime, quantize, device, packages=False)  # packages: load_embedder
    parquet_out = output if output is not None and Path(output).suffix == ".parquet" else None
    require_extras(*(("ray",) if engine == "ray" else ()), tables=(input, parquet_out))
    # as given, for Ray: a URI (s3://bucket/texts/) would lose a slash as a Path
    uris = (str(input) if input is not None else None, str(output) if output is not None else None)
    input = Path(input) if input is not None else None
    output = Path(output) if output is not None else None
    kind = table_kind(input) if input is not None else None
    columns = dict(id_column=id_column, text_column=text_column)
    _check_output_options(output, engine, dimensions, precision)
    if output_value is not None:  # BGE-M3's three outputs (pipelines.embedding.bge_m3)
        others = dict(quantize=quantize, dimensions=dimensions, shard_size=shard_size)
        others |= {"precision": precision != "float32", "engine": engine != "local"}
        others |= {"runtime": runtime != "torch"}
        given = [f"--{k.replace('_', '-')}" for k, v in others.items() if v not in (None, False)]
        if given:
            raise InputError(f"--output-value writes BGE-M3 JSONL rows; drop {', '.join(given)}")
        ids, texts = _gather_texts(sentences, input, kind, columns)
        _embed_m3(texts, ids, output, model, output_value, batch_size, dtype, device)
        return
    if adapter is not None and (engine == "ray" or (output and output.suffix not in NPY_JSONL)):
        raise InputError(
            "--adapter embeds SENTENCEs or --input printed or written to .npy/.jsonl (not bulk "
            "shards, Parquet or --engine ray)"
        )
    if engine == "ray" or (output is not None and output.suffix == ".parquet"):
        if sentences or input is None:
            raise InputError("Parquet output and --engine ray embed --input FILE, not SENTENCEs")
        if engine == "ray":
            if runtime != "torch":
                raise InputError("--engine ray runs the torch runtime; drop --runtime")
            ray_args = dict(
                concurrency=concurrency, num_cpus=actor_cpus, stall_timeout=stall_timeout
            )
            _embed_ray(*uris, model, batch_size, dtype, ray_args, with_text, columns)
        else:
            _embed_table(
                input, output, model, batch_size, dtype, quantize, with_text, columns,
                precision, device, runtime,
            )  # fmt: skip
        return
    if output is not None and (output.is_dir() or output.suffix == ""):
        if kind != "text":
            raise InputError(
                f"--output DIR shards a plain text file; for the table {input} give --output "
                "FILE.parquet, or --engine ray --output DIR"
            )
        _embed_bulk(
            sentences, input, output, model=model, batch_size=batch_size, dtype=dtype,
            shard_size=shard_size, quantize=quantize, device=device, runtime=runtime,
        )  # fmt: skip
        return
    if shard_size is not None:
        raise InputError(
            "--shard-size is for bulk mode: give --output a directory (a path without .npy/.jsonl)"
        )
    ids, texts = _gather_texts(sentences, input, kind, columns)
    if output is not None and output.suffix not in (".npy", ".jsonl"):
        raise InputError(
            f"--output must end in .npy or .jsonl, or be a directory (a path without a "
            f"suffix) for bulk mode, got {output.name}"
        )
    embedder = load_embedder(model, dtype, quantize, device, runtime, adapter=adapter)
    vectors = _encode_with_progress(embedder, texts, batch_size)
    _report_truncation(embedder, texts)
    if dimensions is not None or precision != "float32":
        from ..pipelines.embedding.quantize import quantize_embeddings, truncate_dimensions

        vectors = truncate_dimensions(vectors, dimensions, embedder.pooling.normalize)
        vectors = quantize_embeddings(vectors, precision)
    if output is not None:
        _write_vectors(output, vectors, texts, ids)
    elif fmt == "jsonl":
        write_out(_jsonl(vectors, texts, ids))
    else:
        _print_similarities(embedder, model, vectors, texts)


def _check_output_options(
    output: Path | None, engine: str, dimensions: int | None, precision: str
) -> None:
    """Refuse an unknown --precision or --engine, and --dimensions or --precision where the
    output cannot take them (bulk shards, Parquet, --engine ray)."""
    from ..pipelines.embedding.quantize import PRECISIONS

    if precision not in PRECISIONS:
        raise InputError(f"--precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if engine not in ("local", "ray"):
        raise InputError(f"--engine must be local or ray, got {engine!r}")
    bulk = output is not None and (output.is_dir() or output.suffix in ("", ".parquet"))
    parquet = output is not None and output.suffix == ".parquet"
    if (bulk or engine == "ray") and dimensions is not None:
        raise InputError(
            "--dimensions is for embeddings printed or written to .npy/.jsonl, not for bulk, "
            "Parquet or --engine ray output"
        )
    if (engine == "ray" or (bulk and not parquet)) and precision != "float32":
        raise InputError(
            "--precision is for embeddings printed or written to .npy/.jsonl/.parquet (a "
            "vector_<precision> column beside vector), not for bulk shards or --engine ray"
        )


def _gather_texts(
    sentences: list[str] | None, input: Path | None, kind: str | None, columns: dict
) -> tuple[list | None, list[str]]:
    """The SENTENCE arguments, then the --input file's lines or table rows; the ids (None for
    the arguments) when the input is a table, else None."""
    from ..data.table_io import read_id_texts

    ids = None
    if kind in ("jsonl", "csv", "tsv", "parquet"):
        ids, table_texts = read_id_texts(input, **columns)
        ids = [None] * len(sentences or []) + ids
    texts = list(sentences or []) + (
        (read_input_lines(input) if kind == "text" else table_texts) if input is not None else []
    )
    if not texts:
        raise InputError("give sentences as arguments or --input FILE")
    return ids, texts


def _jsonl(vectors, texts: list[str], ids: list | None) -> str:
    """One JSON object a text: "line" 1-based (SENTENCE arguments first, then the input's
    rows), "id" for a table's rows, "text", "embedding"."""
    rows = (
        {"line": i, **({"id": ids[i - 1]} if ids else {}), "text": t, "embedding": v.tolist()}
        for i, (t, v) in enumerate(zip(texts, vectors), 1)
    )
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def _write_vectors(output: Path, vectors, texts: list[str], ids: list | None) -> None:
    """--output FILE.npy (the rows in input order) or FILE.jsonl, written atomically."""
    import numpy as np

    from ..files import atomic_write

    if output.suffix == ".npy":

        def save(tmp: Path) -> None:
            with open(tmp, "wb") as fh:
                np.save(fh, vectors)

        atomic_write(output, save)
    else:
        body = _jsonl(vectors, texts, ids)
        atomic_write(output, lambda tmp: tmp.write_text(body, encoding="utf-8"))
    err.print(f"wrote {len(texts)} × {vectors.shape[1]} embeddings to {output}", soft_wrap=True)


def _print_similarities(embedder, model: str | None, vectors, texts: list[str]) -> None:
    """The cosine-similarity matrix of up to 12 texts as a table (for more, just the count)."""
    from ..pipelines.embedding.embed import cosine_matrix

    sims = cosine_matrix(vectors, vectors)
    if len(texts) > 12:
        console.print(
            f"{len(texts)} embeddings of dimension {vectors.shape[1]}; use --output or "
            "--format jsonl to save them"
        )
        return
    shown = embedder.path.name if model is None or Path(model).is_dir() else model  # org/name
    table = Table(title=f"cosine similarity ({shown}, dim {vectors.shape[1]})")
    table.add_column("#")
    table.add_column("sentence", max_width=SHOWN_CHARS + 1)
    for j in range(len(texts)):
        table.add_column(str(j + 1), justify="right")  # numbered from 1, as "line" in JSONL
    for i, t in enumerate(texts):
        table.add_row(
            str(i + 1), escape(shorten(t)), *[fmt_score(sims[i, j]) for j in range(len(texts))]
        )
    console.print(table)


def _embed_bulk(
    sentences: list[str] | None,
    input: Path | None,
    output: Path,
    *,
    model: str,
    batch_size: int,
    dtype: str,
    shard_size: int | None,
    quantize: str | None = None,
    device: str = "cpu",
    runtime: str = "torch",
) -> None:
    """`embed --input FILE --output DIR`: `pipelines.bulk.embed_file` with a progress bar."""
    from ..pipelines.embedding.bulk import DEFAULT_SHARD_SIZE, embed_file, process_slot

    if sentences or input is None:
        raise InputError("bulk mode (--output DIR) embeds --input FILE, not SENTENCE arguments")
    rank, world = process_slot()
    embedder = load_embedder(model, dtype, quantize, device, runtime)
    who = f"rank {rank}/{world}: " if world > 1 else ""
    with Progress(
        TextColumn(f"{who}embedding"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
    ) as bar:
        task = bar.add_task("embed", total=None)
        result = embed_file(
            embedder,
            input,
            output,
            shard_size=shard_size or DEFAULT_SHARD_SIZE,
            batch_size=batch_size,
            rank=rank,
            world_size=world,
            progress=lambda n: bar.advance(task, n),
            on_plan=lambda plan, lines: bar.update(task, total=lines),
        )
    plan = result.plan
    if result.truncated:
        err.print(
            f"[yellow]warning:[/] {who}{result.truncated} of {result.lines} lines were longer "
            f"than the model's limit of {embedder.max_length} tokens and were truncated"
        )
    resumed = f" ({len(result.skipped)} already finished)" if result.skipped else ""
    status = (
        "complete"
        if result.complete
        else f"{result.finished_shards} of {plan.num_shards} shards finished so far"
    )
    err.print(
        f"{who}wrote {len(result.written)} shards, {result.lines:,} lines × "
        f"{plan.model.dimension}{resumed} to {output}; {plan.input.lines:,} lines in "
        f"{plan.num_shards} shards: {status}",
        soft_wrap=True,
    )


def _embed_table(
    input,
    output,
    model,
    batch_size,
    dtype,
    quantize,
    with_text,
    columns,
    precision="float32",
    device="cpu",
    runtime="torch",
) -> None:
    """`embed --input TABLE --output FILE.parquet`: `pipelines.bulk.embed_table`, streamed; a
    SPLADE model writes sparse_indices / sparse_values instead of vector."""
    from ..data.table_io import check_table
    from ..pipelines.embedding.bulk import embed_table
    from ..pipelines.embedding.sentence_modules import directory_kind

    check_table(input, **columns)  # bad rows refuse the table before the model loads
    path = model_path(model)
    if directory_kind(path) == "sparse":
        from ..pipelines.embedding.sparse import SparseEncoder

        if quantize is not None or precision != "float32" or runtime != "torch":
            raise InputError(
                "--quantize, --precision and --runtime are for dense embedding models, not a "
                "SPLADE model"
            )
        embedder = SparseEncoder(path, dtype=torch_dtype(dtype, device), device=device)
    else:
        embedder = load_embedder(model, dtype, quantize, device, runtime)
    with Progress(
        TextColumn("embedding"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=err
    ) as bar:
        task = bar.add_task("embed", total=None)
        rows, truncated = embed_table(
            embedder,
            input,
            output,
            with_text=with_text,
            batch_size=batch_size,
            precision=precision,
            progress=lambda n: bar.advance(task, n),
            check=False,
            **columns,
        )
    if truncated:
        err.print(
            f"[yellow]warning:[/] {truncated} of {rows} texts were longer than the model's "
            f"limit of {embedder.max_length} tokens and were truncated"
        )
    what = (
        "(id, sparse vector)" if embedder.__class__.__name__ == "SparseEncoder" else "(id, vector)"
    )
    extra = f" (and vector_{precision})" if precision != "float32" else ""
    err.print(
        f"wrote {rows:,} {what} rows × {embedder.dimension}{extra} to {output}", soft_wrap=True
    )


def _embed_ray(input, output, model, batch_size, dtype, ray_args, with_text, columns) -> None:
    """`embed --engine ray --input TABLE --output DIR`: `integrations.ray.embed_dataset`."""
    from ..integrations.ray import embed_dataset

    if output is None or Path(output).suffix:
        raise InputError("--engine ray writes a directory of Parquet shards: give --output DIR")
    result = embed_dataset(
        input,
        output,
        model=model or str(model_path(None)),  # a name or path each actor resolves
        batch_size=batch_size,
        dtype=dtype,
        with_text=with_text,
        **ray_args,
        **columns,
    )
    actors, cpus = result.get("concurrency"), result.get("num_cpus")
    plan = f", {actors} Ray actors × {cpus:g} CPUs" if actors and cpus else ""
    err.print(
        f"wrote {result['rows']:,} (id, vector) rows × {result['dimension']} to {output} "
        f"({result['files']} Parquet files{plan})",
        soft_wrap=True,
    )


def _embed_m3(texts, ids, output, model, output_value, batch_size, dtype, device) -> None:
    """`embed --output-value`: a BGE-M3 directory's dense, sparse and/or ColBERT outputs of
    ``texts`` (`BGEM3Encoder`, one encoder pass), as JSONL rows on stdout or to FILE.jsonl."""
    from ..files import atomic_write
    from ..pipelines.embedding.bge_m3 import OUTPUTS, BGEM3Encoder, m3_json_rows

    if output_value not in (*OUTPUTS, "all"):
        raise InputError(
            f"--output-value must be dense, sparse, colbert or all, got {output_value!r}"
        )
    if output is not None and output.suffix != ".jsonl":
        raise InputError("--output-value writes JSONL: give --output FILE.jsonl, or no --output")
    encoder = BGEM3Encoder(model_path(model), device=device, dtype=torch_dtype(dtype, device))
    chosen = OUTPUTS if output_value == "all" else (output_value,)
    result = encoder.encode(texts, outputs=chosen, batch_size=batch_size)
    _report_truncation(encoder, texts)
    body = "".join(
        json.dumps({"line": i, **({"id": ids[i - 1]} if ids else {}), **row}, ensure_ascii=False)
        + "\n"
        for i, row in enumerate(m3_json_rows(result, texts), 1)
    )
    if output is None:
        write_out(body)
        return
    atomic_write(output, lambda tmp: tmp.write_text(body, encoding="utf-8"))
    err.print(f"wrote {len(texts)} BGE-M3 rows ({output_value}) to {output}", soft_wrap=True)


@commands.command()
@handle_errors
def search(
    ctx: typer.Context,
    query: list[str] = typer.Argument(
        ..., metavar="QUERY", help="One or more queries.", show_default=False
    ),
    corpus: Path | None = typer.Option(
        None,
        metavar="FILE",
        help="UTF-8 text file, one document per line, or - for standard input (line numbers "
        "count every line, from 1; "
        "blank lines are never hits). A table (.csv, .jsonl, …) is refused: index its text "
        "column with `index build` and search --index.",
    ),
    index: list[Path] | None = typer.Option(
        None,
        "--index",
        metavar="DIR",
        help="Query an index built by `bertfamily index build` (any kind) instead of --corpus "
        "(the corpus is not embedded again; the model must be the index's). Give it two or more "
        "times, indexes of the same corpus (at most one dense or binary, one sparse, one bm25), "
        "for hybrid search (--fusion).",
        show_default=False,
    ),
    sparse_model: str | None = typer.Option(
        None,
        "--sparse-model",
        metavar="DIR|NAME",
        help="The SPLADE model of the sparse index (hybrid search: --model is the dense one's; "
        "one sparse index: --model or --sparse-model). An option that no index of the search "
        "uses is refused.",
    ),
    fusion: str = typer.Option(
        "rrf",
        help="Hybrid search: rrf (reciprocal rank fusion, Σ 1/(60 + rank)) or linear (the mean "
        "of each index's min-max normalised scores); over the top 100 of each index.",
    ),
    rescore: int = typer.Option(
        40,
        min=0,
        help="A binary index: rescore this many Hamming candidates with the float vectors "
        "(at least --top-k; 0: Hamming order, no rescoring).",
    ),
    top_k: int = typer.Option(5, "--top-k", "-k", min=1, help="Hits per query."),
    model: str | None = typer.Option(
        None,
        metavar="DIR|NAME",
        help="Model directory, resource name, or org/name in the local Hugging Face cache.",
    ),
    batch_size: int = typer.Option(32, min=1, help="Texts per forward pass."),
    dtype: str = typer.Option("auto", help=DTYPE_HELP),
    fmt: str = typer.Option("table", "--format", help=FORMAT_HELP),
    threads: int = typer.Option(0, min=0, help=THREADS_HELP),
    device: str = typer.Option("auto", help=DEVICE_HELP),
    runtime: str = typer.Option("torch", help=RUNTIME_HELP + " The dense model's."),
):
    """Semantic search: the corpus lines closest to each query (blank lines are never hits).
    JSONL rows carry the query, its 1-based "query_number", the hit's "rank", "score", "text"
    and its "line" in the corpus (with --index: its "id", the line number for a plain text
    corpus), all counting from 1. With a sparse index, only documents sharing a vocabulary
    entry with the query are hits (with a bm25 index: sharing a word); with two or more
    indexes the score is the fused one."""
    compute_threads(threads)
    device = torch_device(device)
    from ..pipelines.embedding.embed import semantic_search

    check_format(fmt)
    check_runtime(runtime, device=device)
    if (corpus is None) == (not index):
        raise InputError("give --corpus FILE or --index DIR (one of them)")
    from ..pipelines.retrieval.base import read_index_meta
    from .index import described, refuse_unused, search_options, sparse_index_model

    kinds = [read_index_meta(p)["kind"] for p in index] if index else ["corpus"]
    refuse_unused(ctx, search_options(kinds), described(kinds))  # an option no index uses: refused
    if index:
        opts = dict(top_k=top_k, dtype=dtype, batch_size=batch_size, rescore=rescore)
        opts |= dict(device=device, runtime=runtime)
        if len(index) == 1:
            if kinds == ["sparse"]:  # its SPLADE model: --model or --sparse-model
                model = sparse_index_model(model, sparse_model)
            results = _search_index(index[0], list(query), model, **opts)
        else:
            results = _search_hybrid(index, list(query), model, sparse_model, fusion, **opts)
        _print_hits(list(query), results, fmt, "id", lambda h: h.id)
        return
    docs = read_input_lines(corpus)
    embedder = load_embedder(model, dtype, device=device, runtime=runtime)
    corpus_vectors = _encode_with_progress(embedder, docs, batch_size)
    _report_truncation(embedder, docs)
    results = semantic_search(embedder, query, docs, top_k=top_k, corpus_embeddings=corpus_vectors)
    _report_truncation(embedder, list(query), what="queries")
    _print_hits(list(query), results, fmt, "line", lambda h: h.index + 1)  # lines count from 1


SPARSE_RUNTIME = {"runtime": "torch"}  # hybrid search: --runtime is the dense model's
#: the kinds hybrid search takes at most one of (a dense model serves flat, hnsw and binary)


def _query_index(
    index,
    queries: list[str],
    model,
    *,
    top_k,
    dtype,
    batch_size,
    rescore,
    device="cpu",
    runtime="torch",
):
    """One opened index's hits (`IndexHit`) for ``queries``, with the model its kind needs
    (none for bm25: ``model`` is then another index's)."""
    from .index import index_encoder, index_kind

    kind = index_kind(index)
    if kind == "bm25":
        return index.search_texts(queries, top_k=top_k)
    encoder = index_encoder(kind, model, dtype, device, runtime)
    extra = {"rescore": rescore or None} if kind == "binary" else {}
    return index.search_texts(encoder, queries, top_k=top_k, batch_size=batch_size, **extra)


def _search_index(path: Path, queries: list[str], model, **opts):
    from ..pipelines.retrieval.indexes import open_index

    return _query_index(open_index(path), queries, model, **opts)


def _search_hybrid(paths, queries: list[str], model, sparse_model, fusion, *, top_k, **opts):
    """The hits of two or more indexes of the same documents fused over each index's top
    `retrieval.hybrid.FUSION_DEPTH` (`retrieval.hybrid.fused_hits`, as the server's /search):
    a dense or binary index (``model``), a sparse one (``sparse_model``) and a bm25 one (no
    model), at most one of each group."""
    from ..pipelines.retrieval.base import read_index_meta
    from ..pipelines.retrieval.hybrid import (
        FUSIONS,
        check_kinds,
        check_same_documents,
        fused_hits,
        query_depth,
    )
    from ..pipelines.retrieval.indexes import open_index

    if fusion not in FUSIONS:
        raise InputError(f"--fusion must be rrf or linear, got {fusion!r}")
    kinds = [read_index_meta(p)["kind"] for p in paths]  # checked before any index is read
    check_kinds(kinds)
    indexes = [open_index(p) for p in paths]
    check_same_documents(indexes, paths)
    if "sparse" in kinds and sparse_model is None:
        raise InputError("hybrid search: give --sparse-model (the sparse index's SPLADE model)")
    depth = query_depth(len(indexes), top_k)
    lists = []
    for index, kind in zip(indexes, kinds):
        if kind == "sparse":
            lists.append(
                _query_index(index, queries, sparse_model, top_k=depth, **(opts | SPARSE_RUNTIME))
            )
        else:
            lists.append(_query_index(index, queries, model, top_k=depth, **opts))
    return fused_hits(indexes[0], lists, top_k, fusion)


def _print_hits(queries: list[str], results, fmt: str, column: str, ref) -> None:
    """Search hits per query, as JSONL (query, query_number, rank, score, ``column``, text) or
    as one table per query; ``column`` ("line" of a corpus, "id" of an index) is ``ref(hit)``;
    every number counts from 1."""
    if fmt == "jsonl":
        write_out(
            "".join(
                json.dumps(
                    {
                        "query": q,
                        "query_number": qi,
                        "rank": rank,
                        "score": float(fmt_score(h.score, 6)),
                        column: ref(h),
                        "text": h.text,
                    },
                    ensure_ascii=False,
                )
                + "\n"
                for qi, (q, hits) in enumerate(zip(queries, results), 1)
                for rank, h in enumerate(hits, 1)
            )
        )
        return
    for q, hits in zip(queries, results):
        table = Table("rank", "score", column, "text", title=escape(f"query: {shorten(q)}"))
        for rank, h in enumerate(hits, 1):
            table.add_row(
                str(rank), fmt_score(h.score, 4), escape(str(ref(h))), escape(shorten(h.text))
            )
        console.print(table)
