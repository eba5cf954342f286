"""LoRA adapters in PEFT's directory format, on our models (Hu et al. 2021, "LoRA", §4.1).

A PEFT adapter directory holds ``adapter_config.json`` and ``adapter_model.safetensors`` whose
keys name the adapted Hugging Face modules (``base_model.model.encoder.layer.0.attention.self.
query.lora_A.weight``, A (r, in) and B (out, r)). The family's key table (`keymaps`, expanded
by `convert.family_table`) says where each module lives in our model, and which of our output
rows it owns when ours fuses several of them (Q, K and V in one ``qkv``): the table's `Join`
transform applied to row numbers gives that placement, so no family is named here.

Only LoRA is supported (``peft_type`` "LORA", linear layers, optionally rank-stabilised
scaling α/√r and per-module ``alpha_pattern``). DoRA, LoRA on embeddings, LoRA biases,
``modules_to_save`` weights and every other PEFT method are refused with a clear error.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from torch import nn

from ..errors import CheckpointError, InputError, ModelDirectoryError
from ..files import atomic_directory, atomic_write
from ..modules.lora import LoraLinear, LoraPart
from .convert import JOINS, _listed, family_table, normalise_hf_keys
from .io import read_json_file, read_safetensors
from .keymaps import FAMILIES, FamilyMap, Join

__all__ = [
    "ADAPTER_CONFIG",
    "ADAPTER_WEIGHTS",
    "LoraAdapter",
    "LoraSpec",
    "add_lora",
    "apply_adapter",
    "lora_merged",
    "lora_parameters",
    "merge_lora",
    "read_adapter",
    "save_adapter",
]

log = logging.getLogger(__name__)

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
PEFT_PREFIX = "base_model.model."  # PeftModel's wrapper around the transformers model
_LORA_KEY = re.compile(r"^(?P<module>.+)\.lora_(?P<which>A|B)\.weight$")
# adapter_config.json fields that change the arithmetic and that we do not implement: a
# truthy value is refused (their names are PEFT's)
_UNSUPPORTED = {
    "use_dora": "DoRA (weight-decomposed LoRA)",
    "lora_bias": "LoRA biases",
    "fan_in_fan_out": "fan_in_fan_out (GPT-2 Conv1D layers)",
    "trainable_token_indices": "trainable tokens",
    "layer_replication": "layer replication",
    "use_qalora": "QA-LoRA",
}


@dataclass(frozen=True)
class LoraSpec:
    """A new LoRA adapter to train (`add_lora`).

    Attributes:
        r: the rank (≥ 1).
        alpha: α; the update is scaled by α/r (Hu et al. 2021 §4.1).
        dropout: dropout probability on the adapted layers' inputs (LoRA path only).
        targets: Hugging Face module names to adapt, matched as PEFT matches a list: a module
            is adapted when its name equals a target or ends with ``"." + target``
            (``("query", "value")``: every layer's attention query and value projections).
    """

    r: int = 8
    alpha: float = 16.0
    dropout: float = 0.0
    targets: tuple[str, ...] = ("query", "value")

    def __post_init__(self) -> None:
        if self.r < 1:
            raise InputError(f"LoRA rank r must be >= 1, got {self.r}")
        if not 0.0 <= self.dropout < 1.0:
            raise InputError(f"LoRA dropout must be in [0, 1), got {self.dropout}")
        if not self.targets or not all(isinstance(t, str) and t for t in self.targets):
            raise InputError(f"LoRA targets must be non-empty module names, got {self.targets}")


@dataclass
class LoraAdapter:
    """A PEFT LoRA adapter read from a directory (`read_adapter`).

    Attributes:
        path: the directory.
        config: adapter_config.json.
        weights: Hugging Face module name (as the adapter file writes it, without PEFT's
            ``base_model.model.``) → (A (r, in), B (out, r)) float tensors.
        scaling: the same module names → α/r (α/√r with ``use_rslora``).
    """

    path: Path
    config: dict[str, Any]
    weights: dict[str, tuple[torch.Tensor, torch.Tensor]]
    scaling: dict[str, float]


def read_adapter(path: str | Path) -> LoraAdapter:
    """Read a PEFT LoRA adapter directory.

    Raises:
        ModelDirectoryError: no directory, no adapter_config.json or adapter_model.safetensors
            (an ``adapter_model.bin`` is named and refused: convert it to safetensors), a
            corrupt file, an adapter that is not LoRA (its ``peft_type`` named), a LoRA
            variant we do not run (DoRA, biases, ...), weights that are not LoRA A/B pairs of
            linear layers (embedding LoRA, ``modules_to_save``; every such key listed), an A
            and B of one module whose ranks differ.
    """
    path = Path(path)
    if not path.is_dir():
        raise ModelDirectoryError(f"adapter {path} is not a directory")
    config = read_json_file(path / ADAPTER_CONFIG, "a PEFT adapter config")
    peft_type = config.get("peft_type")
    if peft_type != "LORA":
        raise ModelDirectoryError(
            f"{path / ADAPTER_CONFIG}: peft_type {peft_type!r} is not supported; only LoRA "
            "adapters (peft_type 'LORA') load onto bertfamily models"
        )
    used = [f"{name}: {what}" for name, what in _UNSUPPORTED.items() if config.get(name)]
    if used:
        raise ModelDirectoryError(
            f"{path / ADAPTER_CONFIG}: LoRA variant not supported ({'; '.join(used)}); plain "
            "LoRA on linear layers is"
        )
    file = path / ADAPTER_WEIGHTS
    if not file.is_file() and (path / "adapter_model.bin").is_file():
        raise ModelDirectoryError(
            f"{path / 'adapter_model.bin'}: pickled adapters are not loaded (they may run code); "
            "save the adapter with safetensors (PEFT's default)"
        )
    tensors = read_safetensors(file)
    pairs: dict[str, dict[str, torch.Tensor]] = {}
    other = []
    for key, tensor in tensors.items():
        match = _LORA_KEY.match(key.removeprefix(PEFT_PREFIX))
        if match is None or tensor.dim() != 2 or not tensor.is_floating_point():
            other.append(key)
            continue
        pairs.setdefault(match["module"], {})[match["which"]] = tensor.float()
    if other:
        raise ModelDirectoryError(
            f"{file}: keys that are not LoRA A/B weights of linear layers ({len(other)}): "
            f"{_listed(sorted(other))}; LoRA on embeddings, LoRA biases and modules_to_save "
            "weights are not supported"
        )
    if not pairs:
        raise ModelDirectoryError(f"{file} holds no LoRA weights")
    weights, scaling = {}, {}
    for module, ab in sorted(pairs.items()):
        if set(ab) != {"A", "B"}:
            raise ModelDirectoryError(f"{file}: {module} has lora_{''.join(ab)} only")
        A, B = ab["A"], ab["B"]
        if A.shape[0] != B.shape[1]:
            raise ModelDirectoryError(
                f"{file}: {module}: lora_A {tuple(A.shape)} and lora_B {tuple(B.shape)} "
                "have different ranks"
            )
        weights[module] = (A, B)
        scaling[module] = _scaling(config, module, A.shape[0], path)
    return LoraAdapter(path, config, weights, scaling)


def _scaling(config: dict[str, Any], module: str, r: int, path: Path) -> float:
    """α/r of one module (α/√r with ``use_rslora``, Kalajdzievski 2023); α from the first
    ``alpha_pattern`` key that matches the module's name as PEFT matches it (the key is a
    regular expression for the name's end, after a dot or at its start), else ``lora_alpha``.
    r is the tensors' own; the config's (``rank_pattern``'s first match, else ``r``) must be
    a positive whole number equal to it, as PEFT builds the matrices from it.

    Raises:
        ModelDirectoryError: an α that is not a finite number, or an r that is not the
            tensors' rank.
    """
    alpha, rank = config.get("lora_alpha", 8), config.get("r", r)
    for pattern, value in (config.get("alpha_pattern") or {}).items():
        if re.match(rf"(.*\.)?({pattern})$", module):
            alpha = value
            break
    for pattern, value in (config.get("rank_pattern") or {}).items():
        if re.match(rf"(.*\.)?({pattern})$", module):
            rank = value
            break
    where = path / ADAPTER_CONFIG
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or not math.isfinite(alpha):
        raise ModelDirectoryError(f"{where}: lora_alpha {alpha!r} is not a finite number")
    if not isinstance(rank, int) or isinstance(rank, bool) or rank != r:
        raise ModelDirectoryError(
            f"{where}: r {rank!r} for {module}, but its lora_A/lora_B tensors have rank {r}"
        )
    return alpha / math.sqrt(r) if config.get("use_rslora") else alpha / r


# --- where a Hugging Face module lives in our model --------------------------------------------
@dataclass(frozen=True)
class _Place:
    """Our linear module and the output rows of it that one Hugging Face module owns (None:
    all of them, in order)."""

    module: str
    rows: torch.Tensor | None


def _places(model: nn.Module, fmap: FamilyMap) -> dict[str, _Place]:
    """Hugging Face module name (with the family's base prefix) → `_Place`, for every linear
    weight of ``model`` the family's key table maps.

    A `Join` (several Hugging Face weights → one of ours, along the output rows) is placed by
    running its own transform on row numbers: the sources are taken as equal blocks of our
    rows (true of every join of the tables: Q/K/V, the halves of a gated FFN)."""
    config = model.config
    table = family_table(
        fmap,
        config.num_unique_layers,
        sorted(model.heads),
        config.use_pooler,
        config.inner_group_num,
    )
    modules = dict(model.named_modules())
    places: dict[str, _Place] = {}
    for hf_key, ours in table.items():
        if isinstance(ours, Join):
            our_key, sources = hf_key, ours.sources
        elif isinstance(ours, str):
            our_key, sources = ours, (hf_key,)
        else:
            continue
        our_module = our_key.removesuffix(".weight")
        if not our_key.endswith(".weight") or not isinstance(modules.get(our_module), nn.Linear):
            continue
        if not isinstance(ours, Join):
            places[hf_key.removesuffix(".weight")] = _Place(our_module, None)
            continue
        out = modules[our_module].out_features
        n = len(sources)
        ids = [torch.arange(i * out // n, (i + 1) * out // n)[:, None] for i in range(n)]
        placed = JOINS[ours.kind][0](ids, config)[:, 0]  # (out,) source row at each of ours
        for i, source in enumerate(sources):
            rows = torch.argsort(placed)[i * out // n : (i + 1) * out // n]  # ours, per source row
            places[source.removesuffix(".weight")] = _Place(our_module, rows)
    return places


def _normalised(fmap: FamilyMap, module: str) -> str:
    """A Hugging Face module name with the family's base prefix (a base model's adapter has
    none; a task model's has it)."""
    (key,) = normalise_hf_keys(fmap, {module + ".weight": None})
    return key.removesuffix(".weight")


def _parts_by_module(
    model: nn.Module, fmap: FamilyMap, weights: dict[str, tuple[torch.Tensor, torch.Tensor]]
) -> dict[str, list[tuple[str, torch.Tensor | None, torch.Tensor, torch.Tensor]]]:
    """Our module → [(Hugging Face source, rows, A, B), ...], every key and shape checked.

    Raises:
        CheckpointError: adapted modules the model does not have (or that are no linear of
            ours), and A/B shapes that do not fit the model's layers; every one listed."""
    places = _places(model, fmap)
    modules = dict(model.named_modules())
    by_module: dict[str, list] = {}
    unknown, mismatched = [], []
    for name, (A, B) in weights.items():
        place = places.get(_normalised(fmap, name))
        if place is None:
            unknown.append(name)
            continue
        linear = modules[place.module]
        if isinstance(linear, LoraLinear):
            raise CheckpointError(
                f"{place.module} already carries a LoRA adapter: merge it (`merge_lora`) "
                "before adding another"
            )
        rows = linear.out_features if place.rows is None else len(place.rows)
        if A.shape[1] != linear.in_features or B.shape[0] != rows:
            mismatched.append(
                f"{name}: lora_A {tuple(A.shape)}, lora_B {tuple(B.shape)} vs a layer of "
                f"{linear.in_features} inputs and {rows} outputs"
            )
            continue
        by_module.setdefault(place.module, []).append((_normalised(fmap, name), place.rows, A, B))
    if unknown or mismatched:
        parts = []
        if unknown:
            parts.append(
                f"adapted modules this {fmap.model_type} model does not have as linear layers "
                f"({len(unknown)}): {_listed(sorted(unknown))}"
            )
        if mismatched:
            parts.append(f"shape mismatches ({len(mismatched)}): {_listed(mismatched, '; ')}")
        raise CheckpointError(
            "the adapter does not match the base model: " + " | ".join(parts),
            unexpected=sorted(unknown),
            mismatched=mismatched,
        )
    return by_module


def _replace(model: nn.Module, name: str, module: nn.Module) -> None:
    parent, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, child, module)


def apply_adapter(model: nn.Module, adapter: LoraAdapter | str | Path, *, merge: bool) -> nn.Module:
    """Put a LoRA adapter on ``model`` (a `bertfamily.Model`), in place.

    Args:
        model: the base model the adapter was trained on.
        adapter: a `LoraAdapter` or its directory.
        merge: fold W + (α/r)·B A into the weights (the same speed as the base model); False:
            each adapted linear becomes a `modules.lora.LoraLinear` computing the update apart
            (the base weights unchanged, the adapter's parameters trainable).

    Returns:
        ``model``.

    Raises:
        ModelDirectoryError: see `read_adapter`.
        CheckpointError: the adapter does not match the model (see `_parts_by_module`).
    """
    if not isinstance(adapter, LoraAdapter):
        adapter = read_adapter(adapter)
    fmap = FAMILIES[model.config.model_type]
    weights = adapter.weights
    scaling = {_normalised(fmap, n): s for n, s in adapter.scaling.items()}
    dropout = float(adapter.config.get("lora_dropout") or 0.0)
    for our_module, found in _parts_by_module(model, fmap, weights).items():
        linear = model.get_submodule(our_module)
        device, dtype = linear.weight.device, linear.weight.dtype
        parts = [
            LoraPart(
                A.to(device),
                B.to(device),
                scaling[source],
                torch.arange(linear.out_features) if rows is None else rows,
                dropout,
                source,
            ).to(device)
            for source, rows, A, B in found
        ]
        lora = LoraLinear(linear, parts)
        _replace(model, our_module, lora.merged().to(dtype) if merge else lora)
    log.info(
        "LoRA adapter %s %s on %d modules",
        adapter.path,
        "merged" if merge else "added",
        len(adapter.weights),
    )
    return model


def add_lora(model: nn.Module, spec: LoraSpec) -> list[str]:
    """Give ``model`` a new LoRA adapter to train, in place: every linear that ``spec.targets``
    name becomes a `LoraLinear` with A ~ Kaiming-uniform (a = √5, PEFT's default) and B = 0
    (Hu et al. 2021 §4.1: ΔW = 0 at the start), and every other parameter of ``model`` is
    frozen (``requires_grad`` False).

    Returns:
        The Hugging Face names of the adapted modules.

    Raises:
        InputError: a target that matches no linear layer of the model (the ones it has are
            named).
    """
    fmap = FAMILIES[model.config.model_type]
    places = _places(model, fmap)
    strip = not model.heads  # a base model's adapter names its modules without the prefix
    names = {(n.removeprefix(fmap.base_prefix) if strip else n): n for n in places}
    chosen = sorted(n for n in names if any(n == t or n.endswith("." + t) for t in spec.targets))
    idle = [t for t in spec.targets if not any(n == t or n.endswith("." + t) for n in names)]
    if idle:
        leaves = sorted({n.rsplit(".", 1)[-1] for n in names})
        raise InputError(
            f"LoRA targets {idle} match no linear layer of this {fmap.model_type} model; its "
            f"module names end with: {', '.join(leaves)}"
        )
    for p in model.parameters():
        p.requires_grad_(False)
    weights = {}
    for name in chosen:
        place = places[names[name]]
        linear = model.get_submodule(place.module)
        rows = linear.out_features if place.rows is None else len(place.rows)
        A = torch.empty(spec.r, linear.in_features, device=linear.weight.device)
        nn.init.kaiming_uniform_(A, a=math.sqrt(5))
        weights[name] = (A, torch.zeros(rows, spec.r, device=linear.weight.device))
    adapter = LoraAdapter(
        Path("."),
        {"lora_dropout": spec.dropout},
        weights,
        {n: spec.alpha / spec.r for n in weights},
    )
    apply_adapter(model, adapter, merge=False)
    return chosen


def lora_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The A and B parameters of every `LoraLinear` of ``model``."""
    return [p for m in model.modules() if isinstance(m, LoraPart) for p in (m.A, m.B)]


def merge_lora(model: nn.Module) -> nn.Module:
    """Fold every `LoraLinear` of ``model`` into a plain linear, in place; the other
    parameters' ``requires_grad`` are left as they are. Returns ``model``."""
    for name, module in list(model.named_modules()):
        if isinstance(module, LoraLinear):
            _replace(model, name, module.merged())
    return model


@contextlib.contextmanager
def lora_merged(model: nn.Module) -> Iterator[nn.Module]:
    """While inside, every `LoraLinear` of ``model`` is replaced by its merged linear (e.g. to
    save merged weights mid-training); on leaving, the `LoraLinear` modules themselves come
    back (no rounding of the base weights accumulates)."""
    swapped = [(n, m) for n, m in model.named_modules() if isinstance(m, LoraLinear)]
    for name, module in swapped:
        _replace(model, name, module.merged())
    try:
        yield model
    finally:
        for name, module in swapped:
            _replace(model, name, module)


def save_adapter(model: nn.Module, path: str | Path, *, base_model: str | None = None) -> Path:
    """Write the `LoraLinear` parts of ``model`` as a PEFT LoRA adapter directory, which
    ``peft.PeftModel.from_pretrained(transformers_model, path)`` loads onto the transformers
    class of the model (``BertModel`` for a headless model) and `apply_adapter` onto ours.

    All parts must share one rank, α and dropout (as `add_lora` makes them); the module names
    are written in full as ``target_modules``, so PEFT adapts exactly those. Written
    all-or-nothing (`files.atomic_directory`); other files of the directory are kept.

    Args:
        model: a `bertfamily.Model` with `LoraLinear` layers (`add_lora`, or `apply_adapter`
            with ``merge=False``).
        path: the directory to write.
        base_model: written as ``base_model_name_or_path`` (a name, not a path of this
            machine, is best; None: none).

    Returns:
        ``path``.

    Raises:
        InputError: the model has no LoRA parts, or parts of several ranks or scales.
    """
    parts = [m for m in model.modules() if isinstance(m, LoraPart)]
    if not parts:
        raise InputError("the model has no LoRA adapter to save")
    ranks = {p.rank for p in parts}
    scales = {p.scaling for p in parts}
    drops = {p.dropout.p if isinstance(p.dropout, nn.Dropout) else 0.0 for p in parts}
    if len(ranks) != 1 or len(scales) != 1 or len(drops) != 1:
        raise InputError(f"LoRA parts of several ranks {sorted(ranks)} or scales {sorted(scales)}")
    fmap = FAMILIES[model.config.model_type]
    strip = not model.heads
    (r,), (scale,), (dropout,) = ranks, scales, drops
    tensors, targets = {}, []
    for part in parts:
        name = part.source.removeprefix(fmap.base_prefix) if strip else part.source
        targets.append(name)
        for which, tensor in (("A", part.A), ("B", part.B)):
            key = f"{PEFT_PREFIX}{name}.lora_{which}.weight"
            tensors[key] = tensor.detach().float().cpu().contiguous()
    config = {
        "peft_type": "LORA",
        "task_type": None,
        "base_model_name_or_path": base_model,
        "r": r,
        "lora_alpha": scale * r,
        "lora_dropout": dropout,
        "target_modules": sorted(targets),
        "bias": "none",
        "fan_in_fan_out": False,
        "use_rslora": False,
        "use_dora": False,
        "modules_to_save": None,
        "inference_mode": True,
        "init_lora_weights": True,
        "rank_pattern": {},
        "alpha_pattern": {},
    }
    path = Path(path)
    text = json.dumps(config, indent=2, sort_keys=True) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_directory(path) as tmp:  # other files kept (the trainer's model_state.pt)
        atomic_write(tmp / ADAPTER_WEIGHTS, lambda t: save_file(tensors, str(t), {"format": "pt"}))
        atomic_write(tmp / ADAPTER_CONFIG, lambda t: t.write_text(text, encoding="utf-8"))
    return path
