"""`bertfamily explore` (an HTML page of a traced model) and `bertfamily attention` (heatmaps)."""

from __future__ import annotations

from pathlib import Path

import typer

from .common import App, err, handle_errors

commands = App()


@commands.command()
@handle_errors
def explore(
    names: list[str] = typer.Argument(None, metavar="MODEL", help="Models (default: the family)."),
    output: Path = typer.Option(..., "--output", "-o", help="HTML file to write."),
    vocab_size: int | None = typer.Option(None, "--vocab-size", help="Override V for every model."),
):
    """Write the side-by-side explorer page (one self-contained HTML file)."""
    from ..inspect.explore import write_page
    from ..notices import waiting
    from .common import err

    with waiting("building the explorer page (tracing every model; may take minutes)"):
        path = write_page(output, names or None, vocab_size=vocab_size)
    err.print(f"wrote {path}")


@commands.command()
@handle_errors
def attention(
    text: str = typer.Argument(..., help="Text to run."),
    output: Path = typer.Option(..., "--output", "-o", help="PNG file to write."),
    model: str | None = typer.Option(
        None, help="Model: directory, resource or cached org/name (default: all-MiniLM-L6-v2)."
    ),
    layer: int = typer.Option(-1, help="Layer (negative: from the end)."),
    head: int = typer.Option(0, help="Head index."),
):
    """Attention-weight heatmap of one layer and head, with token labels."""
    from ..inspect.attention_plot import attention_heatmap
    from .common import require_extras

    require_extras("plots")
    path = attention_heatmap(text, output, model, layer=layer, head=head)
    err.print(f"wrote {path}")
