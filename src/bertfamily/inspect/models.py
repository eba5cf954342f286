"""Which model to look inside: preset names or checkpoint directories become configs, and configs
become models built cheaply (parameters on the meta device for counting, fewer layers for tracing).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from .. import config as config_module
from ..build import HEADS, build_model
from ..config import EncoderConfig
from ..model import Model
from ..presets import FAMILY, PRESETS

# User-facing head names -> the names `build_model` takes. NSP and SOP are both the pair head
# (which one the config's ``pair_head`` says); the rest are used as given when this build has them.
HEAD_ALIASES = {"nsp": "pair", "sop": "pair", "pair": "pair", "mlm": "mlm"}


def resolve_config(
    model: str | Path | EncoderConfig,
    *,
    vocab_size: int | None = None,
    condition_size: int | None = None,
    conditional_norms: tuple[str, ...] | None = None,
) -> tuple[str, EncoderConfig]:
    """(display name, config) for a preset name, a checkpoint directory or a config.

    Args:
        model: preset name (see `bertfamily.presets.PRESETS`), directory with config.json, or
            an `EncoderConfig`.
        vocab_size: override V (e.g. 21128 for Chinese BERT).
        condition_size: make the model's norms Conditional LayerNorms of condition size C
            (`modules.norms.ConditionalLayerNorm`); which norms: ``conditional_norms`` (default:
            every site the config allows).

    Raises:
        ValueError: neither a preset nor a directory; a Conditional LayerNorm asked of a build
            whose EncoderConfig has no ``condition_size`` field; invalid override values.
    """
    if isinstance(model, EncoderConfig):
        name, config = "config", model
    elif str(model) in PRESETS:
        name, config = str(model), EncoderConfig.from_preset(str(model))
    elif Path(model).expanduser().is_dir():
        from ..checkpoints.io import config_from_hf, read_hf_config

        path = Path(model).expanduser()
        name, config = path.name, config_from_hf(read_hf_config(path))
    else:
        raise ValueError(
            f"{str(model)!r} is neither a preset ({', '.join(PRESETS)}) nor a model directory"
        )
    changes: dict = {}
    if vocab_size is not None:
        changes["vocab_size"] = vocab_size
    if condition_size is not None:
        fields = {f.name for f in dataclasses.fields(EncoderConfig)}
        if not {"condition_size", "conditional_norms"} <= fields:
            raise ValueError(
                "this build has no Conditional LayerNorm (EncoderConfig lacks the "
                "condition_size / conditional_norms fields)"
            )
        sites = conditional_norms or tuple(getattr(config_module, "NORM_SITES", ()))
        if not sites:
            raise ValueError("name the norms to condition (conditional_norms)")
        changes.update(condition_size=condition_size, conditional_norms=tuple(sites))
    return name, (config.replace(**changes) if changes else config)


def build_heads(heads: list[str] | tuple[str, ...] | None) -> list[str]:
    """`build_model` head names for user names (mlm, nsp/sop/pair, and any head this build adds,
    e.g. sbo or classifier once their components exist).

    Raises:
        ValueError: a head this build does not have (lists the available ones).
    """
    out: list[str] = []
    for h in heads or ():
        name = HEAD_ALIASES.get(h, h)
        if name not in HEADS:
            raise ValueError(
                f"head {h!r} is not available in this build; available: "
                f"{', '.join(sorted(set(HEAD_ALIASES) | set(HEADS)))}"
            )
        if name not in out:
            out.append(name)
    return out


def meta_model(config: EncoderConfig, heads: list[str] | tuple[str, ...] = ()) -> Model:
    """The full-size model with parameters on the meta device: exact shapes and counts, no
    memory, no initialisation cost."""
    with torch.device("meta"):
        return build_model(config, heads=build_heads(heads))


def shrink_layers(
    config: EncoderConfig, max_groups: int = 2, max_per_group: int = 2
) -> EncoderConfig:
    """The same model with fewer layer steps but the same sharing pattern: at most
    ``max_groups`` unique layer groups, each run at most ``max_per_group`` times (BERT: 2
    layers; ALBERT with one shared group: the shared layer run twice). Every size stays."""
    groups = config.num_hidden_groups
    per_group = config.num_hidden_layers // groups
    g, p = min(groups, max_groups), min(per_group, max_per_group)
    changes: dict = dict(num_hidden_layers=g * p, num_hidden_groups=g)
    if isinstance(config.attention_window, tuple):  # per-layer windows: those of the kept layers
        changes["attention_window"] = config.attention_window[: g * p]
    return config.replace(**changes)


def available_family() -> list[str]:
    """The family names that have presets in this build, in FAMILY order."""
    return [n for n in FAMILY if n in PRESETS]
