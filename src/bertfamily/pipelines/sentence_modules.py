"""A sentence-transformers directory read into one description: the encoder directory, the
pooling, the Dense layers after it, the final L2 normalisation, the tokenizer settings and the
prompts (Reimers & Gurevych 2019, Sentence-BERT §3; the files written by sentence-transformers'
``SentenceTransformer.save``).

Read here: ``modules.json`` (the module list, run in order), the Transformer module's
``sentence_bert_config.json`` (``max_seq_length``, ``do_lower_case``), the Pooling module's
``config.json`` (``pooling_mode`` — one mode or a list, concatenated — or the older
``pooling_mode_*_tokens`` flags; ``include_prompt``), each Dense module's ``config.json`` and
weights (``model.safetensors``, else ``pytorch_model.bin`` read with ``weights_only=True``),
Normalize, and ``config_sentence_transformers.json`` (``prompts``, ``default_prompt_name``).
Anything we cannot run exactly is an error that names the file, never skipped.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..checkpoints.io import inside, read_json_file, read_weights
from ..errors import SentenceModulesError

log = logging.getLogger(__name__)

MODULES_FILE = "modules.json"
SETTINGS_FILE = "sentence_bert_config.json"
MODEL_SETTINGS_FILE = "config_sentence_transformers.json"

#: Pooling modes of sentence-transformers' Pooling module.
POOLING_MODES = ("cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken")
# The older boolean keys, in the order their outputs were concatenated.
_LEGACY_POOLING_KEYS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}
_POOLING_KEYS = {
    "embedding_dimension",
    "word_embedding_dimension",  # the older name
    "pooling_mode",
    "include_prompt",
}
_DENSE_KEYS = {"in_features", "out_features", "bias", "activation_function"}
# Keys whose other values select features we do not run (token-level Dense, residual Dense).
_DEFAULT_ONLY = {
    "module_input_name": "sentence_embedding",
    "module_output_name": "sentence_embedding",
    "use_residual": False,
}
# The module classes we run, by class name; the modules.json type must be sentence-transformers'.
_KINDS = ("Transformer", "Pooling", "Dense", "Normalize")


@dataclass(frozen=True)
class PoolingSpec:
    """How token states become one vector: the pooling mode(s), whether the final vector is
    L2-normalised, the token limit, and whether prompt tokens are pooled.

    ``mode`` is one of `POOLING_MODES` or a tuple of them (their vectors are concatenated, in
    that order). ``include_prompt=False`` leaves the prompt's tokens out of the pooling
    (INSTRUCTOR-style models). ``normalize`` applies after any Dense layers.
    """

    mode: str | tuple[str, ...] = "mean"
    normalize: bool = False
    max_seq_length: int | None = None
    include_prompt: bool = True

    def __post_init__(self) -> None:
        for m in self.modes:
            if m not in POOLING_MODES:
                raise ValueError(f"unknown pooling mode {m!r}; expected one of {POOLING_MODES}")

    @property
    def modes(self) -> tuple[str, ...]:
        """The modes as a tuple (one element for a single mode)."""
        return (self.mode,) if isinstance(self.mode, str) else tuple(self.mode)

    @classmethod
    def from_directory(cls, path: Path) -> PoolingSpec:
        """The pooling of a sentence-transformers directory (see `read_sentence_modules`);
        a plain Hugging Face directory gets mean pooling, normalised."""
        return read_sentence_modules(Path(path)).pooling


@dataclass(frozen=True, eq=False)
class DenseLayer:
    """One Dense module: ``activation(x Wᵀ + b)``, (B, in_features) → (B, out_features)."""

    source: Path  # its config.json, for messages
    linear: nn.Linear
    activation: nn.Module

    def module(self) -> nn.Sequential:
        """The layer as one module: Linear then the activation."""
        return nn.Sequential(self.linear, self.activation)


@dataclass(frozen=True, eq=False)
class SentenceModules:
    """What a sentence-transformers directory runs, in order: the encoder of ``model_dir``,
    ``pooling``, each of ``dense``, then L2 normalisation when ``pooling.normalize``.

    ``do_lower_case`` lowercases every input (prompt included) before tokenisation;
    ``prompts`` maps a prompt name to the text prepended to inputs; ``default_prompt_name``
    names the one used when ``encode`` is given none.
    """

    model_dir: Path
    pooling: PoolingSpec = PoolingSpec(normalize=True)
    dense: tuple[DenseLayer, ...] = ()
    do_lower_case: bool = False
    prompts: dict[str, str] = field(default_factory=dict)
    default_prompt_name: str | None = None
    pooling_dimension: int | None = None  # the Pooling config's embedding_dimension, if any

    def check_dimensions(self, hidden_size: int) -> int:
        """Check every stage's width against the encoder's H; returns the output width.

        Raises:
            SentenceModulesError: the Pooling's embedding dimension is not H, or a Dense's
                in_features is not the width it receives (names the file).
        """
        if self.pooling_dimension is not None and self.pooling_dimension != hidden_size:
            raise SentenceModulesError(
                f"the Pooling module's embedding_dimension is {self.pooling_dimension}, but the "
                f"encoder in {self.model_dir} has hidden size {hidden_size}"
            )
        width = len(self.pooling.modes) * hidden_size
        for layer in self.dense:
            if layer.linear.in_features != width:
                raise SentenceModulesError(
                    f"{layer.source}: in_features is {layer.linear.in_features}, but the "
                    f"module before it gives vectors of {width}"
                )
            width = layer.linear.out_features
        return width


def _kind(entry: Any, source: Path) -> str:
    if not isinstance(entry, dict) or not isinstance(entry.get("type"), str):
        raise SentenceModulesError(f"{source}: each module must be an object with a 'type'")
    kind = entry["type"].rsplit(".", 1)[-1]
    if not entry["type"].startswith("sentence_transformers.") or kind not in _KINDS:
        raise SentenceModulesError(
            f"{source}: module {entry['type']!r} cannot be run by bertfamily (supported: "
            f"sentence-transformers' {', '.join(_KINDS)})"
        )
    return kind


def _int(cfg: dict[str, Any], key: str, source: Path) -> int:
    value = cfg.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SentenceModulesError(f"{source}: {key} must be a positive integer, got {value!r}")
    return value


def _bool(cfg: dict[str, Any], key: str, default: bool, source: Path) -> bool:
    value = cfg.get(key, default)
    if not isinstance(value, bool):
        raise SentenceModulesError(f"{source}: {key} must be true or false, got {value!r}")
    return value


def _refuse_features(cfg: dict[str, Any], known: set[str], source: Path) -> None:
    for key, default in _DEFAULT_ONLY.items():
        if key in cfg and cfg[key] != default:
            raise SentenceModulesError(
                f"{source}: {key}={cfg[key]!r} is not supported (only {default!r})"
            )
    unknown = sorted(set(cfg) - known - set(_DEFAULT_ONLY))
    if unknown:
        raise SentenceModulesError(f"{source}: unsupported settings {unknown}")


def _pooling(
    directory: Path, normalize: bool, max_len: int | None
) -> tuple[PoolingSpec, int | None]:
    file = directory / "config.json"
    cfg = read_json_file(file, "the Pooling settings")
    _refuse_features(cfg, _POOLING_KEYS | set(_LEGACY_POOLING_KEYS), file)
    if "pooling_mode" in cfg:
        raw = cfg["pooling_mode"]
        modes = (raw,) if isinstance(raw, str) else raw
        if not isinstance(modes, list | tuple) or not modes:
            raise SentenceModulesError(f"{file}: pooling_mode must be a mode or a list of modes")
    else:  # the older flags; none set means mean, as in sentence-transformers
        modes = [m for k, m in _LEGACY_POOLING_KEYS.items() if _bool(cfg, k, False, file)]
        modes = modes or ["mean"]
    for m in modes:
        if m not in POOLING_MODES:
            raise SentenceModulesError(
                f"{file}: unknown pooling mode {m!r}; expected one of {POOLING_MODES}"
            )
    dim_key = "embedding_dimension" if "embedding_dimension" in cfg else "word_embedding_dimension"
    dim = _int(cfg, dim_key, file) if dim_key in cfg else None
    spec = PoolingSpec(
        mode=modes[0] if len(modes) == 1 else tuple(modes),
        normalize=normalize,
        max_seq_length=max_len,
        include_prompt=_bool(cfg, "include_prompt", True, file),
    )
    return spec, dim


def activation_module(name: Any, source: Path) -> nn.Module:
    """The activation a Dense config names, e.g. ``torch.nn.modules.activation.Tanh`` or
    ``torch.nn.Identity``: an activation class of ``torch.nn`` (or Identity), built without
    arguments. Nothing outside torch is imported.

    Raises:
        SentenceModulesError: any other name (names ``source``).
    """
    cls = getattr(nn, name.rsplit(".", 1)[-1], None) if isinstance(name, str) else None
    ok = (
        isinstance(cls, type)
        and issubclass(cls, nn.Module)
        and cls.__module__ in ("torch.nn.modules.activation", "torch.nn.modules.linear")
        and (cls.__module__ == "torch.nn.modules.activation" or cls is nn.Identity)
        and name in (f"{cls.__module__}.{cls.__name__}", f"torch.nn.{cls.__name__}")
    )
    if not ok:
        raise SentenceModulesError(
            f"{source}: activation_function {name!r} is not a torch.nn activation we can build"
        )
    try:
        return cls()
    except TypeError as e:
        raise SentenceModulesError(f"{source}: cannot build {name} without arguments: {e}") from e


def _dense(directory: Path) -> DenseLayer:
    file = directory / "config.json"
    cfg = read_json_file(file, "the Dense settings")
    _refuse_features(cfg, _DENSE_KEYS, file)
    n_in, n_out = _int(cfg, "in_features", file), _int(cfg, "out_features", file)
    bias = _bool(cfg, "bias", True, file)
    # sentence-transformers' Dense defaults to Tanh when the config names no activation
    act = activation_module(cfg.get("activation_function", "torch.nn.Tanh"), file)
    state = read_weights(directory)
    expected = {"linear.weight": (n_out, n_in)} | ({"linear.bias": (n_out,)} if bias else {})
    got = {k: tuple(v.shape) for k, v in state.items()}
    if got != expected:
        raise SentenceModulesError(
            f"{directory}: the weights do not match {file.name} (in_features={n_in}, "
            f"out_features={n_out}, bias={bias}): expected {expected}, found {got}"
        )
    linear = nn.Linear(n_in, n_out, bias=bias)
    with torch.no_grad():
        linear.weight.copy_(state["linear.weight"])
        if bias:
            linear.bias.copy_(state["linear.bias"])
    return DenseLayer(file, linear, act)


def _prompts(path: Path) -> tuple[dict[str, str], str | None]:
    file = path / MODEL_SETTINGS_FILE
    if not file.is_file():
        return {}, None
    cfg = read_json_file(file, "the sentence-transformers model settings")
    prompts = cfg.get("prompts") or {}
    if not isinstance(prompts, dict) or not all(
        isinstance(k, str) and isinstance(v, str | None) for k, v in prompts.items()
    ):
        raise SentenceModulesError(f"{file}: prompts must map names to strings")
    prompts = {k: v or "" for k, v in prompts.items()}
    default = cfg.get("default_prompt_name")
    if default is not None and default not in prompts:
        raise SentenceModulesError(
            f"{file}: default_prompt_name {default!r} is not one of the prompts {sorted(prompts)}"
        )
    return prompts, default


def _settings(directory: Path) -> tuple[int | None, bool]:
    """max_seq_length and do_lower_case of a Transformer module's sentence_bert_config.json."""
    file = directory / SETTINGS_FILE
    if not file.is_file():
        return None, False
    cfg = read_json_file(file, "the Transformer settings")
    max_len = cfg.get("max_seq_length")
    if max_len is not None:
        max_len = _int(cfg, "max_seq_length", file)
    return max_len, _bool(cfg, "do_lower_case", False, file)


