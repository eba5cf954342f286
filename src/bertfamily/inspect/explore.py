"""The explorer page: the chosen models side by side, step by step, as one self-contained HTML
file (inline CSS and JavaScript, nothing fetched), with the traced shapes, parameter counts,
differences from BERT-base highlighted, a legend, a model picker and the comparison table."""

from __future__ import annotations

import html
import json
import logging
from pathlib import Path

from ..config import EncoderConfig
from ..errors import UnknownNameError
from ..presets import FAMILY, PRESETS
from .compare import COLUMNS, REFERENCE, TraceDiff, comparison_rows, diff_traces
from .models import meta_model
from .symbols import LEGEND, choose_batch_shape
from .trace import Step, Trace, trace

log = logging.getLogger(__name__)


def default_heads(config: EncoderConfig) -> list[str]:
    """The pretraining heads a config names: MLM, and NSP/SOP when it has a pair head."""
    return ["mlm"] + (["pair"] if config.pair_head and config.use_pooler else [])


def align(traces: list[Trace]) -> list[Step]:
    """One row per step role across all traces: the first trace's order, with each other
    trace's extra steps inserted after the step that precedes them there."""
    merged: list[Step] = []
    index: dict[str, int] = {}
    for tr in traces:
        pos = -1
        for s in tr.steps:
            if s.key in index:
                pos = index[s.key]
                continue
            merged.insert(pos + 1, s)
            pos += 1
            index = {m.key: i for i, m in enumerate(merged)}
    return merged


def collect(
    names: list[str] | None = None,
    *,
    vocab_size: int | None = None,
    batch: int | None = None,
    seq_len: int | None = None,
) -> tuple[list[str], dict[str, Trace], dict[str, TraceDiff]]:
    """Trace every available model of ``names`` (default: the family) and diff with BERT-base.

    Returns:
        (names in order, traces of the available ones, diffs of the available ones).

    Raises:
        KeyError: a name that is not a preset.
    """
    names = list(names or FAMILY)
    for n in names:
        if n not in PRESETS:
            raise UnknownNameError(f"unknown model {n!r}; known: {', '.join(PRESETS)}")
    traces: dict[str, Trace] = {}
    wanted = [n for n in names if n in PRESETS]
    if REFERENCE in PRESETS and REFERENCE not in wanted:
        wanted.insert(0, REFERENCE)  # needed for the differences even when not shown
    configs = {n: EncoderConfig.from_preset(n) for n in wanted}
    if vocab_size is not None:
        configs = {  # special ids beyond the new vocabulary (ModernBERT's 50283) become 0
            n: c.replace(
                vocab_size=vocab_size,
                **(
                    {"pad_token_id": 0, "sep_token_id": None}
                    if c.pad_token_id >= vocab_size
                    else {}
                ),
            )
            for n, c in configs.items()
        }
    if configs and (batch is None or seq_len is None):  # one (B, T) for every column
        b, t = choose_batch_shape(list(configs.values()), batch or 5, seq_len or 16)
        batch, seq_len = batch or b, seq_len or t
    for n, c in configs.items():
        log.info("tracing %s", n)
        tr = trace(c, heads=default_heads(c), batch=batch, seq_len=seq_len)
        tr.name = n
        traces[n] = tr
    ref = traces.get(REFERENCE)
    diffs = {n: diff_traces(ref, tr) for n, tr in traces.items()} if ref else {}
    return names, traces, diffs


def build_page(
    names: list[str] | None = None,
    *,
    vocab_size: int | None = None,
    batch: int | None = None,
    seq_len: int | None = None,
) -> str:
    """The explorer page as an HTML string (see module docstring)."""
    names, traces, diffs = collect(names, vocab_size=vocab_size, batch=batch, seq_len=seq_len)
    shown = [traces[n] for n in names if n in traces]
    order = [traces[REFERENCE]] if REFERENCE in traces else []
    rows = align(order + [t for t in shown if t.name != REFERENCE])
    rows = [r for r in rows if any(r.key in t.by_key() for t in shown)] if shown else []
    totals = {
        n: meta_model(traces[n].config, default_heads(traces[n].config)).num_parameters(heads=True)
        for n in names
        if n in traces
    }
    comparison = comparison_rows([n for n in names if n in FAMILY] or None)
    return _render(names, traces, diffs, rows, totals, comparison)


def write_page(path: str | Path, names: list[str] | None = None, **kwargs) -> Path:
    """Write the explorer page atomically to ``path`` (.html)."""
    from ..files import atomic_write

    path = Path(path)
    page = build_page(names, **kwargs)
    atomic_write(path, lambda tmp: Path(tmp).write_text(page, encoding="utf-8"))
    return path


