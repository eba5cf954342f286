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

Two other kinds of directory are read here too: cross-encoders (`read_cross_encoder`: a
sequence-classification model, either a plain Hugging Face directory whose ``config.json`` may
carry the activation, or a sentence-transformers 6 directory whose one Transformer module has
``transformer_task: sequence-classification``) and SPLADE sparse encoders (`read_splade`: an
``MLMTransformer`` (or fill-mask Transformer) then ``SpladePooling``). `directory_kind` tells
the four apart.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ...checkpoints.io import inside, read_json_file, read_weights
from ...errors import InputError, SentenceModulesError
from ...files import read_json
from .static import MODEL2VEC, MODEL2VEC_MAX_LENGTH, SENTENCE_TRANSFORMERS, is_model2vec_directory

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
_KINDS = ("Transformer", "Pooling", "Dense", "Normalize", "StaticEmbedding")


@dataclass(frozen=True)
class PoolingSpec:
    """How token states become one vector: the pooling mode(s), whether the final vector is
    L2-normalised, and whether prompt tokens are pooled. (``max_seq_length`` is deprecated:
    the token limit is the directory's, `SentenceModules.max_seq_length`, or the
    embedder's ``max_seq_length`` argument; a value given here still overrides it, with a
    DeprecationWarning.)

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
                raise InputError(f"unknown pooling mode {m!r}; expected one of {POOLING_MODES}")

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
    max_seq_length: int | None = None  # sentence_bert_config.json's token limit, if any
    #: a static-embedding table instead of an encoder (`static`): whose rule runs it,
    #: "model2vec" or "sentence-transformers"; None for an encoder
    static: str | None = None
    static_max_length: int | None = None  # model2vec's config max_length (None: no cut)
    #: for a directory without modules.json, the warning that says the pooling is assumed
    #: (and, for a sequence classifier or cross-encoder, that it is one); the embedder logs it
    assumed: str | None = None

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


def _model2vec(path: Path) -> SentenceModules:
    """A model2vec directory (see `static`): its config's normalize and max_length decide."""
    file = path / "config.json"
    cfg = read_json_file(file, "the model2vec config")
    normalize = _bool(cfg, "normalize", False, file)
    max_len = cfg.get("max_length", MODEL2VEC_MAX_LENGTH)
    if max_len is not None:
        max_len = _int(cfg, "max_length", file)
    pooling = PoolingSpec("mean", normalize=normalize)
    return SentenceModules(path, pooling, static=MODEL2VEC, static_max_length=max_len)


def read_sentence_modules(path: Path) -> SentenceModules:
    """Read a model directory as sentence-transformers would run it.

    A directory without ``modules.json`` is a plain Hugging Face encoder: mean pooling, L2
    normalised (``sentence_bert_config.json`` is still read when present). With it, the
    modules must be one Transformer, then one Pooling, then any Dense layers, then optionally
    Normalize (last); or one StaticEmbedding (a table of token vectors, mean-pooled: `static`)
    then any Dense layers and Normalize. A model2vec directory (config.json's ``model_type:
    model2vec``, with or without ``modules.json``) runs by model2vec's rule: its config's
    ``normalize`` and ``max_length`` decide.

    Raises:
        SentenceModulesError: a module type we cannot run (named), another order, a setting
            we do not run (token-level or residual Dense, unknown keys), a Dense whose weights
            do not match its config, bad prompts.
        ModelDirectoryError: a file that is not valid JSON, or missing Dense weights.
    """
    path = Path(path)
    modules_file = path / MODULES_FILE
    if is_model2vec_directory(path):
        return _model2vec(path)
    if not modules_file.is_file():
        max_len, lower = _settings(path)
        prompts, default = _prompts(path)
        return SentenceModules(
            path,
            PoolingSpec(normalize=True),
            (),
            lower,
            prompts,
            default,
            None,
            max_len,
            assumed=assumed_pooling(path),
        )
    entries = read_json(
        modules_file, what="a list of modules", kind=list, error=SentenceModulesError
    )
    kind = _directory_kind(path, entries)
    if kind != "embedding":
        reader = "Reranker" if kind == "cross-encoder" else "SparseEncoder"
        raise SentenceModulesError(
            f"{modules_file}: this is a {kind} directory, not a sentence embedder; load it "
            f"with bertfamily's {reader}"
        )
    kinds = [_kind(e, modules_file) for e in entries]
    order = "".join(k[0] for k in kinds)  # T, P, D, N
    if not re.fullmatch(r"TPD*N*|SD*N*", order):
        raise SentenceModulesError(
            f"{modules_file}: modules {kinds}; bertfamily runs Transformer, Pooling, then Dense "
            "layers, then Normalize (or StaticEmbedding, Dense layers, Normalize)"
        )
    dirs = [
        inside(path, e.get("path", ""), modules_file) if e.get("path") else path for e in entries
    ]
    if order[0] == "S":  # a static table: mean of its token rows, as EmbeddingBag takes it
        dense = tuple(_dense(d) for d, k in zip(dirs, kinds) if k == "Dense")
        prompts, default = _prompts(path)
        pooling = PoolingSpec("mean", normalize="N" in order)
        static = SENTENCE_TRANSFORMERS
        return SentenceModules(dirs[0], pooling, dense, False, prompts, default, static=static)
    max_len, lower = _settings(dirs[0])
    pooling, dim = _pooling(dirs[1], normalize="N" in order, max_len=max_len)
    dense = tuple(_dense(d) for d, k in zip(dirs, kinds) if k == "Dense")
    for d, k in zip(dirs, kinds):
        if k == "Normalize" and (d / "config.json").is_file():
            cfg = read_json_file(d / "config.json", "the Normalize settings")
            _refuse_features(cfg, set(), d / "config.json")
    prompts, default = _prompts(path)
    return SentenceModules(dirs[0], pooling, dense, lower, prompts, default, dim, max_len)