def read_sentence_modules(path: Path) -> SentenceModules:
    """Read a model directory as sentence-transformers would run it.

    A directory without ``modules.json`` is a plain Hugging Face encoder: mean pooling, L2
    normalised (``sentence_bert_config.json`` is still read when present). With it, the
    modules must be one Transformer, then one Pooling, then any Dense layers, then optionally
    Normalize (last).

    Raises:
        SentenceModulesError: a module type we cannot run (named), another order, a setting
            we do not run (token-level or residual Dense, unknown keys), a Dense whose weights
            do not match its config, bad prompts.
        ModelDirectoryError: a file that is not valid JSON, or missing Dense weights.
    """
    path = Path(path)
    modules_file = path / MODULES_FILE
    if not modules_file.is_file():
        max_len, lower = _settings(path)
        prompts, default = _prompts(path)
        return SentenceModules(
            path, PoolingSpec(normalize=True, max_seq_length=max_len), (), lower, prompts, default
        )
    try:
        entries = json.loads(modules_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise SentenceModulesError(f"{modules_file} is not readable JSON: {e}") from e
    if not isinstance(entries, list):
        raise SentenceModulesError(f"{modules_file} must hold a list of modules")
    kinds = [_kind(e, modules_file) for e in entries]
    order = "".join(k[0] for k in kinds)  # T, P, D, N
    if not re.fullmatch(r"TPD*N*", order):
        raise SentenceModulesError(
            f"{modules_file}: modules {kinds}; bertfamily runs Transformer, Pooling, then Dense "
            "layers, then Normalize"
        )
    dirs = [
        inside(path, e.get("path", ""), modules_file) if e.get("path") else path for e in entries
    ]
    max_len, lower = _settings(dirs[0])
    pooling, dim = _pooling(dirs[1], normalize="N" in order, max_len=max_len)
    dense = tuple(_dense(d) for d, k in zip(dirs, kinds) if k == "Dense")
    for d, k in zip(dirs, kinds):
        if k == "Normalize" and (d / "config.json").is_file():
            cfg = read_json_file(d / "config.json", "the Normalize settings")
            _refuse_features(cfg, set(), d / "config.json")
    prompts, default = _prompts(path)
    return SentenceModules(dirs[0], pooling, dense, lower, prompts, default, dim)


__all__ = [
    "POOLING_MODES",
    "DenseLayer",
    "PoolingSpec",
    "SentenceModules",
    "SentenceModulesError",
    "activation_module",
    "read_sentence_modules",
]
