"""The one strict converter between Hugging Face state dicts and ours, in both directions."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from ..errors import CheckpointError, InputError
from .keymaps import FamilyMap, Join

log = logging.getLogger(__name__)


@dataclass
class LoadReport:
    """What a non-strict load left out. Keys are ours for `missing`, Hugging Face's otherwise."""

    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    mismatched: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)  # dropped on purpose (buffers, tied copies)
    # ours: parameters ordinary checkpoints do not have (e.g. Conditional LayerNorm's W_γ, W_β),
    # absent here and left at their initialisation; not an error.
    newly_initialized: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        """True when nothing is missing, unexpected or mismatched."""
        return not (self.missing or self.unexpected or self.mismatched)


# --- named transforms ----------------------------------------------------------------------------
def _concat(tensors: list[torch.Tensor], config: Any) -> torch.Tensor:
    return torch.cat(tensors, dim=0)


def _split(tensor: torch.Tensor, n: int, config: Any) -> list[torch.Tensor]:
    return list(tensor.chunk(n, dim=0))


def _deinterleave_heads(tensors: list[torch.Tensor], config: Any) -> torch.Tensor:
    """DeBERTa's fused in_proj (3H, H), rows [q0, k0, v0, q1, k1, v1, ...] per head of Dh rows,
    → ours (3H, H), rows [Q; K; V] with heads in order inside each block."""
    (w,) = tensors
    N = config.num_attention_heads
    return w.unflatten(0, (N, 3, -1)).transpose(0, 1).flatten(0, 2)  # (N,3,Dh,·)→(3,N,Dh,·)


def _interleave_heads(tensor: torch.Tensor, n: int, config: Any) -> list[torch.Tensor]:
    """Inverse of `_deinterleave_heads`: ours [Q; K; V] → per-head [q0, k0, v0, q1, ...]."""
    N = config.num_attention_heads
    return [tensor.unflatten(0, (3, N, -1)).transpose(0, 1).flatten(0, 2)]


def _swap_halves(tensors: list[torch.Tensor], config: Any) -> torch.Tensor:
    """GTE's fused gated projection (2I, H), rows [up; gate] with the activation on the gate
    (the second half), → ours (2I, H), rows [activated; linear] (`GatedFeedForward`): the two
    halves exchanged."""
    (w,) = tensors
    first, second = w.chunk(2, dim=0)
    return torch.cat([second, first], dim=0)


def _swap_halves_back(tensor: torch.Tensor, n: int, config: Any) -> list[torch.Tensor]:
    """Inverse of `_swap_halves` (the same exchange)."""
    return [_swap_halves([tensor], config)]


# kind → (join: HF tensors → ours, split: ours → HF tensors)
JOINS: dict[str, tuple[Callable, Callable]] = {
    "concat": (_concat, _split),
    "heads_interleaved": (_deinterleave_heads, _interleave_heads),
    "halves_swapped": (_swap_halves, _swap_halves_back),
}


def rename_legacy_layernorm(key: str) -> str:
    """Old TF-converted checkpoints name LayerNorm parameters gamma/beta instead of weight/bias."""
    if key.endswith(".gamma"):
        return key[: -len(".gamma")] + ".weight"
    if key.endswith(".beta"):
        return key[: -len(".beta")] + ".bias"
    return key


# --- table expansion -----------------------------------------------------------------------------
LAYER_FIELDS = ("{i}", "{g}", "{j}")


