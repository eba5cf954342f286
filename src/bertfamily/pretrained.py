"""Directory → `Model`: read a Hugging Face model directory, build the model, load its weights."""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import Any

import torch

from .build import build_model
from .checkpoints.adapters import apply_adapter
from .checkpoints.convert import (
    CheckpointError,
    LoadReport,
    _listed,
    detect_components,
    hf_to_ours,
    new_parameter_keys,
    rename_legacy_layernorm,
)
from .checkpoints.io import (
    ModelDirectoryError,
    config_from_hf,
    family_of,
    read_hf_config,
    read_weights,
    reading_directory,
    task_of,
)
from .checkpoints.keymaps import FamilyMap
from .config import ConfigError, check_parameter_budget
from .errors import InputError
from .heads.task_heads import TASK_HEADS
from .modules.skeleton import storage_free
from .resources.resolve import resolve_model

log = logging.getLogger(__name__)


def model_from_directory(
    path: Path,
    *,
    heads: list[str] | None = None,
    strict: bool = True,
    return_report: bool = False,
    dtype: torch.dtype | None = None,
    new_heads: bool = False,
    config_overrides: dict[str, Any] | None = None,
    max_parameters: int | None = None,
    config_json: dict[str, Any] | None = None,
    adapter: str | os.PathLike[str] | None = None,
    merge: bool | None = None,
    **more_overrides: Any,
):
    """Load a resolved local Hugging Face model directory into a `bertfamily.Model` (what
    `from_pretrained` does after resolving a name; loaders that already resolved the directory
    and read its config.json call this, so each load resolves and parses once).

    Args:
        path: directory with config.json and model.safetensors / pytorch_model.bin.
        config_json: the directory's parsed config.json when the caller has read it (else it
            is read here).
        heads: heads to build (subset of "mlm", "pair", "rtd", or one task head "classify",
            "tokens", "qa", "choice"); None = the heads the checkpoint holds (task heads from
            config.json's ``architectures``).
        new_heads: fine-tuning start: heads (and a pooler) the checkpoint lacks, or holds with
            another shape (another number of labels), are freshly initialised, and the
            checkpoint's other heads are dropped; everything else stays strict.
        strict: raise on missing/unexpected/mismatched keys (else report them in the log and,
            with ``return_report``, in a `LoadReport`).
        return_report: return (model, report) instead of the model.
        dtype: cast the parameters (e.g. torch.bfloat16); None keeps float32.
        config_overrides: EncoderConfig fields to change before building, e.g.
            ``{"conditional_norms": ("attention", "ffn"), "condition_size": 16}`` to load an
            ordinary checkpoint into a conditional model (its W_γ, W_β are then reported as
            ``newly_initialized``, zero, so the model starts as the checkpoint), or
            ``label_names``. Fields may also be given as keyword arguments.
        max_parameters: the largest model to build (estimated from config.json before
            anything is allocated); None = ``BERTFAMILY_MAX_PARAMETERS`` or 2·10^10.
        adapter: a PEFT LoRA adapter directory (adapter_config.json +
            adapter_model.safetensors) trained on this base model, put on it after loading
            (`checkpoints.adapters.apply_adapter`; LoRA only).
        merge: with ``adapter``: True (default) folds W + (α/r)·B A into the weights; False
            keeps the update apart (`modules.lora.LoraLinear`, trainable).

    Returns:
        The model in eval mode (or (model, LoadReport)).

    Raises:
        ModelDirectoryError: no directory, no config.json, no weights, unsupported model_type;
            a config.json that is not a JSON object or has a field of the wrong type or out of
            range, or describes a model over ``max_parameters``; a weight file that is corrupt,
            truncated, refused (a ``.bin`` pickling code) or names files outside the
            directory. The message names the file.
        ConfigError: an override out of range.
        CheckpointError: when strict, every missing or unexpected key and shape mismatch;
            an adapter that does not match the model (every key listed).
        InputError: ``merge`` without ``adapter``.
    """
    if adapter is None and merge is not None:
        raise InputError("merge applies to an adapter: give adapter=DIR too")
    path = Path(path)
    with reading_directory(path):  # no save swaps the directory while it is read
        hf_config = read_hf_config(path) if config_json is None else config_json
        config = config_from_hf(hf_config, path / "config.json")
        fmap = family_of(hf_config)
        overrides = {**(config_overrides or {}), **more_overrides}
        if overrides:
            config = config.replace(**overrides)
        try:
            check_parameter_budget(config, max_parameters)
        except ConfigError as e:
            raise ModelDirectoryError(f"{path / 'config.json'}: {e}") from e
        hf_state = read_weights(path)
    if strict:
        _check_weights_can_fill(config, hf_state, path)
    found_heads, has_pooler = detect_components(fmap, hf_state)
    task = task_of(fmap, hf_config)
    found_heads = [h for h in found_heads if h not in TASK_HEADS] + ([task] if task else [])
    heads = found_heads if heads is None else list(heads)
    if "pair" in heads:
        has_pooler = True
    tasks = [h for h in heads if h in TASK_HEADS]
    if tasks:  # a task head has a pooler exactly when it reads the pooled output
        pooling = config.choice_pooling if tasks[0] == "choice" else config.classifier_pooling
        has_pooler = tasks[0] in ("classify", "choice") and pooling == "pooler"
        if has_pooler and not config.use_pooler:
            config = config.replace(use_pooler=True)
    config = config.replace(use_pooler=has_pooler and config.use_pooler)
    build_config = config
    # A model needing more values than the weights hold is first built without storage (the
    # meta device) to compare its shapes with the checkpoint's: a mismatch is refused before
    # anything is allocated. Otherwise the model costs no more than the weights already read.
    skeleton = config.parameter_count(heads) > _stored_values(hf_state) + 1_000_000
    with storage_free() if skeleton else contextlib.nullcontext():
        model = build_model(config, heads=heads, max_parameters=max_parameters)
    unused_pooler: list[str] = []
    if config.use_pooler and not model.config.use_pooler:
        # a pooler none of the heads reads (e.g. a masked-LM checkpoint saved with one):
        # dropped, as transformers' class with these heads drops it
        pooler_keys = {fmap.base_prefix + k for k in fmap.pooler} | set(fmap.pooler)
        unused_pooler = sorted(k for k in hf_state if rename_legacy_layernorm(k) in pooler_keys)
        hf_state = {k: v for k, v in hf_state.items() if k not in unused_pooler}
        config = model.config
    expected = {k: v.shape for k, v in model.state_dict().items()}
    state, report = hf_to_ours(
        hf_state,
        fmap,
        config,
        expected,
        heads,
        config.use_pooler,
        strict=strict and not new_heads,
        optional=new_parameter_keys(model),
        warn=not new_heads,
    )
    if new_heads:
        report = _accept_new_heads(report, fmap, state)
        if strict and not report.clean:
            raise CheckpointError(
                "checkpoint does not match the model beyond its heads: "
                f"missing {_listed(report.missing)}, unexpected {_listed(report.unexpected)}, "
                f"mismatched {_listed(report.mismatched)}",
                report.missing,
                report.unexpected,
                report.mismatched,
            )
        if not report.clean:
            log.warning(
                "non-strict load beyond the heads: missing %s, unexpected %s, mismatched %s",
                report.missing,
                report.unexpected,
                report.mismatched,
            )
    if unused_pooler:
        log.info("dropped the unused pooler: %s", ", ".join(unused_pooler))
        report.dropped.extend(unused_pooler)
    if skeleton:  # the shapes match: now allocate
        model = build_model(build_config, heads=heads, max_parameters=max_parameters)
    model.load_state_dict(state, strict=False)
    if adapter is not None:
        apply_adapter(model, adapter, merge=True if merge is None else merge)
    model.eval()
    if dtype is not None:
        model.to(dtype)
        _check_run_dtype(model, dtype, path)
    log.info(
        "loaded %s (%s, heads=%s) from %s",
        fmap.model_type,
        f"{model.num_parameters():,} parameters",
        heads,
        path,
    )
    return (model, report) if return_report else model


