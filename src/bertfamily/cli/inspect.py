"""Looking inside: `params`, `dataflow`, `models`, `explore`, `attention`."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from .common import console, handle_errors

commands = typer.Typer()


@commands.command()
@handle_errors
def params(
    model: str = typer.Argument(..., help="Preset name or model directory."),
    vocab_size: int | None = typer.Option(None, "--vocab-size", help="Override V (e.g. 21128)."),
    head: list[str] = typer.Option(
        [], "--head", help="Head to include (mlm, nsp, sop, ...); repeat for several."
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
        console.print_json(json.dumps(table.to_dict()))
    else:
        console.print(params_rich(table))


@commands.command()
@handle_errors
def dataflow(
    model: str = typer.Argument(..., help="Preset name or model directory."),
    batch: int | None = typer.Option(None, "--batch", min=1, help="B."),
    seq_len: int | None = typer.Option(None, "--seq-len", min=1, help="T."),
    head: list[str] = typer.Option([], "--head", help="Head to include."),
    compare: bool = typer.Option(True, help="Mark differences from bert-base."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
):
    """The traced dataflow of one forward pass with every shape."""
    from ..inspect.compare import REFERENCE, diff_traces
    from ..inspect.render import dataflow_rich, legend_text
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
        console.print_json(json.dumps(out))
        return
    console.print(dataflow_rich(tr, diff))
    console.print(legend_text(tr))
    if diff and diff.notes:
        console.print("differences from " + diff.reference + ": " + "; ".join(diff.notes))


@commands.command()
@handle_errors
def models(fmt: str = typer.Option("table", "--format", help="table, markdown, csv or json.")):
    """The comparison table of the ten models (parameters counted from the code)."""
    from ..inspect.compare import comparison_rows, format_rows
    from ..inspect.render import models_rich

    rows = comparison_rows()
    if fmt == "table":
        console.print(models_rich(rows))
        return
    typer.echo(format_rows(rows, fmt), nl=False)


@commands.command()
@handle_errors
def explore(
    names: list[str] = typer.Argument(None, help="Models (default: the ten)."),
    output: Path = typer.Option(..., "--output", "-o", help="HTML file to write."),
    vocab_size: int | None = typer.Option(None, "--vocab-size", help="Override V for every model."),
):
    """Write the side-by-side explorer page (one self-contained HTML file)."""
    from ..inspect.explore import write_page

    path = write_page(output, names or None, vocab_size=vocab_size)
    console.print(f"wrote {path}")


@commands.command()
@handle_errors
def attention(
    text: str = typer.Argument(..., help="Text to run."),
    output: Path = typer.Option(..., "--output", "-o", help="PNG file to write."),
    model: str | None = typer.Option(
        None, help="Model directory or resource (default: all-MiniLM-L6-v2)."
    ),
    layer: int = typer.Option(-1, help="Layer (negative: from the end)."),
    head: int = typer.Option(0, help="Head index."),
):
    """Attention-weight heatmap of one layer and head, with token labels."""
    from ..inspect.attention_plot import attention_heatmap

    path = attention_heatmap(text, output, model, layer=layer, head=head)
    console.print(f"wrote {path}")