__all__ = [
    "POOLING_MODES",
    "CrossEncoderSpec",
    "SpladeSpec",
    "directory_kind",
    "read_cross_encoder",
    "read_splade",
    "DenseLayer",
    "PoolingSpec",
    "SentenceModules",
    "SentenceModulesError",
    "activation_module",
    "assumed_pooling",
    "read_sentence_modules",
]


# --- cross-encoders and SPLADE -------------------------------------------------------------------
_CLASSIFY_SUFFIX = "ForSequenceClassification"
_MLM_SUFFIX = "ForMaskedLM"
SPLADE_POOLING = ("max", "sum")
SPLADE_ACTIVATIONS = ("relu", "log1p_relu")


def _entries(path: Path) -> list[Any] | None:
    file = path / MODULES_FILE
    if not file.is_file():
        return None
    return read_json(file, what="a list of modules", kind=list, error=SentenceModulesError)


def _class_name(entry: Any) -> str:
    return entry.get("type", "").rsplit(".", 1)[-1] if isinstance(entry, dict) else ""


def _architectures(path: Path) -> list[str]:
    file = path / "config.json"
    if not file.is_file():
        return []
    archs = read_json_file(file, "the model config").get("architectures") or []
    return [a for a in archs if isinstance(a, str)] if isinstance(archs, list) else []


def _directory_kind(path: Path, entries: list[Any] | None) -> str:
    if entries is None:
        archs = _architectures(path)
        if any(a.endswith(_CLASSIFY_SUFFIX) for a in archs):
            return "cross-encoder"
        return "embedding"
    names = [_class_name(e) for e in entries]
    if "SpladePooling" in names or "MLMTransformer" in names:
        return "sparse"
    if names == ["Transformer"]:
        file = path / MODEL_SETTINGS_FILE
        settings = read_json_file(file, "the model settings") if file.is_file() else {}
        task = _transformer_task(path, entries[0])
        if settings.get("model_type") == "CrossEncoder" or task == "sequence-classification":
            return "cross-encoder"
    return "embedding"


def _transformer_task(path: Path, entry: Any) -> str | None:
    sub = inside(path, entry["path"], path / MODULES_FILE) if entry.get("path") else path
    file = sub / SETTINGS_FILE
    if not file.is_file():
        return None
    task = read_json_file(file, "the Transformer settings").get("transformer_task")
    return task if isinstance(task, str) else None