def from_pretrained(path: str | os.PathLike[str], *, revision: str | None = None, **kwargs: Any):
    """Load a model into a `bertfamily.Model`: a local Hugging Face directory, a bertfamily
    resource name (``"all-MiniLM-L6-v2"``, fetched on first use as ``bertfamily fetch`` does),
    or the id (``org/name``) of a model already in the local Hugging Face cache — the same
    names every ``--model`` option takes (`bertfamily.resources.resolve_model`, called once).

    Args:
        path: the directory, resource name or cache id (a local directory always wins).
        revision: for a cache id: a branch or tag (default ``main``) or a commit.
        **kwargs: ``heads``, ``strict``, ``return_report``, ``dtype``, ``new_heads``,
            ``config_overrides``, ``max_parameters``, ``adapter``, ``merge`` and config
            fields, as described in `model_from_directory`.

    Returns:
        The model in eval mode (or (model, LoadReport) with ``return_report=True``).

    Raises:
        ModelNotFoundError: a name that is no directory, resource or cached id (the message
            lists where it looked).
        FetchError, CacheCorruptError: fetching or checking a resource failed.
        ModelDirectoryError, ConfigError, CheckpointError: see `model_from_directory`.
    """
    return model_from_directory(resolve_model(path, revision), **kwargs)


