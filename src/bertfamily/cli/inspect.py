"""Looking inside: `params`, `dataflow`, `models`, `explore`, `attention`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from .common import App, console, handle_errors

commands = App()


def _print_json(obj) -> None:
    """Machine output: indented JSON on stdout with plain print (never wrapped or highlighted)."""
    sys.stdout.write(json.dumps(obj, indent=2, ensure_ascii=False) + "\n")
    sys.stdout.flush()


@commands.command()
@handle_errors
def params(
    model: str = typer.Argument(..., help="Preset name or model directory."),
    vocab_size: int | None = typer.Option(None, "--vocab-size", help="Override V (e.g. 21128)."),
    head: list[str] = typer.Option(
        [],
        "--head",
        metavar="HEAD",
        help="Head to include (mlm, nsp, sop, ...); repeat for several.",
    ),
    condition_size: int | None = typer.Option(
        None, "--condition-size", help="Conditional LayerNorm condition size C."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
):
    """Every component with output shape and parameter count, block subtotals, total."""
    from ..inspect.params import parameter_table
    from ..inspect.render import params_rich

    table = parameter_table(model, heads=head, vocab_size=vocab_size, condition_size=condition_size)
    if json_out:
        _print_json(table.to_dict())
    else:
        console.print(params_rich(table, width=console.width))


@commands.command()
@handle_errors
def dataflow(
    model: str = typer.Argument(..., help="Preset name or model directory."),
    batch: int | None = typer.Option(None, "--batch", min=1, help="B."),
    seq_len: int | None = typer.Option(None, "--seq-len", min=1, help="T."),
    head: list[str] = typer.Option(
        [],
        "--head",
        metavar="HEAD",
        help="Head to include (mlm, nsp, sop, ...); repeat for several.",
    ),
    compare: bool = typer.Option(True, help="Mark differences from bert-base."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
):
    """The traced dataflow of one forward pass with every shape."""
    from ..inspect.compare import REFERENCE, diff_traces
    from ..inspect.render import WIDE, dataflow_differences, dataflow_rich, legend_text
    from ..inspect.trace import trace

    tr = trace(model, heads=head, batch=batch, seq_len=seq_len)
    diff = None
    if compare and tr.name != REFERENCE:
        ref = trace(
            REFERENCE,
            heads=head,
            batch=tr.symbols["B"],
            seq_len=tr.symbols["T"],
            vocab_size=tr.config.vocab_size,
        )
        diff = diff_traces(ref, tr)
    if json_out:
        out = tr.to_dict()
        if diff:
            out["differences"] = diff.to_dict()
        _print_json(out)
        return
    console.print(dataflow_rich(tr, diff, width=console.width))
    if console.width < WIDE:
        for line in dataflow_differences(tr, diff):
            console.print(line, markup=False, highlight=False)
    console.print(legend_text(tr))
    if diff and diff.notes:
        console.print("differences from " + diff.reference + ": " + "; ".join(diff.notes))


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


@commands.command()
@handle_errors
def explore(
    names: list[str] = typer.Argument(None, metavar="MODEL", help="Models (default: the family)."),
    output: Path = typer.Option(..., "--output", "-o", help="HTML file to write."),
    vocab_size: int | None = typer.Option(None, "--vocab-size", help="Override V for every model."),
):
    """Write the side-by-side explorer page (one self-contained HTML file)."""
    from ..inspect.explore import write_page
    from .common import err

    with err.status("building the explorer page (tracing every model; may take minutes)…"):
        path = write_page(output, names or None, vocab_size=vocab_size)
    console.print(f"wrote {path}")


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

    path = attention_heatmap(text, output, model, layer=layer, head=head)
    console.print(f"wrote {path}")