def directory_kind(path: str | Path) -> str:
    """What a model directory holds, as sentence-transformers would load it: "cross-encoder"
    (a sequence-classification model: `read_cross_encoder`), "sparse" (SPLADE:
    `read_splade`) or "embedding" (everything else: `read_sentence_modules`; plain Hugging Face
    classifiers are told apart later by their architectures).

    A plain Hugging Face directory (no ``modules.json``) with a ``*ForSequenceClassification``
    architecture counts as a cross-encoder when it has one label (as text-embeddings-inference
    decides: a one-label classifier is a reranker) or when its config says so
    (``sentence_transformers``, ``sbert_ce_default_activation_function``, or
    config_sentence_transformers.json's ``model_type: CrossEncoder``); a classifier with
    several labels and no such mark is reported as "embedding" here (served as labels).
    """
    path = Path(path)
    entries = _entries(path)
    kind = _directory_kind(path, entries)
    if kind == "cross-encoder" and entries is None and not _marked_cross_encoder(path):
        return "embedding"
    return kind


def _label_count(cfg: dict[str, Any]) -> Any:
    """config.json's ``num_labels``, else the size of ``id2label``, else 2 (transformers')."""
    return cfg.get("num_labels", len(cfg.get("id2label") or {}) or 2)


def _marked_cross_encoder(path: Path) -> bool:
    cfg = read_json_file(path / "config.json", "the model config")
    if "sentence_transformers" in cfg or cfg.get("sbert_ce_default_activation_function"):
        return True
    labels = _label_count(cfg)
    if labels == 1:
        return True
    file = path / MODEL_SETTINGS_FILE
    return file.is_file() and read_json_file(file).get("model_type") == "CrossEncoder"


def assumed_pooling(path: str | Path) -> str:
    """The warning for a directory read as a sentence embedder without sentence-transformers'
    ``modules.json`` (sentence-transformers warns too, "No sentence-transformers model found
    ... Creating a new one with mean pooling"): mean pooling, L2-normalised, is assumed. It
    names a cross-encoder as one (`directory_kind`'s marks: one label, sentence-transformers'
    CrossEncoder keys) and any other ``*ForSequenceClassification`` as a classifier with its
    labels: their pooled token states are not embeddings they were trained to give.

    Returns:
        One line that names the directory.
    """
    path = Path(path)
    how = "embedding it assumes mean pooling of its token states, L2-normalised"
    arch = next((a for a in _architectures(path) if a.endswith(_CLASSIFY_SUFFIX)), None)
    if arch is None:
        return f"{path} has no sentence-transformers {MODULES_FILE}: {how}"
    if _marked_cross_encoder(path):
        return (
            f"{path} is a cross-encoder ({arch}), not a sentence embedder: it scores text pairs "
            f"(load it with Reranker, `bertfamily rerank`); {how}"
        )
    labels = _label_count(read_json_file(path / "config.json", "the model config"))
    return (
        f"{path} is a sequence classifier ({arch}, {labels} labels), not a sentence embedder "
        f"(its labels: TextClassifier); {how}"
    )


@dataclass(frozen=True)
class CrossEncoderSpec:
    """A cross-encoder directory: the sequence-classification model in ``model_dir``, the
    activation its scores go through by default (sentence-transformers' ``activation_fn``:
    the name it saved, else Sigmoid for one label and Identity for more), the token limit and
    the prompts."""

    model_dir: Path
    activation: str | None  # a torch.nn class path, or None for the default by label count
    max_seq_length: int | None = None
    prompts: dict[str, str] = field(default_factory=dict)
    default_prompt_name: str | None = None

    def activation_module(self, num_labels: int) -> nn.Module:
        """The default activation as a module (see the class)."""
        if self.activation is None:
            return nn.Sigmoid() if num_labels == 1 else nn.Identity()
        return activation_module(self.activation, self.model_dir / "config.json")


