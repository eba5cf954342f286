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
from ..errors import InputError
from ..model import Model
from ..presets import FAMILY, PRESETS
from .symbols import config_sizes

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
        raise InputError(
            f"{str(model)!r} is neither a preset ({', '.join(PRESETS)}) nor a model directory"
        )
    changes: dict = {}
    if vocab_size is not None:
        changes["vocab_size"] = vocab_size
    if condition_size is not None:
        fields = {f.name for f in dataclasses.fields(EncoderConfig)}
        if not {"condition_size", "conditional_norms"} <= fields:
            raise InputError(
                "this build has no Conditional LayerNorm (EncoderConfig lacks the "
                "condition_size / conditional_norms fields)"
            )
        sites = conditional_norms or tuple(getattr(config_module, "NORM_SITES", ()))
        if not sites:
            raise InputError("name the norms to condition (conditional_norms)")
        changes.update(condition_size=condition_size, conditional_norms=tuple(sites))
    return name, (config.replace(**changes) if changes else config)


# Heads a training objective runs beside the model: not part of `Model` or of its checkpoint
# layout, built by the objective (SpanBERT's SBO head, TinyBERT's distillation projections).
# The views attach them to the model they inspect (`attach_objective_heads`).
OBJECTIVE_HEADS = {
    "sbo": "SpanBERT's span boundary head (objectives.pretraining, Joshi et al. 2020 §3.2)",
    "distill": "TinyBERT's projections W_e, W_h student H → teacher H (Jiao et al. 2020 §3.1)",
}
# The teacher hidden size the "distill" head projects to by default: BERT-base, the teacher of
# TinyBERT and DistilBERT.
DEFAULT_TEACHER_HIDDEN_SIZE = 768


def _check_heads(heads: list[str] | tuple[str, ...] | None) -> None:
    for h in heads or ():
        if HEAD_ALIASES.get(h, h) not in HEADS and h not in OBJECTIVE_HEADS:
            raise InputError(
                f"head {h!r} is not available in this build; available: "
                f"{', '.join(sorted(set(HEAD_ALIASES) | set(HEADS) | set(OBJECTIVE_HEADS)))}"
            )


def build_heads(heads: list[str] | tuple[str, ...] | None) -> list[str]:
    """`build_model` head names for user names (mlm, nsp/sop/pair, rtd, the task heads); the
    objective heads (`OBJECTIVE_HEADS`) are left out (see `objective_heads`).

    Raises:
        ValueError: a head this build does not have (lists the available ones).
    """
    _check_heads(heads)
    out: list[str] = []
    for h in heads or ():
        name = HEAD_ALIASES.get(h, h)
        if h not in OBJECTIVE_HEADS and name not in out:
            out.append(name)
    return out


def objective_heads(heads: list[str] | tuple[str, ...] | None) -> list[str]:
    """The names in ``heads`` that are objective heads (`OBJECTIVE_HEADS`), in order.

    Raises:
        ValueError: a head this build does not have.
    """
    _check_heads(heads)
    return list(dict.fromkeys(h for h in heads or () if h in OBJECTIVE_HEADS))


def attach_objective_heads(
    model: Model,
    names: list[str] | tuple[str, ...],
    *,
    teacher_hidden_size: int = DEFAULT_TEACHER_HIDDEN_SIZE,
) -> dict[str, int]:
    """Add the objective heads ``names`` to ``model`` as submodules (``sbo_head``,
    ``distill_projections``) built by the objectives' own builders, and a forward hook that
    runs them after the model's forward, as their objective does in training, so that counts
    and traces include them. For inspection only: the model's outputs are unchanged.

    - ``sbo``: `build.build_span_boundary_head`; run on a span of tokens 2..2+k-1 of every row
      (boundaries 1 and 2+k), M = B·k predicted tokens.
    - ``distill``: `objectives.distillation.build_projections` (H_S → ``teacher_hidden_size``
      H_T); W_e runs on the embedding output, W_h on the last hidden state (in training on
      every mapped layer's).

    Returns:
        Symbols the traced shapes need beside the config's: ``M`` (span tokens, set when the
        hook runs; read the dict after the forward) and ``Ht`` (teacher hidden size).
    """
    from ..build import build_span_boundary_head
    from ..objectives.distillation import build_projections

    symbols: dict[str, int] = {}
    if "sbo" in names:
        model.add_module("sbo_head", build_span_boundary_head(model.config, model))
    if "distill" in names:
        model.add_module(
            "distill_projections",
            build_projections(model.config, teacher_hidden_size, ("embedding", "hidden")),
        )
        symbols["Ht"] = teacher_hidden_size
    if not names:
        return symbols

    def wants_hidden_states(module, args, kwargs):
        if "distill" in names:
            kwargs["output_hidden_states"] = True
        return args, kwargs

    def run(module, args, kwargs, output):
        hidden = output.last_hidden_state  # (B, T, H)
        B, T = hidden.shape[:2]
        if "sbo" in names:
            taken = config_sizes(module.config) | set(symbols.values()) | {B, T}
            fits = [k for k in (3, 2, 4, 5) if 2 + k < T] or [1]
            span = next((k for k in fits if B * k not in taken), fits[0])
            symbols["M"] = B * span
            rows = torch.arange(B).repeat_interleave(span)
            relative = torch.arange(span).repeat(B)
            model.sbo_head(
                hidden,
                rows,
                torch.full_like(rows, 1),
                torch.full_like(rows, 2 + span),
                relative,
            )  # (M, V)
        if "distill" in names:
            model.distill_projections["embedding"](output.hidden_states[0])  # (B, T, Ht)
            model.distill_projections["hidden"](hidden)  # (B, T, Ht)
        return output

    model.register_forward_pre_hook(wants_hidden_states, with_kwargs=True)
    model.register_forward_hook(run, with_kwargs=True)
    return symbols


def meta_model(
    config: EncoderConfig,
    heads: list[str] | tuple[str, ...] = (),
    *,
    teacher_hidden_size: int = DEFAULT_TEACHER_HIDDEN_SIZE,
) -> Model:
    """The full-size model with parameters on the meta device: exact shapes and counts, no
    memory, no initialisation cost; objective heads in ``heads`` attached
    (`attach_objective_heads`)."""
    with torch.device("meta"):
        model = build_model(config, heads=build_heads(heads))
        attach_objective_heads(
            model, objective_heads(heads), teacher_hidden_size=teacher_hidden_size
        )
    return model


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
