"""Symbolic shape names: turn a concrete shape like (3, 12, 16, 64) into "(B, N, T, Dh)".

The names are the package's shape legend (config.py): B batch, T sequence, S key length,
H hidden, N heads, Dh head dim, I FFN inner, E embedding (ALBERT), V vocab, W window,
R relative positions, C condition size, G global tokens, L layers. Sizes are matched against
the values of one config and one batch, so a size that two symbols share is ambiguous: the first
symbol of `symbol_table`'s order wins (B and T first). Callers pick B and T distinct from the
config's sizes (`choose_batch_shape`) so that cannot happen for them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ..config import EncoderConfig
from ..errors import InputError

# Optional config fields that add a symbol when a family's branch defines them:
# field name -> (symbol, function of the field's value giving the size it stands for).
# Longformer: the configured window is two-sided (W one-sided = window / 2; per-layer lists use
# the first layer's value). DeBERTa: relative distances are clipped to ±R.
EXTRA_SYMBOLS: dict[str, tuple[str, Any]] = {
    "attention_window": ("W", lambda v: (v[0] if isinstance(v, (list, tuple)) else v) // 2),
    "max_relative_positions": ("R", lambda v: v if isinstance(v, int) and v > 0 else None),
    "condition_size": ("C", lambda v: v),
}
# When a field of EXTRA_SYMBOLS applies: W only with windowed attention, R only with relative
# attention (every config has both fields, with defaults).
EXTRA_SYMBOL_WHEN: dict[str, Any] = {
    "attention_window": lambda c: getattr(c, "attention_kind", "") == "windowed",
    "max_relative_positions": lambda c: bool(getattr(c, "relative_attention", False)),
}

LEGEND: dict[str, str] = {
    "B": "batch size",
    "T": "sequence length (tokens)",
    "S": "key length (= T in self-attention)",
    "H": "hidden size",
    "N": "attention heads",
    "Dh": "head dimension H / N",
    "I": "feed-forward inner size",
    "E": "embedding size (ALBERT's factorised E < H)",
    "V": "vocabulary size",
    "W": "one-sided attention window (Longformer)",
    "R": "maximum relative distance (DeBERTa)",
    "C": "condition size (Conditional LayerNorm)",
    "G": "tokens with global attention in the traced batch (Longformer)",
    "L": "layers",
    "M": "span tokens the SBO head predicts in the traced batch (SpanBERT)",
    "Ht": "teacher hidden size of the distillation projections (TinyBERT W_e, W_h)",
}


def symbol_table(config: EncoderConfig, batch: int, seq_len: int) -> dict[str, int]:
    """Symbol -> size for one config and batch shape, in matching priority order.

    E appears only when it differs from H (ALBERT); W, R, C only when the config has the field
    (see `EXTRA_SYMBOLS`) with a usable value.
    """
    table = {
        "B": batch,
        "T": seq_len,
        "N": config.num_attention_heads,
        "Dh": config.head_dim,
        "H": config.hidden_size,
    }
    if config.embedding_size != config.hidden_size:
        table["E"] = config.embedding_size
    table["I"] = config.intermediate_size
    table["V"] = config.vocab_size
    for field_name, (symbol, fn) in EXTRA_SYMBOLS.items():
        if field_name in EXTRA_SYMBOL_WHEN and not EXTRA_SYMBOL_WHEN[field_name](config):
            continue  # the field has a default in every config but means nothing here
        value = getattr(config, field_name, None)
        if value is not None:
            size = fn(value)
            if isinstance(size, int) and size > 0:
                table[symbol] = size
    return table


def config_sizes(config: EncoderConfig) -> set[int]:
    """Every size a symbol of the config stands for (batch and sequence excluded), plus the
    band width 2W + 1 of windowed attention (a size the traced tensors have)."""
    table = symbol_table(config, 0, 0)
    sizes = {v for k, v in table.items() if k not in ("B", "T")}
    if "W" in table:
        sizes.add(2 * table["W"] + 1)
    return sizes


def choose_batch_shape(
    config: EncoderConfig | list[EncoderConfig], batch: int = 5, seq_len: int = 16
) -> tuple[int, int]:
    """(B, T) near the requested values but distinct from each other and from every size of the
    config(s), so each traced size maps to exactly one symbol (one shape for a list of configs
    compared side by side). T stays within the position table."""
    configs = config if isinstance(config, list) else [config]
    # 1-4 occur as structural counts (the pair head's 2 classes, the 3 of fused Q/K/V).
    taken = {1, 2, 3, 4}.union(*(config_sizes(c) for c in configs))
    config = min(configs, key=lambda c: c.max_sequence_length)
    while batch in taken:
        batch += 1
    taken.add(batch)
    while seq_len in taken and seq_len < config.max_sequence_length:
        seq_len += 1
    return batch, min(seq_len, config.max_sequence_length)


# Symbols that may be added to another form: "G+2W+1", the global-key columns and the band of
# windowed attention side by side.
ADDITIVE_SYMBOLS = ("G",)


def dim_symbol(size: int, table: dict[str, int]) -> str:
    """Name of one size: a symbol ("H"), a small multiple ("3H"), a band ("2W+1"), the relative
    distances of a sequence ("2T-1"), global columns beside a band ("G+2W+1"), or the number
    itself when nothing matches."""
    for name, value in table.items():
        if size == value:
            return name
    if "G" in table and "W" in table and size == table["G"] + 2 * table["W"] + 1:
        return "G+2W+1"  # global-key columns beside the band (before small multiples match)
    for name, value in table.items():
        if name in ("B", "T") or value <= 1:
            continue
        for k in (2, 3, 4):
            if size == k * value:
                return f"{k}{name}"
            if size == k * value + 1:
                return f"{k}{name}+1"
    if "T" in table and table["T"] > 1 and size == 2 * table["T"] - 1:
        return "2T-1"
    for name in ADDITIVE_SYMBOLS:
        value = table.get(name)
        if value and size > value:
            rest = dim_symbol(size - value, {k: v for k, v in table.items() if k != name})
            if not rest.isdigit() and "+" in rest:
                return f"{name}+{rest}"
    return str(size)


def shape_symbols(shape: Sequence[int], table: dict[str, int]) -> str:
    """ "(B, T, H)" for a concrete shape."""
    return "(" + ", ".join(dim_symbol(int(d), table) for d in shape) + ")"


def evaluate(symbolic: str, table: dict[str, int]) -> tuple[int, ...]:
    """Inverse of `shape_symbols`: "(B, N, T, Dh)" -> concrete sizes (used by tests and the
    explorer to show both forms).

    Raises:
        ValueError: a name that is not in ``table``.
    """
    inner = symbolic.strip().removeprefix("(").removesuffix(")")
    if not inner.strip():
        return ()
    out = []
    for part in inner.split(","):
        total = 0
        # A sum of terms, each a number or a symbol with an optional one-digit factor:
        # "768", "H", "3H", "2W+1", "2T-1", "G+2W+1".
        for sign, term in re.findall(r"([+-]?)\s*([^+-]+)", part.strip()):
            term = term.strip()
            if term.isdigit():
                value = int(term)
            else:
                k = 1
                if term[:1].isdigit():
                    k, term = int(term[0]), term[1:]
                if term not in table:
                    raise InputError(
                        f"unknown shape symbol {term!r} in {symbolic!r}; known: {sorted(table)}"
                    )
                value = k * table[term]
            total += -value if sign == "-" else value
        out.append(total)
    return tuple(out)
