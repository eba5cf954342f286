"""Terminal renderings (rich tables) of the parameter table, the dataflow and the comparison."""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING, Any

from rich import box
from rich.table import Table
from rich.text import Text

from .compare import COLUMNS, TraceDiff
from .symbols import LEGEND

if TYPE_CHECKING:  # no torch for the comparison table (`bertfamily models`)
    from .params import ParamTable
    from .trace import Trace

#: Below this terminal width `params_rich` and `dataflow_rich` drop their wide columns.
WIDE = 120


def params_rich(table: ParamTable, width: int | None = None) -> Table:
    """Keras-style summary: component, type, output shape (symbolic and concrete), parameters,
    with a subtotal line after each block and the total at the end. With ``width`` under `WIDE`
    (an 80-column terminal) the concrete shape and the note are left out so nothing wraps."""
    compact = width is not None and width < WIDE
    heads = f", heads: {', '.join(table.heads)}" if table.heads else ""
    t = Table(
        title=f"{table.name} — parameters{heads}",
        show_lines=False,
        box=box.SIMPLE_HEAD if compact else box.HEAVY_HEAD,
        pad_edge=not compact,
    )
    cols = [
        ("component", {"no_wrap": True}),
        ("type", {"max_width": 16, "overflow": "fold"} if compact else {}),
        ("output shape", {"no_wrap": compact}),
        ("", {"style": "dim"}),
        ("parameters", {"justify": "right", "no_wrap": True, "min_width": 11}),
        ("note", {"style": "dim"}),
    ]
    keep = [0, 1, 2, 4] if compact else list(range(len(cols)))
    for k in keep:
        t.add_column(cols[k][0], **cols[k][1])

    def add(*cells, **kw) -> None:
        t.add_row(*[cells[k] for k in keep], **kw)

    subtotals = table.subtotals()
    rows = table.rows
    for i, r in enumerate(rows):
        name = Text(r.name.removeprefix("encoder."), style="italic" if r.shared else "")
        add(
            name,
            r.kind,
            r.output_shape,
            table.concrete(r.output_shape),
            f"{r.params:,}",
            ("shared · " if r.shared else "") + r.note,
        )
        if i + 1 == len(rows) or rows[i + 1].block != r.block:
            add(
                Text(f"  {r.block} subtotal", style="bold"),
                "",
                "",
                "",
                Text(f"{subtotals[r.block]:,}", style="bold"),
                "",
                end_section=True,
            )
    if table.head_total:
        pooled = any(r.block == "pooler" for r in rows)
        add(
            Text(f"trunk (base model{' + pooler' if pooled else ', no pooler'})", style="bold"),
            "",
            "",
            "",
            Text(f"{table.trunk_total:,}", style="bold"),
            "",
        )
        add(
            Text("heads", style="bold"), "", "", "", Text(f"{table.head_total:,}", style="bold"), ""
        )
    add(Text("total", style="bold"), "", "", "", Text(f"{table.total:,}", style="bold"), "")
    return t


