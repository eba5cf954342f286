"""`bertfamily models`: the presets and checkpoint families, with parameter counts."""

from __future__ import annotations

import sys

import typer

from .common import App, console, handle_errors

commands = App()


@commands.command()
@handle_errors
def models(
    fmt: str = typer.Option(
        "table",
        "--format",
        help="table (folded into one block per model when the terminal is too narrow or "
        "stdout is not a terminal), markdown, csv or json.",
    ),
):
    """The comparison table of the family models (exact parameter counts)."""
    from ..inspect.compare import comparison_rows, format_rows
    from ..inspect.render import models_folded, models_rich

    rows = comparison_rows()
    if fmt == "table":
        table = models_rich(rows)
        if console.is_terminal and console.measure(table).maximum <= console.width:
            console.print(table)
        else:
            sys.stdout.write(models_folded(rows, width=min(console.width, 100)))
            sys.stdout.flush()
        return
    sys.stdout.write(format_rows(rows, fmt))
    sys.stdout.flush()
