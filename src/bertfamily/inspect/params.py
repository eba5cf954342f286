"""The parameter table: every component of a model in dataflow order, with its output shape and
parameter count, subtotals per block and the total — a Keras-style model summary built from
the code.

Counts come from the full-size model built on the meta device (exact, no memory); the order and
the output shapes come from a traced forward pass of the same model with fewer layer steps and
a small vocabulary (shapes are symbolic, so they do not depend on those sizes). Shared weights
(ALBERT's layers, the MLM decoder tied to the token embedding) are counted once.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import nn

from ..config import EncoderConfig
from .models import DEFAULT_TEACHER_HIDDEN_SIZE, meta_model, resolve_config
from .symbols import config_sizes, evaluate, symbol_table
from .trace import Trace, trace


@dataclass
class ParamRow:
    """One row of the table.

    Attributes:
        block: the part it belongs to ("embeddings", "layer 0", "pooler", "mlm_head"...).
        name: module path in the model (``encoder.layers.0.attention``) or a description.
        kind: component class name.
        output_shape: symbolic output shape, e.g. "(B, T, H)" ("" when not traced).
        params: parameters counted on this row (0 for reuse of shared weights).
        shared: True when the row reuses weights counted on an earlier row.
        note: e.g. "runs layer 0's weights" or "tied to encoder.embeddings.token".
        part: "trunk" (run by the encoder's forward: the published base-model count) or "head"
            (run by a head: MLM, pair head, DeBERTa's enhanced mask decoder with its absolute
            position table).
    """

    block: str
    name: str
    kind: str
    output_shape: str
    params: int
    shared: bool = False
    note: str = ""
    part: str = "trunk"


@dataclass
class ParamTable:
    """Rows in dataflow order, per-block subtotals and the total."""

    name: str
    config: EncoderConfig
    heads: list[str]
    rows: list[ParamRow]
    symbols: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        """All parameters, trunk and heads."""
        return sum(r.params for r in self.rows)

    @property
    def trunk_total(self) -> int:
        """Parameters the encoder trunk runs (base model + pooler: the published figure)."""
        return sum(r.params for r in self.rows if r.part == "trunk")

    @property
    def head_total(self) -> int:
        """Parameters only the heads run (``total - trunk_total``)."""
        return self.total - self.trunk_total

    def subtotals(self) -> dict[str, int]:
        """Block -> parameters, in dataflow order."""
        out: dict[str, int] = {}
        for r in self.rows:
            out[r.block] = out.get(r.block, 0) + r.params
        return out

    def concrete(self, shape: str) -> str:
        """ "(B, T, H)" -> "(B, T, 768)": the model's sizes, B and T left symbolic."""
        if not shape:
            return ""
        table = {k: v for k, v in self.symbols.items() if k not in ("B", "T")}
        parts = []
        for part in shape.strip("()").split(", "):
            try:
                parts.append(str(evaluate(f"({part})", table)[0]))
            except ValueError:
                parts.append(part)
        return "(" + ", ".join(parts) + ")"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict: totals, block subtotals and rows."""
        return {
            "name": self.name,
            "heads": self.heads,
            "total": self.total,
            "trunk_total": self.trunk_total,
            "head_total": self.head_total,
            "subtotals": self.subtotals(),
            "rows": [dataclasses.asdict(r) for r in self.rows],
        }


def _shape_trace(config: EncoderConfig, heads: list[str], teacher_hidden_size: int) -> Trace:
    """A trace of the same architecture with a small vocabulary: its symbolic shapes are the
    full model's (V is distinct from every other size either way)."""
    sizes = config_sizes(config) | {teacher_hidden_size}
    v = 1009
    while v in sizes or v <= config.pad_token_id:
        v += 1
    return trace(config.replace(vocab_size=v), heads=heads, teacher_hidden_size=teacher_hidden_size)


def parameter_table(
    model: str | Path | EncoderConfig,
    *,
    heads: list[str] | tuple[str, ...] = (),
    vocab_size: int | None = None,
    condition_size: int | None = None,
    teacher_hidden_size: int = DEFAULT_TEACHER_HIDDEN_SIZE,
) -> ParamTable:
    """The parameter table of a preset, checkpoint directory (its config) or config.

    Args:
        model: preset name, model directory or EncoderConfig.
        heads: heads to include ("mlm", "nsp"/"sop", the task heads, and the objective heads
            "sbo" and "distill" of `inspect.models.OBJECTIVE_HEADS`).
        vocab_size: override V (21128 for Chinese BERT-base).
        condition_size: turn the norms into Conditional LayerNorms of condition size C.
        teacher_hidden_size: H_T of the "distill" head's projections (default BERT-base's 768).

    Returns:
        A `ParamTable` whose ``total`` equals the model's parameter count (shared tensors once).

    Raises:
        ValueError: see `resolve_config` and `build_heads`.
    """
    name, config = resolve_config(model, vocab_size=vocab_size, condition_size=condition_size)
    heads = list(heads)
    full = meta_model(config, heads, teacher_hidden_size=teacher_hidden_size)
    shapes = _shape_trace(config, heads, teacher_hidden_size)
    builder = _RowBuilder(full, shapes)
    for index, (top, children) in enumerate(builder.blocks):
        if not top.trunk:
            builder.head_block(index, top, children)
        elif top.key.endswith("layers.*"):
            builder.layer_steps(top, children, config.layer_schedule)
        else:
            builder.emit(top.key.removeprefix("encoder."), top, children, _same)
    _tied_rows(full, builder.rows, builder.modules)
    builder.leftover_rows()
    return ParamTable(
        name=name, config=config, heads=heads, rows=builder.rows, symbols=symbol_table(config, 0, 0)
    )


def _same(key: str) -> str:
    """A traced step's key is its module path (no layer index to fill in)."""
    return key


def _symbols(step: Any) -> str:
    """A traced step's symbolic output shape, "" when it has none."""
    return step.output_symbols[0] if step.output_symbols else ""


class _RowBuilder:
    """The rows of one table, built block by block in dataflow order; each parameter is
    counted on the first row that reaches it (shared tensors once)."""

    def __init__(self, full: nn.Module, shapes: Trace) -> None:
        self.full = full
        self.modules = dict(full.named_modules())
        self.counted: set[int] = set()
        self.rows: list[ParamRow] = []
        steps = [s for s in shapes.steps if s.block != "inputs" and not s.kind.startswith("op:")]
        self.blocks: list[tuple[Any, list[Any]]] = []  # (top-level step, its depth-1 children)
        for s in steps:
            if s.depth == 0:
                self.blocks.append((s, []))
            elif s.depth == 1 and self.blocks:
                self.blocks[-1][1].append(s)
        # Modules that run as top-level steps of their own, or only inside a head: a parent's
        # leftover count skips them (DeBERTa's encoder.embeddings.position, run only by the
        # enhanced mask decoder).
        self.run_alone = {top.key for top, _ in self.blocks if "*" not in top.key} | {
            s.key
            for s in steps
            if not s.trunk and "*" not in s.key and s.key.startswith("encoder.")
        }

    def count(self, module: nn.Module, recurse: bool = True) -> int:
        """Parameters of ``module`` not counted yet (now counted)."""
        new = [p for p in module.parameters(recurse=recurse) if id(p) not in self.counted]
        self.counted.update(id(p) for p in new)
        return sum(p.numel() for p in new)

    def emit(self, block: str, top, children, path_of, part: str = "trunk", note: str = "") -> None:
        """The rows of one top-level step: itself when it has no traced children, else one row
        a child, its own direct parameters and what it holds that the forward did not run."""
        top_module = self.modules.get(path_of(top.key))
        if top_module is None:
            return
        if not children:
            count = self.count(top_module)
            self.rows.append(
                ParamRow(
                    block, path_of(top.key), top.kind, _symbols(top), count, note=note, part=part
                )
            )
            return
        for c in children:
            m = self.modules.get(path_of(c.key))
            if m is not None:
                borrowed = part == "head" and c.key.startswith("encoder.")
                self.rows.append(
                    ParamRow(
                        block,
                        path_of(c.key),
                        c.kind,
                        _symbols(c),
                        self.count(m),
                        part=part,
                        note=_borrowed(block) if borrowed else "",
                    )
                )
        own = [
            (n, p)
            for n, p in top_module.named_parameters(recurse=False)
            if id(p) not in self.counted
        ]
        for n, p in own:
            self.counted.add(id(p))
            self.rows.append(
                ParamRow(
                    block,
                    f"{path_of(top.key)}.{n}",
                    "Parameter",
                    _symbols(top),
                    p.numel(),
                    part=part,
                )
            )
        self._not_run_row(block, top, top_module, path_of, part)

    def _not_run_row(self, block: str, top, top_module: nn.Module, path_of, part: str) -> None:
        """Whatever the block owns that the traced forward did not run (kept for checkpoints),
        except submodules that run as steps of their own elsewhere."""
        prefix = path_of(top.key) + "."
        elsewhere = (
            {
                id(p)
                for key in self.run_alone
                if key.startswith(prefix)
                for p in self.modules[key].parameters()
            }
            if self.run_alone
            else set()
        )
        rest = [
            p
            for p in top_module.parameters()
            if id(p) not in self.counted and id(p) not in elsewhere
        ]
        self.counted.update(id(p) for p in rest)
        if rest:
            self.rows.append(
                ParamRow(
                    block,
                    f"{path_of(top.key)} (not run in this forward)",
                    "Parameter",
                    "",
                    sum(p.numel() for p in rest),
                    part=part,
                )
            )

    def consumer(self, index: int) -> str:
        """The first later top-level step outside the encoder: the head that runs a trunk
        module outside the trunk's forward."""
        later = (t.key for t, _ in self.blocks[index + 1 :] if not t.key.startswith("encoder."))
        return next(later, "head")

    def head_block(self, index: int, top, children) -> None:
        """A top-level step outside the trunk's forward: a head, or a trunk module that only a
        head runs (counted with that head)."""
        if top.key.startswith("encoder."):  # a trunk module that only a head runs
            head = self.consumer(index)
            self.emit(head, top, children, _same, "head", _borrowed(head))
        else:
            note = top.operation if not children and not top.params else ""
            self.emit(top.key, top, children, _same, "head", note)

    def layer_steps(self, top, children, schedule) -> None:
        """One block per layer step; a step that reruns an earlier step's weights (ALBERT's
        sharing) gets one zero-count row."""
        first_use: dict[int, int] = {}
        for i, u in enumerate(schedule):
            sub = lambda key, u=u: key.replace("*", str(u), 1)  # noqa: E731
            if u in first_use:
                self.rows.append(
                    ParamRow(
                        f"layer {i}",
                        sub(top.key),
                        top.kind,
                        top.output_symbols[0],
                        0,
                        shared=True,
                        note=f"runs the weights of layer step {first_use[u]} (shared)",
                    )
                )
                continue
            first_use[u] = i
            self.emit(f"layer {i}", top, children, sub)

    def leftover_rows(self) -> None:
        """A row for each parameter of modules no forward step reached."""
        leftover = [(n, p) for n, p in self.full.named_parameters() if id(p) not in self.counted]
        for n, p in leftover:
            self.counted.add(id(p))
            self.rows.append(
                ParamRow(
                    n.split(".")[0],
                    n,
                    "Parameter",
                    "",
                    p.numel(),
                    note="not run in this forward",
                    part="trunk" if n.startswith("encoder.") else "head",
                )
            )


def _tied_rows(model: nn.Module, rows: list[ParamRow], modules: dict[str, nn.Module]) -> None:
    """A zero-count row for each head whose decoder reuses another module's weight."""
    owner = {id(p): n for n, p in model.named_parameters()}
    for path, m in modules.items():
        w = getattr(type(m), "decoder_weight", None) and m.decoder_weight
        if w is None or id(w) not in owner or owner[id(w)].startswith(path + "."):
            continue
        at = max((i for i, r in enumerate(rows) if r.name.startswith(path + ".")), default=None)
        row = ParamRow(
            path,
            f"{path}.decoder",
            "tied weight",
            "",
            0,
            shared=True,
            note=f"tied to {owner[id(w)]}",
            part="head",
        )
        if at is None:
            rows.append(row)
        else:
            row.block = rows[at].block
            row.output_shape = rows[at].output_shape
            rows.insert(at, row)


def _borrowed(head: str) -> str:
    """The note of a trunk module that only a head runs."""
    return f"owned by the encoder but run only by {head}, not by the trunk: counted with the heads"
