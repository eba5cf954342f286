"""`bertfamily convert to-longformer`: a thin command around `to_longformer.to_longformer`."""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    """Add the `convert to-longformer` command (creating the `convert` group if absent)."""
    group = next((g.typer_instance for g in app.registered_groups if g.name == "convert"), None)
    if group is None:
        group = typer.Typer(help="Convert checkpoints between families.", no_args_is_help=True)
        app.add_typer(group, name="convert")

    @group.command("to-longformer")
    def to_longformer_cmd(
            model: Path = typer.Option(..., help="RoBERTa checkpoint directory (Hugging Face)."),
            output: Path = typer.Option(..., help="Directory for the Longformer checkpoint."),
            max_positions: int = typer.Option(4096, "--max-positions", min=1,
                                              help="Longest input of the result."),
            window: int = typer.Option(512, help="Full attention window (even).")):
        """RoBERTa → Longformer: position table copied block by block, global projections
        initialised from the local ones (Beltagy et al. 2020, §5)."""
        from .to_longformer import to_longformer
        from .cli import _fail, console

        try:
            path = to_longformer(model, output, max_positions=max_positions, window=window)
        except (ValueError, OSError) as e:
            _fail(e)
        console.print(f"wrote Longformer checkpoint ({max_positions} positions, window {window}) "
                      f"to {path}")