# ----------------------------------------------------------------------------------------------
def _e(text) -> str:
    return html.escape(str(text), quote=True)


def _comparison_text(value):
    """A comparison-table cell's text: ints with thousands separators, None as empty."""
    if isinstance(value, int):
        return f"{value:,}"
    return "" if value is None else value


def _cell(name: str, tr: Trace, diff: TraceDiff | None, row: Step) -> str:
    s = tr.by_key().get(row.key)
    if s is None:
        present = diff is not None and any(m.key == row.key for m in diff.missing)
        text = f"△ absent (in {REFERENCE})" if present else "—"
        cls = "absent struct" if present else "absent"
        return f'<td class="{cls}" data-model="{_e(name)}" data-key="{_e(row.key)}">{_e(text)}</td>'
    d = diff.steps.get(s.key) if diff else None
    cls = ["step", f"depth{min(s.depth, 3)}"]
    if d and d.marked:
        cls.append("struct")
    elif d and d.sizes:
        cls.append("sized")
    if s.kind.startswith("op:"):
        cls.append("op")
    mark = '<span class="tri">△</span>' if d and d.marked else ""
    outs = " ".join(s.output_symbols)
    nums = " ".join(str(tuple(shape)).replace(",)", ")") for _, shape in s.outputs)
    ins = " ".join(s.input_symbols)
    extra = []
    if s.params:
        extra.append(f'<span class="params">{s.params:,} params</span>')
    if s.repeat > 1 and s.depth == 0:
        extra.append(f'<span class="rep">× {s.repeat}</span>')
    if s.note:
        extra.append(f'<span class="note">{_e(s.note)}</span>')
    why = "; ".join((d.structural + d.sizes) if d else [])
    return (
        f'<td class="{" ".join(cls)}" data-model="{_e(name)}" data-key="{_e(s.key)}" '
        f'title="{_e(why)}">{mark}<div class="lbl">{_e(s.label)}</div>'
        f'<div class="opn">{_e(s.operation)}</div>'
        f'<div class="io">{_e(ins)}{" → " if ins else ""}<span class="shape">{_e(outs)}'
        f'</span></div><div class="numbers">{_e(nums)}</div>'
        f"{''.join(extra)}{f'<div class=why>{_e(why)}</div>' if why else ''}</td>"
    )


