"""Tokenizers: `tokenizer train`."""

from __future__ import annotations

from pathlib import Path

import typer

from .common import App, err, handle_errors

commands = App()
tokenizer = App(help="Tokenizer training.", no_args_is_help=True)
commands.add_typer(tokenizer, name="tokenizer")


@tokenizer.command("train")
@handle_errors
def train(
    corpus: list[Path] = typer.Argument(
        ...,
        metavar="FILE",
        help="UTF-8 text files, one sentence per line (each must exist and hold text).",
        show_default=False,
    ),
    output: Path = typer.Option(
        ..., "--output", "-o", metavar="DIR", help="Directory to write (Hugging Face layout)."
    ),
    kind: str = typer.Option("wordpiece", help="wordpiece | bpe | unigram"),
    vocab_size: int = typer.Option(
        30522, min=10, help="Vocabulary size to learn, special tokens included (an upper bound)."
    ),
    lowercase: bool = typer.Option(True, help="Lower-case (WordPiece, Unigram)."),
    strip_accents: bool | None = typer.Option(
        None, help="Strip accents. Default: follow --lowercase.", show_default=False
    ),
    min_frequency: int = typer.Option(
        2, min=1, help="Keep a merge or piece only when it occurs this often."
    ),
):
    """Train a WordPiece / byte-level BPE / Unigram tokenizer (Hugging Face layout)."""
    from ..tokenization.training import check_corpus_files, train_tokenizer

    check_corpus_files(corpus)
    tok = train_tokenizer(
        list(corpus),
        kind,
        vocab_size,
        lowercase=lowercase,
        strip_accents=strip_accents,
        min_frequency=min_frequency,
        output_dir=output,
    )
    err.print(f"{tok} -> {output}", soft_wrap=True)