def layer_fields(i: int, inner_group_num: int = 1) -> dict[str, int]:
    """The template fields of unique layer ``i``: ``{i}`` itself, ``{g}`` its group and ``{j}``
    its place in the group, for checkpoints that store layers in groups of ``inner_group_num``
    (ALBERT's albert_layer_groups.{g}.albert_layers.{j}; i = g·inner_group_num + j)."""
    return {"{i}": i, "{g}": i // inner_group_num, "{j}": i % inner_group_num}


def _substitute(s: str, fields: dict[str, int]) -> str:
    for name, value in fields.items():
        s = s.replace(name, str(value))
    return s


def expand(table: dict[str, Any], num_layers: int, inner_group_num: int = 1) -> dict[str, Any]:
    """Substitute the layer fields (``{i}``, ``{g}``, ``{j}``; see `layer_fields`) in a table's
    keys and values for unique layers 0..num_layers-1."""
    out: dict[str, Any] = {}
    for hf, ours in table.items():
        texts = [hf] + (
            list(ours.sources)
            if isinstance(ours, Join)
            else [ours]
            if isinstance(ours, str)
            else []
        )
        per_layer = any(f in t for t in texts for f in LAYER_FIELDS)
        for i in range(num_layers) if per_layer else [None]:
            fields = layer_fields(i, inner_group_num) if i is not None else {}

            def sub(s: str, fields: dict[str, int] = fields) -> str:
                return _substitute(s, fields)

            if isinstance(ours, Join):
                out[sub(hf)] = Join(tuple(sub(s) for s in ours.sources), ours.kind)
            else:
                out[sub(hf)] = sub(ours) if isinstance(ours, str) else None
    return out


def head_tables(
    fmap: FamilyMap, heads: Iterable[str], hf_keys: Iterable[str] | None = None
) -> dict[str, dict[str, Any]]:
    """The key table of each head: for a head stored in several layouts
    (``fmap.head_layouts``, DeBERTa's masked-LM head), the layout whose keys ``hf_keys``
    hold, or the first (written) layout when they hold none or when writing (``hf_keys``
    None); else ``fmap.heads[name]``.

    Raises:
        CheckpointError: ``hf_keys`` hold keys of two layouts of one head (which to read
            would be a guess); the message names a key of each.
    """
    keys = set(hf_keys) if hf_keys is not None else set()
    tables = {}
    for name in heads:
        layouts = fmap.head_layouts.get(name)
        if not layouts:
            tables[name] = fmap.heads[name]
            continue
        found = [t for t in layouts if any(v is not None and k in keys for k, v in t.items())]
        if len(found) > 1:
            names = [next(k for k, v in t.items() if v is not None and k in keys) for t in found]
            raise CheckpointError(
                f"the checkpoint holds the {fmap.model_type} {name!r} head in {len(found)} "
                f"layouts at once ({', '.join(names)}); keep one of them",
                unexpected=names,
            )
        tables[name] = found[0] if found else layouts[0]
    return tables


def family_table(
    fmap: FamilyMap,
    num_layers: int,
    heads: Iterable[str],
    pooler: bool,
    inner_group_num: int = 1,
    hf_keys: Iterable[str] | None = None,
) -> dict[str, Any]:
    """HF key (for a task model, i.e. trunk keys with the base prefix) → our key, Join or None.

    ``num_layers`` counts unique layers; ``inner_group_num`` sizes the groups of ``{g}``/``{j}``
    templates. Join entries are stored under our key (their value lists the HF sources).
    ``hf_keys``: the checkpoint's keys, which choose a head's layout (`head_tables`); None =
    the layouts written."""
    table: dict[str, Any] = {}
    trunk = dict(fmap.trunk)
    if pooler:
        trunk.update(fmap.pooler)
    for hf, ours in expand(trunk, num_layers, inner_group_num).items():
        table[hf if isinstance(ours, Join) else fmap.base_prefix + hf] = (
            Join(tuple(fmap.base_prefix + s for s in ours.sources), ours.kind)
            if isinstance(ours, Join)
            else ours
        )
    for t in head_tables(fmap, heads, hf_keys).values():
        table.update(expand(t, num_layers, inner_group_num))
    return table


def detect_components(fmap: FamilyMap, hf_keys: Iterable[str]) -> tuple[list[str], bool]:
    """Which heads, and whether a pooler, a checkpoint holds (by its keys; the family itself
    always comes from config.json's model_type, never from the keys)."""
    keys = {rename_legacy_layernorm(k).removeprefix(fmap.base_prefix) for k in hf_keys}

    def marks(name: str) -> set[str]:
        # a head is recognised by the keys no other head has (ModernBERT's masked-LM and task
        # heads share `head.*`; its `decoder.bias` marks the masked LM), else by all its keys
        # (the task heads share `classifier.*`; config.json's architectures tells them apart)
        own = {k for k, v in fmap.heads[name].items() if v is not None}
        others = {k for n, t in fmap.heads.items() if n != name for k in t}
        return (own - others) or own

    heads = [name for name in fmap.heads if marks(name) & keys]
    pooler = any(k in keys for k in fmap.pooler)
    return heads, pooler


def normalise_hf_keys(fmap: FamilyMap, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Rename legacy gamma/beta and give trunk keys the base prefix (base models have none)."""
    out = {}
    hf_keys = [
        k for t in (fmap.trunk, fmap.pooler) for k, v in t.items() if not isinstance(v, Join)
    ]
    hf_keys += [
        s
        for t in (fmap.trunk, fmap.pooler)
        for v in t.values()
        if isinstance(v, Join)
        for s in v.sources
    ]
    trunk_roots = {k.split(".", 1)[0] for k in hf_keys}
    for key, value in state.items():
        key = rename_legacy_layernorm(key)
        if not key.startswith(fmap.base_prefix) and key.split(".", 1)[0] in trunk_roots:
            key = fmap.base_prefix + key
        out[key] = value
    return out


# --- the two directions ---------------------------------------------------------------------------
def hf_to_ours(
    hf_state: dict[str, torch.Tensor],
    fmap: FamilyMap,
    config: Any,
    expected: dict[str, torch.Size],
    heads: Iterable[str],
    pooler: bool,
    strict: bool = True,
    optional: Iterable[str] = (),
    warn: bool = True,
) -> tuple[dict[str, torch.Tensor], LoadReport]:
    """Convert a Hugging Face state dict into ours.

    Args:
        hf_state: the checkpoint's tensors, with or without the family's base prefix.
        fmap: the family's key table.
        config: our EncoderConfig (for layer counts and transforms).
        expected: our model's state-dict keys → shapes.
        heads, pooler: the components the model was built with.
        warn: log a warning for a non-strict load that is not clean (callers that filter
            the report further, e.g. for fresh heads, warn themselves).
        strict: raise on any missing/unexpected/mismatched key instead of reporting it.
        optional: our keys that ordinary checkpoints lack (see `new_parameter_keys`); when absent
            they are reported as ``newly_initialized``, not as missing.

    Returns:
        (our state dict, report).

    Raises:
        CheckpointError: when strict and anything does not match; the message lists every key.
    """
    state = normalise_hf_keys(fmap, hf_state)
    table = family_table(
        fmap, config.num_unique_layers, heads, pooler, config.inner_group_num, hf_keys=state
    )
    out: dict[str, torch.Tensor] = {}
    report = LoadReport()
    used: set[str] = set()
    for hf_key, ours in table.items():
        if ours is None:
            if hf_key in state:
                used.add(hf_key)
                report.dropped.append(hf_key)
            continue
        if isinstance(ours, Join):
            our_key, sources = hf_key, ours.sources
            if all(s in state for s in sources):
                used.update(sources)
                parts = [state[s] for s in sources]
                try:
                    if len({p.dim() for p in parts}) != 1:
                        raise InputError("different numbers of dimensions")
                    out[our_key] = JOINS[ours.kind][0](parts, config)
                except (RuntimeError, ValueError, IndexError):  # e.g. a weight flattened to 1-D
                    got = " + ".join(f"{s} {tuple(p.shape)}" for s, p in zip(sources, parts))
                    want = tuple(expected[our_key]) if our_key in expected else "?"
                    report.mismatched.append(f"{our_key}: checkpoint {got} vs model {want}")
        elif hf_key in state:
            out[ours] = state[hf_key]
            used.add(hf_key)
    for key in sorted(state):
        if key.startswith(fmap.unused):  # a head no class of the family reads, on purpose
            used.add(key)
            report.dropped.append(key)
    report.unexpected = sorted(set(state) - used)
    absent = set(expected) - set(out) - {m.split(":", 1)[0] for m in report.mismatched}
    report.newly_initialized = sorted(absent & set(optional))
    report.missing = sorted(absent - set(optional))
    for key in sorted(set(out) - set(expected)):
        if key in fmap.optional:  # this configuration has no place for it, on purpose
            report.dropped.append(key)
        else:
            report.unexpected.append(f"{key} (ours; not in this model)")
        del out[key]
    for key, tensor in out.items():
        if tuple(tensor.shape) != tuple(expected[key]):
            report.mismatched.append(
                f"{key}: checkpoint {tuple(tensor.shape)} vs model {tuple(expected[key])}"
            )
    for bad in report.mismatched:
        out.pop(bad.split(":", 1)[0], None)
    if strict and not report.clean:
        hints = [
            hint
            for key, hint in fmap.mismatch_hints.items()
            if any(m.startswith(f"{key}:") for m in report.mismatched)
        ]
        raise CheckpointError(
            " ".join([_describe(report), *hints]),
            report.missing,
            report.unexpected,
            report.mismatched,
        )
    if warn and not report.clean:
        log.warning("non-strict load: %s", _describe(report))
    if report.newly_initialized:
        log.info(
            "newly initialised (not in the checkpoint): %s", ", ".join(report.newly_initialized)
        )
    return out, report


def new_parameter_keys(model: torch.nn.Module) -> list[str]:
    """State-dict keys of parameters that ordinary checkpoints do not hold: those a module lists
    in its ``new_parameters`` attribute (e.g. `ConditionalLayerNorm`'s W_γ, W_β)."""
    keys = []
    for prefix, module in model.named_modules():
        for name in getattr(module, "new_parameters", ()):
            keys.append(f"{prefix}.{name}" if prefix else name)
    return keys


def ours_to_hf(
    state: dict[str, torch.Tensor], fmap: FamilyMap, config: Any, heads: Iterable[str], pooler: bool
) -> dict[str, torch.Tensor]:
    """Convert our state dict into the Hugging Face layout of the matching class
    (base model without prefix when there are no heads, else the prefixed task-model layout).

    Raises:
        CheckpointError: one of our keys has no place in the family's table.
    """
    heads = list(heads)
    table = family_table(fmap, config.num_unique_layers, heads, pooler, config.inner_group_num)
    inverse: dict[str, tuple[str, Any]] = {}
    for hf_key, ours in table.items():
        if isinstance(ours, Join):
            inverse[hf_key] = ("join", ours)
        elif ours is not None:
            inverse[ours] = ("rename", hf_key)
    out: dict[str, torch.Tensor] = {}
    unplaced = []
    for key, tensor in state.items():
        if key not in inverse:
            unplaced.append(key)
            continue
        how, target = inverse[key]
        if how == "rename":
            out[target] = tensor
        else:
            parts = JOINS[target.kind][1](tensor, len(target.sources), config)
            out.update(zip(target.sources, parts))
    if unplaced:
        raise CheckpointError(
            f"no Hugging Face {fmap.model_type} name for: {unplaced}", unexpected=unplaced
        )
    if not heads:
        out = {k.removeprefix(fmap.base_prefix): v for k, v in out.items()}
    return {k: v.contiguous() for k, v in out.items()}


def _listed(items: list[str], sep: str = ", ", shown: int = 5) -> str:
    """At most ``shown`` items, then "... and N more": an error stays one short line even
    when a config describes thousands of layers the checkpoint lacks."""
    more = len(items) - shown
    return sep.join(items[:shown]) + (f"{sep}... and {more:,} more" if more > 0 else "")


def _describe(report: LoadReport) -> str:
    parts = []
    if report.missing:
        parts.append(f"missing keys ({len(report.missing):,}): {_listed(report.missing)}")
    if report.unexpected:
        parts.append(f"unexpected keys ({len(report.unexpected):,}): {_listed(report.unexpected)}")
    if report.mismatched:
        parts.append(
            f"shape mismatches ({len(report.mismatched):,}): {_listed(report.mismatched, '; ')}"
        )
    return "checkpoint does not match the model: " + " | ".join(parts)