def _stored_values(hf_state: dict) -> int:
    """How many floating-point values the checkpoint holds."""
    return sum(t.numel() for t in hf_state.values() if t.is_floating_point())


def _check_weights_can_fill(config, hf_state: dict, path: Path) -> None:
    """Refuse, before any model is built, a config.json whose trunk alone needs far more
    values than the weight files hold (a vocab_size of 10^8, 9,999 layers): the load could only
    fail, after allocating that model. The exact shapes are compared later, on a model without
    storage; this bound only keeps absurd configs from being built at all. The margin (twice
    the stored values, plus a million) leaves room for parameters a load adds on purpose
    (conditional norms, new heads).

    Raises:
        ModelDirectoryError: one line naming config.json, both counts and the sizes."""
    stored = _stored_values(hf_state)
    needed = config.replace(use_pooler=False).parameter_count(())
    if needed > 2 * stored + 1_000_000:
        raise ModelDirectoryError(
            f"{path / 'config.json'} describes a trunk of {needed:,} parameters "
            f"(vocab_size {config.vocab_size:,}, hidden_size {config.hidden_size:,}, "
            f"num_hidden_layers {config.num_hidden_layers:,}, intermediate_size "
            f"{config.intermediate_size:,}) but the weights hold {stored:,} values: they cannot "
            "be this model's; refused before building it"
        )


def _check_run_dtype(model, dtype, path) -> None:
    """Refuse weights that overflow the run dtype (finite in float32, ±inf in float16)."""
    if dtype is None or not dtype.is_floating_point:
        return
    for name, tensor in model.state_dict().items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            limit = torch.finfo(dtype).max
            raise ModelDirectoryError(
                f"{path}: weight {name!r} overflows {str(dtype).replace('torch.', '')} "
                f"(values beyond ±{limit:g}); run it in float32 or bfloat16"
            )


def _accept_new_heads(report: LoadReport, fmap: FamilyMap, state: dict) -> LoadReport:
    """What remains wrong after allowing fresh heads/pooler and dropped foreign heads."""
    head_keys = {k.replace("{i}", "") for t in fmap.heads.values() for k in t}
    pooler_keys = {fmap.base_prefix + k for k in fmap.pooler} | set(fmap.pooler)
    fresh = ("task_head.", "mlm_head.", "pair_head.", "rtd_head.", "encoder.pooler.")
    missing = [k for k in report.missing if not k.startswith(fresh)]
    unexpected = [
        k for k in report.unexpected if rename_legacy_layernorm(k) not in head_keys | pooler_keys
    ]
    mismatched = [m for m in report.mismatched if not m.startswith("task_head.")]
    names = {
        "task_head.": "task head",
        "mlm_head.": "MLM head",
        "pair_head.": "pair head",
        "rtd_head.": "replaced-token-detection head",
        "encoder.pooler.": "pooler",
    }
    initialised = sorted({names[p] for k in report.missing for p in fresh if k.startswith(p)})
    if initialised:  # the normal case when fine-tuning starts: one line, as information
        log.info("new %s initialised (not in the checkpoint)", " and ".join(initialised))
    return LoadReport(
        missing,
        unexpected,
        mismatched,
        report.dropped + [k for k in report.unexpected if k not in unexpected],
    )