_CSS = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;\
color:#1d2330;background:#f6f7fb}
header{padding:16px 24px;background:#1d2a44;color:#fff}
header h1{margin:0 0 4px;font-size:20px} header p{margin:0;opacity:.8}
section{padding:12px 24px}
.legend span{display:inline-block;margin:2px 10px 2px 0} \
.legend b{font-family:ui-monospace,monospace}
.picker label{margin-right:12px;white-space:nowrap}
.key{display:inline-block;padding:1px 6px;border-radius:4px;margin-right:8px}
.wrap{overflow:auto;max-height:80vh;border:1px solid #d6dae5;background:#fff}
table.flow{border-collapse:separate;border-spacing:0;font-size:12px}
table.flow th{position:sticky;top:0;background:#e9edf6;z-index:2;padding:6px 8px;min-width:190px;
 text-align:left;border-bottom:2px solid #b9c2d8;vertical-align:top}
table.flow th.rowkey,table.flow td.rowkey{position:sticky;left:0;background:#f1f3f9;z-index:1;
 min-width:150px;font-family:ui-monospace,monospace;font-size:11px;color:#55607a}
table.flow th.rowkey{z-index:3}
table.flow td{border-bottom:1px solid #eceff5;border-right:1px solid #eceff5;\
padding:4px 8px;vertical-align:top}
td.depth1{padding-left:18px} td.depth2{padding-left:30px;background:#fbfcfe} \
td.depth3{padding-left:42px}
td.op .lbl{color:#55607a}
.lbl{font-weight:600} .opn{color:#4a5368} .io,.numbers{font-family:ui-monospace,monospace}
.shape{color:#0b5cad;font-weight:600} .numbers{color:#7a8296;font-size:11px}
.params{display:inline-block;margin-right:6px;color:#2e7d32} .rep{color:#6a1b9a;font-weight:600}
.note{display:block;color:#6a1b9a;font-size:11px} .why{color:#8a5a00;font-size:11px}
td.struct{background:#fff4d6} td.sized .numbers{color:#b26a00}
td.absent{color:#aab0c0;font-style:italic} td.absent.struct{background:#fde8e8;color:#a33}
.tri{float:right;color:#d18000;font-weight:700}
th .meta{font-weight:400;font-size:11px;color:#4a5368} \
th .notes{font-weight:400;font-size:11px;color:#8a5a00}
table.cmp{border-collapse:collapse;font-size:12px;background:#fff}
table.cmp th,table.cmp td{border:1px solid #d6dae5;padding:4px 6px;text-align:left}
.num{text-align:right}
.hidden{display:none}
"""

_JS = """
function applyPicker(){
  document.querySelectorAll('.picker input[data-col]').forEach(function(box){
    var col=box.getAttribute('data-col');
    document.querySelectorAll('[data-col="'+col+'"]').forEach(function(el){
      if(el!==box){el.classList.toggle('hidden',!box.checked);}
    });
  });
  var ops=document.getElementById('show-ops');
  document.querySelectorAll('tr.oprow').forEach(function(tr){tr.classList.toggle('hidden',!ops.checked);});
}
document.addEventListener('change',function(e){\
if(e.target.matches('.picker input')){applyPicker();}});
document.addEventListener('DOMContentLoaded',applyPicker);
"""


def _render(names, traces, diffs, rows, totals, comparison) -> str:
    symbols: list[str] = []
    for tr in traces.values():
        symbols += [k for k in tr.symbols if k not in symbols]
    legend = "".join(f"<span><b>{_e(k)}</b> {_e(LEGEND[k])}</span>" for k in symbols if k in LEGEND)
    picker = "".join(
        f'<label><input type="checkbox" data-col="c{i}" checked> {_e(n)}</label>'
        for i, n in enumerate(names)
    )
    head = ['<th class="rowkey">step</th>']
    for i, n in enumerate(names):
        tr = traces[n]
        c = tr.config
        notes = "; ".join(diffs[n].notes) if n in diffs else ""
        head.append(
            f'<th class="model" data-col="c{i}" data-model="{_e(n)}">{_e(n)}<div class="meta">'
            f"L={c.num_hidden_layers} H={c.hidden_size} N={c.num_attention_heads} "
            f"Dh={c.head_dim} I={c.intermediate_size} V={c.vocab_size}<br>"
            f"{totals[n]:,} parameters (with heads) · "
            f"{', '.join(f'{k}={v}' for k, v in tr.symbols.items() if k in ('B', 'T'))}</div>"
            f'<div class="notes">{_e(notes)}</div></th>'
        )
    body = []
    for r in rows:
        cls = "oprow" if r.kind.startswith("op:") else ""
        cells = [f'<td class="rowkey" title="{_e(r.key)}">{_e(r.label)}</td>']
        for i, n in enumerate(names):
            cells.append(
                _cell(n, traces[n], diffs.get(n), r).replace("<td ", f'<td data-col="c{i}" ', 1)
            )
        body.append(f'<tr class="{cls}" data-key="{_e(r.key)}">{"".join(cells)}</tr>')
    cmp_head = "".join(f"<th>{_e(c)}</th>" for c in COLUMNS)
    cmp_rows = []
    for row in comparison:
        tds = "".join(
            f'<td class="{"num" if isinstance(row[c], int) else ""}">'
            f"{_e(_comparison_text(row[c]))}</td>"
            for c in COLUMNS
        )
        cmp_rows.append(f'<tr data-model="{_e(row["model"])}">{tds}</tr>')
    data = json.dumps({n: t.to_dict() for n, t in traces.items()}, ensure_ascii=False)
    data = data.replace("</", "<\\/")  # keep the JSON from closing its script element
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>bertfamily — the BERT family side by side</title>
<style>{_CSS}</style></head>
<body>
<header><h1>The BERT family, side by side</h1>
<p>Every step, shape and parameter count below was traced from one forward pass of the running
code (hooks on a real forward pass, random weights). \
<span class="key" style="background:#fff4d6;color:#1d2330">△ differs from {REFERENCE}</span>
<span class="key" style="background:#fde8e8;color:#a33">△ absent</span>
<span class="key" style="background:#fff;color:#b26a00">other sizes</span></p></header>
<section class="legend"><strong>Shape letters:</strong> {legend}</section>
<section class="picker"><strong>Models:</strong> {picker}
<label><input type="checkbox" id="show-ops" checked> operations inside components</label></section>
<section><div class="wrap"><table class="flow" id="flow"><thead><tr>{"".join(head)}</tr></thead>
<tbody>{"".join(body)}</tbody></table></div></section>
<section><h2>Comparison</h2><table class="cmp" id="comparison"><thead><tr>{cmp_head}</tr></thead>
<tbody>{"".join(cmp_rows)}</tbody></table></section>
<script type="application/json" id="trace-data">{data}</script>
<script>{_JS}</script>
</body></html>
"""
