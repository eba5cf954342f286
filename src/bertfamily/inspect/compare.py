"""Differences from BERT-base (computed by comparing traces) and the family comparison table
(computed from the presets; no torch)."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..config import EncoderConfig
from ..errors import InputError, UnknownNameError
from ..presets import FAMILY, PRESETS, PUBLISHED_PARAMETERS, STATED_PARAMETERS
from .notes import FIELD_NOTES

if TYPE_CHECKING:  # this module imports no torch: `bertfamily models` starts without it
    from .trace import Step, Trace

REFERENCE = "bert-base"

# The per-head width is the one size the family otherwise keeps (64): a different Dh changes the
# score scaling √Dh, so it is marked like a structural difference. Other sizes (H, I, N, L, V)
# scale the same design and are shown as plain size differences.
STRUCTURAL_SIZES = ("Dh",)

# Descriptive text of the family table that is not a config value (objectives live in the training
# code, tasks in the heads): documentation data, keyed by the family's preset names.
DESCRIPTIONS: dict[str, dict[str, str]] = {
    "bert-base": {"pretraining": "MLM + NSP", "tasks": "general NLU, QA, classification"},
    "bert-large": {"pretraining": "MLM + NSP", "tasks": "high-accuracy NLU"},
    "roberta-base": {"pretraining": "MLM, dynamic masking, no NSP", "tasks": "general NLU, robust"},
    "roberta-large": {
        "pretraining": "MLM, dynamic masking, no NSP",
        "tasks": "high-accuracy NLU, robust",
    },
    "albert-base": {"pretraining": "MLM + SOP", "tasks": "parameter-efficient NLU"},
    "distilbert-base": {
        "pretraining": "distillation (soft CE + MLM + cosine)",
        "tasks": "fast, light inference",
    },
    "spanbert-base": {"pretraining": "span MLM + SBO, no NSP", "tasks": "QA, coreference"},
    "deberta-base": {
        "pretraining": "MLM (+ enhanced mask decoder)",
        "tasks": "SuperGLUE-level NLU",
    },
    "deberta-v3-base": {
        "pretraining": "replaced token detection (ELECTRA-style), shared embeddings",
        "tasks": "SuperGLUE-level NLU",
    },
    "longformer-base": {
        "pretraining": "MLM (continued from RoBERTa)",
        "tasks": "long-document QA and classification",
    },
    "tinybert-4l": {"pretraining": "two-stage distillation", "tasks": "on-device NLU"},
    "bert-tiny": {"pretraining": "MLM + NSP (direct pretraining)", "tasks": "edge deployment"},
    "bert-base-chinese": {
        "pretraining": "MLM + NSP on Chinese text",
        "tasks": "Chinese classification, NER, QA",
    },
    "roformer-chinese-base": {
        "pretraining": "MLM on Chinese text (jieba words), rotary positions",
        "tasks": "Chinese classification, long-text similarity",
    },
    "ernie-3.0-base-zh": {
        "pretraining": "knowledge-masked MLM and continual multi-task pretraining",
        "tasks": "Chinese classification, NER, QA",
    },
    "mpnet-base": {
        "pretraining": "masked and permuted LM (MPNet)",
        "tasks": "sentence embeddings (all-mpnet-base-v2), NLU",
    },
    "modernbert-base": {
        "pretraining": "MLM (30% masking) on 2T tokens, 8192-token context",
        "tasks": "long-context retrieval, classification, code",
    },
    "modernbert-large": {
        "pretraining": "MLM (30% masking) on 2T tokens, 8192-token context",
        "tasks": "long-context retrieval, classification, code",
    },
    "gte-base": {
        "pretraining": "MLM, then multi-stage contrastive learning",
        "tasks": "sentence embeddings (gte-base-en-v1.5), retrieval",
    },
    "nomic-bert": {
        "pretraining": "MLM, then contrastive learning with task prefixes",
        "tasks": "sentence embeddings (nomic-embed-text-v1.5), retrieval",
    },
}


# ----------------------------------------------------------------------------------------------
@dataclass
class StepDiff:
    """How one step differs from the reference model's step with the same key.

    ``structural`` lists △ differences (absent from the reference, another symbolic shape,
    shared weights, another head dimension); ``sizes`` lists plain size differences.
    """

    structural: list[str] = field(default_factory=list)
    sizes: list[str] = field(default_factory=list)

    @property
    def marked(self) -> bool:
        """True when the step has a structural (△) difference."""
        return bool(self.structural)


@dataclass
class TraceDiff:
    """Differences of a whole trace from the reference: per step, the reference's steps this
    model lacks, and notes on the config fields that differ."""

    reference: str
    steps: dict[str, StepDiff]
    missing: list[Step]
    notes: list[str]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict; only the steps with differences are listed."""
        return {
            "reference": self.reference,
            "notes": self.notes,
            "missing": [s.key for s in self.missing],
            "steps": {
                k: {"structural": d.structural, "sizes": d.sizes}
                for k, d in self.steps.items()
                if d.structural or d.sizes
            },
        }


def _symbols_used(step: Step) -> set[str]:
    used: set[str] = set()
    for text in step.input_symbols + step.output_symbols:
        for part in text.strip("()").split(","):
            part = part.strip().lstrip("0123456789").removesuffix("+1")
            if part:
                used.add(part)
    return used


