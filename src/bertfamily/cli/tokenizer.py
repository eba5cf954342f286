"""Tokenizers: `tokenizer train`."""

from __future__ import annotations

from pathlib import Path

import typer

from .common import console, handle_errors

commands = typer.Typer()
tokenizer = typer.Typer(help="Tokenizer training.", no_args_is_help=True)
commands.add_typer(tokenizer, name="tokenizer")


@tokenizer.command("train")
@handle_errors
def train(
    corpus: list[Path] = typer.Argument(..., help="Text files, one sentence per line."),
    output: Path = typer.Option(..., "--output", "-o", help="Directory to write."),
    kind: str = typer.Option("wordpiece", help="wordpiece | bpe | unigram"),
    vocab_size: int = typer.Option(30522, min=10),
    lowercase: bool = typer.Option(True, help="Lower-case (WordPiece, Unigram)."),
    strip_accents: bool | None = typer.Option(None, help="Default: follow --lowercase."),
    min_frequency: int = typer.Option(2, min=1),
):
    """Train a WordPiece / byte-level BPE / Unigram tokenizer (Hugging Face layout)."""
    from ..recipes.tokenizer import train_tokenizer

    tok = train_tokenizer(
        [str(c) for c in corpus],
        kind,
        vocab_size,
        lowercase=lowercase,
        strip_accents=strip_accents,
        min_frequency=min_frequency,
        output_dir=output,
    )
    console.print(f"{tok} -> {output}")