def dataflow_rich(trace: Trace, diff: TraceDiff | None = None, width: int | None = None) -> Table:
    """The traced steps: name, operation, input and output shapes (symbolic and concrete),
    parameters, repetitions, and △ where the step differs structurally from the reference.
    With ``width`` under `WIDE` only mark, step, output shape, parameters and × are shown
    (`dataflow_differences` lists what the difference column would hold)."""
    compact = width is not None and width < WIDE
    sym = ", ".join(f"{k}={v}" for k, v in trace.symbols.items())
    t = Table(
        title=f"{trace.name} — dataflow of one forward pass ({sym})",
        box=box.SIMPLE_HEAD if compact else box.HEAVY_HEAD,
        pad_edge=not compact,
    )
    cols = [
        ("", {}),
        ("step", {"no_wrap": True}),
        ("operation", {"max_width": 44}),
        ("in", {}),
        ("out", {"max_width": 24} if compact else {}),
        ("out (numbers)", {"style": "dim"}),
        ("params", {"justify": "right", "no_wrap": compact}),
        ("×", {"justify": "right"}),
        ("difference", {"max_width": 36, "style": "yellow"}),
    ]
    keep = [0, 1, 4, 6, 7] if compact else list(range(len(cols)))
    for k in keep:
        t.add_column(cols[k][0], **cols[k][1])
    for s in trace.steps:
        d = diff.steps.get(s.key) if diff else None
        mark = "△" if d and d.marked else ("≠" if d and d.sizes else "")
        what = "; ".join((d.structural + d.sizes) if d else []) or s.note
        cells = (
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
        t.add_row(*[cells[k] for k in keep])
    if diff:
        for s in diff.missing:
            cells = (
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
            t.add_row(*[cells[k] for k in keep])
    return t


def dataflow_differences(trace: Trace, diff: TraceDiff | None) -> list[str]:
    """``step: difference`` lines for the steps that differ (the compact table's footnotes)."""
    if not diff:
        return []
    out = []
    for s in trace.steps:
        d = diff.steps.get(s.key)
        if d and (d.structural or d.sizes):
            mark = "△" if d.marked else "≠"
            out.append(f"{mark} {s.label}: " + "; ".join(d.structural + d.sizes))
    out += [f"△ {s.label}: absent (present in {diff.reference})" for s in diff.missing]
    return out


def lookups_rich(trace: Trace) -> Table:
    """The rows each embedding table was indexed with, one column per position (a traced text,
    `Trace.lookups`), and the sum they make: token + segment + position → (B, T, H)."""
    lk = trace.lookups
    T = len(lk["input_ids"])
    t = Table(
        title="input embedding = token row + segment row + position row, at each position",
        box=box.SIMPLE_HEAD,
    )
    t.add_column("table", no_wrap=True)
    for i in range(T):
        t.add_column(str(i), justify="right")
    t.add_row("token", *lk["tokens"])
    t.add_row("token row (input_ids)", *map(str, lk["input_ids"]))
    t.add_row("segment row (token_type_ids)", *map(str, lk["token_type_ids"]))
    t.add_row("position row (position_ids)", *map(str, lk["position_ids"]))
    return t


def lookups_sum_text(trace: Trace) -> str:
    """One line: the three lookups' traced shapes and their sum, with the segment ids as the
    walkthrough writes them (``00000111``)."""
    shapes = {
        s.key.rsplit(".", 1)[-1]: s.output_shape
        for s in trace.steps
        if s.block == "embeddings" and s.depth == 1 and s.kind == "Embedding"
    }
    parts = [f"{k} {shapes[k]}" for k in ("token", "segment", "position") if k in shapes]
    segments = "".join(map(str, trace.lookups["token_type_ids"]))
    first = next(iter(shapes.values()), None)
    return f"segment ids {segments}: " + " + ".join(parts) + f" = sum {first} → LayerNorm → dropout"


def legend_text(trace: Trace, diff: TraceDiff | None = None) -> str:
    """The legend entries of the symbols ``trace`` uses, on one line; with ``diff``, also
    what the marks of the first column mean."""
    marks = (
        [
            f"≠: only sizes differ from {diff.reference} (H, I, N, L, V)",
            f"△: the structure differs from {diff.reference} (another component, or a "
            "per-head width Dh that changes the score scaling)",
        ]
        if diff
        else []
    )
    return "  ".join(marks + [f"{k}: {LEGEND[k]}" for k in trace.symbols if k in LEGEND])


def models_rich(rows: list[dict[str, Any]]) -> Table:
    """The family table (``rows``, columns `COLUMNS`) as a rich `Table`."""
    t = Table(title="The BERT family (parameters counted from the code)")
    for col in COLUMNS:
        t.add_column(
            col,
            justify="right" if col in ("parameters", "published", "stated") else "left",
            overflow="fold",
        )
    for r in rows:
        cells = [
            "" if r[c] is None else (f"{r[c]:,}" if isinstance(r[c], int) else str(r[c]))
            for c in COLUMNS
        ]
        t.add_row(*cells)
    return t


#: Short numeric fields packed on one line in `models_folded`; the rest get a line each.
_PACKED = ("layers", "hidden", "heads", "d_k", "ffn", "vocab", "segments")


def models_folded(rows: list[dict[str, Any]], width: int = 80) -> str:
    """The family table as one block per model, every line at most ``width`` characters: for a
    narrow terminal or a pipe, where the 12-column table cannot be read."""

    def cell(v: Any) -> str:
        return "" if v is None else (f"{v:,}" if isinstance(v, int) else str(v))

    blocks = []
    for r in rows:
        lines = [f"{r['model']}: {cell(r.get('parameters'))} parameters"]
        if r.get("published") is not None:
            lines[0] += f" (published {cell(r['published'])})"
        if r.get("stated") is not None:
            lines[0] += f", stated {r['stated']}"
        packed = [f"{c} {cell(r[c])}" for c in COLUMNS if c in _PACKED and r.get(c) is not None]
        lines += textwrap.wrap(
            " · ".join(packed), width, initial_indent="  ", subsequent_indent="    "
        )
        for c in COLUMNS:
            if (
                c in _PACKED
                or c in ("model", "parameters", "published", "stated")
                or r.get(c) is None
            ):
                continue
            lines += textwrap.wrap(
                f"{c}: {cell(r[c])}", width, initial_indent="  ", subsequent_indent="    "
            )
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"
