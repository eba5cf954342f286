"""`bertfamily data split`: train/dev/test files from one data file (`data.prepare`)."""

from __future__ import annotations

from pathlib import Path

import typer

from .common import App, err, handle_errors, write_out

commands = App()
data_app = App(help="Prepare data files: split.", no_args_is_help=True)
commands.add_typer(data_app, name="data")


@data_app.command("split")
@handle_errors
def split(
    input: Path = typer.Argument(
        ..., metavar="INPUT", help="The data file: .csv, .tsv, .jsonl, .txt or .conll."
    ),
    output: Path = typer.Option(
        ..., "--output", "-o", metavar="DIR", help="Directory for train/dev/test files."
    ),
    dev: float = typer.Option(0.1, "--dev", help="Fraction of the records for dev (0: none)."),
    test: float = typer.Option(0.1, "--test", help="Fraction of the records for test (0: none)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the shuffle (numpy default_rng)."),
    format: str | None = typer.Option(
        None,
        "--format",
        metavar="FORMAT",
        help="csv, tsv, jsonl, text or conll (default: from the suffix).",
    ),
    label_column: str = typer.Option(
        "label", "--label-column", help="Column (JSON key) of the labels to stratify by."
    ),
    stratify: bool | None = typer.Option(
        None,
        "--stratify/--no-stratify",
        help="Keep each label's share in every split (default: when the file has class labels).",
        show_default=False,
    ),
):
    """Split a data file into train, dev and test files (deterministic for a seed; stratified by
    label for classification data; each file in the input's format, written atomically).
    Prints the files written, one a line."""
    from ..data.prepare import split_file

    result = split_file(
        input,
        output,
        dev=dev,
        test=test,
        seed=seed,
        format=format,
        label_column=label_column,
        stratify=stratify,
    )
    parts = ", ".join(f"{k} {v:,}" for k, v in result.counts.items())
    how = f"stratified by {result.stratified_by!r}" if result.stratified_by else "not stratified"
    err.print(
        f"split {sum(result.counts.values()):,} records of {input.name}: {parts} "
        f"({how}; seed {seed})",
        markup=False,
        highlight=False,
    )
    write_out("".join(f"{p}\n" for p in result.paths.values()))
