"""Symbolic shape names: turn a concrete shape like (3, 12, 16, 64) into "(B, N, T, Dh)".

The names are the package's shape legend (config.py): B batch, T sequence, S key length,
H hidden, N heads, Dh head dim, I FFN inner, E embedding (ALBERT), V vocab, W window,
R relative positions, C condition size, L layers. Sizes are matched against the values of one
config and one batch, so a size that two symbols share is ambiguous: the first symbol of
`symbol_table`'s order wins (B and T first). Callers pick B and T distinct from the config's
sizes (`choose_batch_shape`) so that cannot happen for them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..config import EncoderConfig

# Optional config fields that add a symbol when a family's branch defines them:
# field name -> (symbol, function of the field's value giving the size it stands for).
# Longformer: the configured window is two-sided (W one-sided = window / 2; per-layer lists use
# the first layer's value). DeBERTa: relative distances are clipped to ±R.
EXTRA_SYMBOLS: dict[str, tuple[str, Any]] = {
    "attention_window": ("W", lambda v: (v[0] if isinstance(v, (list, tuple)) else v) // 2),
    "max_relative_positions": ("R", lambda v: v if isinstance(v, int) and v > 0 else None),
    "condition_size": ("C", lambda v: v),
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
    "L": "layers",
}


def symbol_table(config: EncoderConfig, batch: int, seq_len: int) -> dict[str, int]:
    """Symbol -> size for one config and batch shape, in matching priority order.

    E appears only when it differs from H (ALBERT); W, R, C only when the config has the field
    (see `EXTRA_SYMBOLS`) with a usable value.
    """
    table = {"B": batch, "T": seq_len, "N": config.num_attention_heads, "Dh": config.head_dim,
             "H": config.hidden_size}
    if config.embedding_size != config.hidden_size:
        table["E"] = config.embedding_size
    table["I"] = config.intermediate_size
    table["V"] = config.vocab_size
    for field_name, (symbol, fn) in EXTRA_SYMBOLS.items():
        value = getattr(config, field_name, None)
        if value is not None:
            size = fn(value)
            if isinstance(size, int) and size > 0:
                table[symbol] = size
    return table


def config_sizes(config: EncoderConfig) -> set[int]:
    """Every size a symbol of the config stands for (batch and sequence excluded)."""
    return {v for k, v in symbol_table(config, 0, 0).items() if k not in ("B", "T")}


def choose_batch_shape(config: EncoderConfig | list[EncoderConfig], batch: int = 5,
                       seq_len: int = 16) -> tuple[int, int]:
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


def dim_symbol(size: int, table: dict[str, int]) -> str:
    """Name of one size: a symbol ("H"), a small multiple ("3H"), a band ("2W+1"), or the
    number itself when nothing matches."""
    for name, value in table.items():
        if size == value:
            return name
    for name, value in table.items():
        if name in ("B", "T") or value <= 1:
            continue
        for k in (2, 3, 4):
            if size == k * value:
                return f"{k}{name}"
            if size == k * value + 1:
                return f"{k}{name}+1"
    return str(size)


def shape_symbols(shape: Sequence[int], table: dict[str, int]) -> str:
    """"(B, T, H)" for a concrete shape."""
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
        part = part.strip()
        if part.isdigit():
            out.append(int(part))
            continue
        plus = 0
        if part.endswith("+1"):
            part, plus = part[:-2], 1
        k = 1
        if part[:1].isdigit():
            k, part = int(part[0]), part[1:]
        if part not in table:
            raise ValueError(f"unknown shape symbol {part!r} in {symbolic!r}; known: {sorted(table)}")
        out.append(k * table[part] + plus)
    return tuple(out)