def diff_traces(ref: Trace, other: Trace) -> TraceDiff:
    """Compare ``other`` with ``ref`` step by step (by alignment key)."""
    ref_steps = ref.by_key()
    diffs: dict[str, StepDiff] = {}
    for step in other.steps:
        d = StepDiff()
        r = ref_steps.get(step.key)
        if r is None:
            d.structural.append(f"not in {ref.name}")
        else:
            if step.kind != r.kind and not step.kind.startswith("op:"):
                # Another component in the same place (DeBERTa's disentangled or Longformer's
                # windowed attention, a conditional norm): what it computes is the difference.
                d.structural.append(f"{step.kind}: {step.operation}")
            if step.output_symbols != r.output_symbols:
                d.structural.append(
                    f"output {', '.join(step.output_symbols)} vs {', '.join(r.output_symbols)}"
                )
            elif step.input_symbols != r.input_symbols:
                d.structural.append(
                    f"input {', '.join(step.input_symbols)} vs {', '.join(r.input_symbols)}"
                )
            if step.shared != r.shared:
                d.structural.append(step.note or "shared weights")
            for sym in sorted(_symbols_used(step) - {"B", "T"}):
                a, b = other.symbols.get(sym), ref.symbols.get(sym)
                if a is not None and b is not None and a != b:
                    text = f"{sym} = {a} ({ref.name}: {b})"
                    (d.structural if sym in STRUCTURAL_SIZES else d.sizes).append(text)
            if step.repeat != r.repeat and step.depth == 0:
                d.sizes.append(f"× {step.repeat} ({ref.name}: × {r.repeat})")
            if step.params != r.params and not d.sizes and step.params and r.params:
                d.sizes.append(f"{step.params:,} parameters ({ref.name}: {r.params:,})")
        diffs[step.key] = d
    keys = {s.key for s in other.steps}
    missing = [s for s in ref.steps if s.key not in keys]
    return TraceDiff(ref.name, diffs, missing, config_notes(other.config, ref.config))


def config_notes(config: EncoderConfig, ref: EncoderConfig | None = None) -> list[str]:
    """Short notes for the config fields whose note differs from the reference's."""
    out = []
    for fn in FIELD_NOTES.values():
        text = fn(config)
        if text and (ref is None or fn(ref) != text):
            out.append(text)
    return out


# ----------------------------------------------------------------------------------------------
COLUMNS = [
    "model",
    "layers",
    "hidden",
    "heads",
    "d_k",
    "ffn",
    "vocab",
    "segments",
    "positions",
    "special",
    "parameters",
    "published",
    "stated",
    "pretraining",
    "tasks",
]


def _positions(c: EncoderConfig) -> str:
    if c.position_embedding_type == "rotary":
        return f"rotary (RoPE, θ = {c.rotary_base:g}), {c.max_position_embeddings}"
    if c.attention_kind == "disentangled" or getattr(c, "position_biased_input", True) is False:
        return "relative (in attention)"
    text = "learned absolute"
    if c.position_scheme == "absolute_from_padding":
        text += ", from pad+1"
    if c.relative_attention_buckets:
        text += f" + {c.relative_attention_buckets} relative buckets"
    return f"{text}, {c.max_position_embeddings}"


def _segments(c: EncoderConfig) -> str:
    text = {0: "none", 1: "1 (unused)"}.get(c.type_vocab_size, str(c.type_vocab_size))
    return text + (f" + {c.task_type_vocab_size} task types" if c.use_task_id else "")


def comparison_rows(names: list[str] | None = None) -> list[dict[str, Any]]:
    """One row per model (default: the presets of `presets.FAMILY`): sizes from the preset,
    parameters of the base model + pooler (`EncoderConfig.parameter_count`, exact and equal to
    the built model, without importing torch), special mechanisms from the config's fields.

    Raises:
        KeyError: a name that is not a preset.
    """
    rows = []
    for name in names or FAMILY:
        desc = DESCRIPTIONS.get(name, {})
        row: dict[str, Any] = {k: None for k in COLUMNS}
        row.update(
            model=name,
            published=PUBLISHED_PARAMETERS.get(name),
            stated=STATED_PARAMETERS.get(name),
            pretraining=desc.get("pretraining", ""),
            tasks=desc.get("tasks", ""),
        )
        if name not in PRESETS:
            raise UnknownNameError(f"unknown model {name!r}; known: {', '.join(PRESETS)}")
        c = EncoderConfig.from_preset(name)
        row.update(
            layers=c.num_hidden_layers,
            hidden=c.hidden_size,
            heads=c.num_attention_heads,
            d_k=c.head_dim,
            ffn=(
                f"{c.hidden_size}→{c.intermediate_size}→{c.hidden_size}"
                if c.ffn_kind == "mlp"
                else f"{c.hidden_size}→2×{c.intermediate_size}→{c.hidden_size} (GLU)"
            ),
            vocab=c.vocab_size,
            segments=_segments(c),
            positions=_positions(c),
            special="; ".join(config_notes(c, None)) or "reference design, post-LN",
            parameters=c.parameter_count(),
        )
        rows.append(row)
    return rows


def format_rows(rows: list[dict[str, Any]], fmt: str) -> str:
    """Render comparison rows as "markdown", "csv" or "json".

    Raises:
        ValueError: another format.
    """
    if fmt == "json":
        return json.dumps(rows, indent=2, ensure_ascii=False)
    cell = lambda v: "" if v is None else (f"{v:,}" if isinstance(v, int) else str(v))  # noqa: E731
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow({k: "" if r[k] is None else r[k] for k in COLUMNS})
        return buf.getvalue()
    if fmt == "markdown":
        lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
        for r in rows:
            lines.append("| " + " | ".join(cell(r[k]).replace("|", "\\|") for k in COLUMNS) + " |")
        return "\n".join(lines) + "\n"
    raise InputError(f"format must be markdown, csv or json, got {fmt!r}")