def read_cross_encoder(path: str | Path) -> CrossEncoderSpec:
    """Read a cross-encoder directory in either layout.

    - classic (no ``modules.json``): config.json's ``sentence_transformers.activation_fn``
      (sentence-transformers 4-5) or ``sbert_ce_default_activation_function`` (before 4);
    - sentence-transformers 6: one Transformer module (``sentence_bert_config.json`` with
      ``transformer_task: sequence-classification``) and the activation in
      ``config_sentence_transformers.json`` (``activation_fn``), config.json's as a fallback.

    Raises:
        SentenceModulesError: modules other than one Transformer, a model that is not a
            sequence classifier, or an activation that is not a torch.nn activation.
    """
    path = Path(path)
    entries = _entries(path)
    model_dir = path
    if entries is not None:
        if [_class_name(e) for e in entries] != ["Transformer"]:
            raise SentenceModulesError(
                f"{path / MODULES_FILE}: a cross-encoder is one Transformer module, got "
                f"{[_class_name(e) for e in entries]}"
            )
        if entries[0].get("path"):
            model_dir = inside(path, entries[0]["path"], path / MODULES_FILE)
    if not any(a.endswith(_CLASSIFY_SUFFIX) for a in _architectures(model_dir)):
        raise SentenceModulesError(
            f"{model_dir / 'config.json'}: a cross-encoder needs a *ForSequenceClassification "
            "architecture"
        )
    cfg = read_json_file(model_dir / "config.json", "the model config")
    file = path / MODEL_SETTINGS_FILE
    settings = read_json_file(file, "the model settings") if file.is_file() else {}
    block = cfg.get("sentence_transformers")
    activation = settings.get("activation_fn")
    if activation is None and isinstance(block, dict):
        activation = block.get("activation_fn")
    if activation is None:
        activation = cfg.get("sbert_ce_default_activation_function")
    if activation is not None:
        activation_module(activation, file if "activation_fn" in settings else model_dir)
    max_len, _ = _settings(model_dir)
    prompts, default = _prompts(path)
    return CrossEncoderSpec(model_dir, activation, max_len, prompts, default)


@dataclass(frozen=True)
class SpladeSpec:
    """A SPLADE directory: the masked-LM model in ``model_dir``, the pooling over tokens
    (``max`` or ``sum``) of log(1 + ReLU(logits)) (``log1p_relu``: log1p once more), the token
    limit and the prompts."""

    model_dir: Path
    pooling: str = "max"
    activation: str = "relu"
    max_seq_length: int | None = None
    do_lower_case: bool = False
    prompts: dict[str, str] = field(default_factory=dict)
    default_prompt_name: str | None = None


def read_splade(path: str | Path) -> SpladeSpec:
    """Read a SPLADE directory: ``MLMTransformer`` (or a Transformer with
    ``transformer_task: fill-mask``) then ``SpladePooling`` (``pooling_strategy``,
    ``activation_function``).

    Raises:
        SentenceModulesError: other modules, an unknown pooling or activation, or a model that
            is not a masked LM.
    """
    path = Path(path)
    entries = _entries(path)
    names = [_class_name(e) for e in entries or []]
    if (
        len(names) != 2
        or names[0] not in ("MLMTransformer", "Transformer")
        or names[1] != ("SpladePooling")
    ):
        raise SentenceModulesError(
            f"{path / MODULES_FILE}: a SPLADE model is MLMTransformer then SpladePooling, got "
            f"{names}"
        )
    assert entries is not None
    dirs = [
        inside(path, e["path"], path / MODULES_FILE) if e.get("path") else path for e in entries
    ]
    if not any(a.endswith(_MLM_SUFFIX) for a in _architectures(dirs[0])):
        raise SentenceModulesError(
            f"{dirs[0] / 'config.json'}: SPLADE needs a *ForMaskedLM architecture"
        )
    file = dirs[1] / "config.json"
    cfg = read_json_file(file, "the SpladePooling settings")
    pooling = cfg.get("pooling_strategy", "max")
    activation = cfg.get("activation_function", "relu")
    if pooling not in SPLADE_POOLING:
        raise SentenceModulesError(f"{file}: pooling_strategy must be one of {SPLADE_POOLING}")
    if activation not in SPLADE_ACTIVATIONS:
        raise SentenceModulesError(
            f"{file}: activation_function must be one of {SPLADE_ACTIVATIONS}"
        )
    unknown = sorted(set(cfg) - {"pooling_strategy", "activation_function", "embedding_dimension",
                                  "word_embedding_dimension", "chunk_size"})  # fmt: skip
    if unknown:
        raise SentenceModulesError(f"{file}: unsupported settings {unknown}")
    max_len, lower = _settings(dirs[0])
    prompts, default = _prompts(path)
    return SpladeSpec(dirs[0], pooling, activation, max_len, lower, prompts, default)
