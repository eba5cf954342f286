"""Terminal renderings (rich tables) of the parameter table, the dataflow and the comparison."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

from .compare import COLUMNS, TraceDiff
from .params import ParamTable
from .symbols import LEGEND
from .trace import Trace


def params_rich(table: ParamTable) -> Table:
    """Keras-style summary: component, type, output shape (symbolic and concrete), parameters,
    with a subtotal line after each block and the total at the end."""
    heads = f", heads: {', '.join(table.heads)}" if table.heads else ""
    t = Table(title=f"{table.name} — parameters{heads}", show_lines=False)
    for col, kw in (
        ("component", {"no_wrap": True}),
        ("type", {}),
        ("output shape", {}),
        ("", {"style": "dim"}),
        ("parameters", {"justify": "right", "no_wrap": True}),
        ("note", {"style": "dim"}),
    ):
        t.add_column(col, **kw)
    subtotals = table.subtotals()
    rows = table.rows
    for i, r in enumerate(rows):
        name = Text(r.name.removeprefix("encoder."), style="italic" if r.shared else "")
        t.add_row(
            name,
            r.kind,
            r.output_shape,
            table.concrete(r.output_shape),
            f"{r.params:,}",
            ("shared · " if r.shared else "") + r.note,
        )
        if i + 1 == len(rows) or rows[i + 1].block != r.block:
            t.add_row(
                Text(f"  {r.block} subtotal", style="bold"),
                "",
                "",
                "",
                Text(f"{subtotals[r.block]:,}", style="bold"),
                "",
                end_section=True,
            )
    if table.head_total:
        t.add_row(
            Text("trunk (base model + pooler)", style="bold"),
            "",
            "",
            "",
            Text(f"{table.trunk_total:,}", style="bold"),
            "",
        )
        t.add_row(
            Text("heads", style="bold"), "", "", "", Text(f"{table.head_total:,}", style="bold"), ""
        )
    t.add_row(Text("total", style="bold"), "", "", "", Text(f"{table.total:,}", style="bold"), "")
    return t


def dataflow_rich(trace: Trace, diff: TraceDiff | None = None) -> Table:
    """The traced steps: name, operation, input and output shapes (symbolic and concrete),
    parameters, repetitions, and △ where the step differs structurally from the reference."""
    sym = ", ".join(f"{k}={v}" for k, v in trace.symbols.items())
    t = Table(title=f"{trace.name} — dataflow of one forward pass ({sym})")
    for col, kw in (
        ("", {}),
        ("step", {"no_wrap": True}),
        ("operation", {"max_width": 44}),
        ("in", {}),
        ("out", {}),
        ("out (numbers)", {"style": "dim"}),
        ("params", {"justify": "right"}),
        ("×", {"justify": "right"}),
        ("difference", {"max_width": 36, "style": "yellow"}),
    ):
        t.add_column(col, **kw)
    for s in trace.steps:
        d = diff.steps.get(s.key) if diff else None
        mark = "△" if d and d.marked else ("≠" if d and d.sizes else "")
        what = "; ".join((d.structural + d.sizes) if d else []) or s.note
        t.add_row(
            mark,
            "  " * s.depth + s.label,
            s.operation,
            " ".join(s.input_symbols),
            " ".join(s.output_symbols),
            " ".join(str(shape) for _, shape in s.outputs),
            f"{s.params:,}" if s.params else "",
            str(s.repeat) if s.repeat > 1 else "",
            what,
        )
    if diff:
        for s in diff.missing:
            t.add_row(
                "△",
                Text("  " * s.depth + s.label, style="strike"),
                "—",
                "",
                "",
                "",
                "",
                "",
                f"absent (present in {diff.reference})",
            )
    return t


def legend_text(trace: Trace) -> str:
    """The legend entries of the symbols ``trace`` uses, on one line."""
    return "  ".join(f"{k}: {LEGEND[k]}" for k in trace.symbols if k in LEGEND)


def models_rich(rows: list[dict[str, Any]]) -> Table:
    """The family table (``rows``, columns `COLUMNS`) as a rich `Table`."""
    t = Table(title="The BERT family (parameters counted from the code)")
    for col in COLUMNS:
        t.add_column(
            col, justify="right" if col in ("parameters", "published") else "left", overflow="fold"
        )
    for r in rows:
        cells = [
            "" if r[c] is None else (f"{r[c]:,}" if isinstance(r[c], int) else str(r[c]))
            for c in COLUMNS
        ]
        t.add_row(*cells)
    return t
