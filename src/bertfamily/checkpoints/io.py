"""Reading and writing Hugging Face model directories (config.json + weights)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from ..config import EncoderConfig
from ..files import atomic_write
from .convert import CheckpointError, LoadReport, ours_to_hf
from .keymaps import FAMILIES, HF_ACTIVATIONS, OUR_ACTIVATIONS_TO_HF, FamilyMap

log = logging.getLogger(__name__)

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")


class ModelDirectoryError(ValueError):
    """A model directory lacks config.json or weights, or names an unsupported model_type."""


# --- config.json ---------------------------------------------------------------------------------
def read_hf_config(path: str | Path) -> dict[str, Any]:
    """The parsed config.json of a model directory.

    Raises:
        ModelDirectoryError: the directory or its config.json is missing or not valid JSON.
    """
    path = Path(path)
    if not path.is_dir():
        raise ModelDirectoryError(f"{path} is not a directory")
    cfg = path / "config.json"
    if not cfg.is_file():
        raise ModelDirectoryError(f"{path} has no config.json")
    try:
        return json.loads(cfg.read_text())
    except json.JSONDecodeError as e:
        raise ModelDirectoryError(f"{cfg} is not valid JSON: {e}") from e


def family_of(hf_config: dict[str, Any]) -> FamilyMap:
    """The key table for config.json's model_type.

    Raises:
        ModelDirectoryError: model_type missing or not supported (lists the supported ones).
    """
    model_type = hf_config.get("model_type")
    if model_type not in FAMILIES:
        raise ModelDirectoryError(
            f"unsupported model_type {model_type!r}; supported: {', '.join(FAMILIES)}"
        )
    return FAMILIES[model_type]


def config_from_hf(hf_config: dict[str, Any]) -> EncoderConfig:
    """EncoderConfig from a Hugging Face config.json dict.

    Raises:
        ModelDirectoryError: unsupported model_type, activation or variant (e.g. relative
            position embeddings in a BERT config).
    """
    fmap = family_of(hf_config)
    for name, value in fmap.config_required.items():
        if name in hf_config and hf_config[name] != value:
            raise ModelDirectoryError(
                f"{fmap.model_type} config has {name}={hf_config[name]!r}; only {value!r} is "
                f"supported"
            )
    fields: dict[str, Any] = {"model_type": fmap.model_type, **fmap.config_defaults}
    for hf_name, ours in fmap.config_fields.items():
        if hf_name in hf_config and hf_config[hf_name] is not None:
            fields[ours] = hf_config[hf_name]
    act = fields.get("hidden_act", "gelu")
    if act not in HF_ACTIVATIONS:
        raise ModelDirectoryError(
            f"unsupported activation {act!r}; supported: {sorted(HF_ACTIVATIONS)}"
        )
    fields["hidden_act"] = HF_ACTIVATIONS[act]
    head_act = fields.get("classifier_activation")  # tanh is not a hidden_act, kept as is
    if head_act is not None and head_act != "tanh":
        if head_act not in HF_ACTIVATIONS:
            raise ModelDirectoryError(
                f"unsupported classifier activation {head_act!r}; "
                f"supported: {['tanh'] + sorted(HF_ACTIVATIONS)}"
            )
        fields["classifier_activation"] = HF_ACTIVATIONS[head_act]
    fields.update(fmap.config_fixed)
    if "pair_head" not in fmap.config_fixed:
        fields["pair_head"] = "nsp"
    labels = label_names_from_hf(hf_config)
    if labels is not None:
        fields["label_names"] = labels
    if hf_config.get("problem_type") is not None:
        fields["problem_type"] = hf_config["problem_type"]
    used = set(fmap.config_fields) | {
        "model_type",
        "id2label",
        "label2id",
        "num_labels",
        "problem_type",
    }
    fields["extra"] = {k: v for k, v in hf_config.items() if k not in used}
    return EncoderConfig(**fields)


def label_names_from_hf(hf_config: dict[str, Any]) -> tuple[str, ...] | None:
    """Label names in id order from config.json's ``id2label`` (keys are decimal strings) or
    ``num_labels``; None when neither is there.

    Raises:
        ModelDirectoryError: id2label keys are not 0..C-1.
    """
    id2label = hf_config.get("id2label")
    if id2label:
        try:
            pairs = sorted((int(k), str(v)) for k, v in id2label.items())
        except (TypeError, ValueError) as e:
            raise ModelDirectoryError(f"id2label keys must be integers, got {id2label}") from e
        if [i for i, _ in pairs] != list(range(len(pairs))):
            raise ModelDirectoryError(
                f"id2label keys must be 0..{len(pairs) - 1}, got {[i for i, _ in pairs]}"
            )
        return tuple(v for _, v in pairs)
    if hf_config.get("num_labels"):
        return tuple(f"LABEL_{i}" for i in range(int(hf_config["num_labels"])))
    return None


def task_of(fmap: FamilyMap, hf_config: dict[str, Any]) -> str | None:
    """The fine-tuning head named by config.json's ``architectures`` (e.g.
    BertForTokenClassification → "tokens"), or None. Task heads share key names
    (``classifier.*``), so they are read from the class name, never sniffed from the keys."""
    from ..heads.tasks import TASK_HEADS

    by_class = {cls: heads for heads, cls in fmap.architectures.items() if heads in TASK_HEADS}
    for arch in hf_config.get("architectures") or ():
        if arch in by_class:
            return by_class[arch]
    return None


def config_to_hf(config: EncoderConfig, architecture: str) -> dict[str, Any]:
    """A Hugging Face config.json dict for our config."""
    fmap = FAMILIES[config.model_type]
    keep = {
        k: v
        for k, v in config.extra.items()
        if k
        in (
            "id2label",
            "label2id",
            "bos_token_id",
            "eos_token_id",
            "classifier_dropout",
        )
    }
    out: dict[str, Any] = {**keep, "model_type": config.model_type, "architectures": [architecture]}
    for hf_name, ours in fmap.config_fields.items():
        value = getattr(config, ours)
        if value is None:  # optional fields (classifier_dropout): transformers' default
            continue
        out[hf_name] = (
            OUR_ACTIVATIONS_TO_HF.get(value, value)
            if ours in ("hidden_act", "classifier_activation")
            else value
        )
    out["id2label"] = {str(i): name for i, name in enumerate(config.label_names)}
    out["label2id"] = dict(config.label2id)
    if config.problem_type is not None:
        out["problem_type"] = config.problem_type
    for name, value in fmap.config_required.items():
        out[name] = value
    out.update(fmap.config_written)
    out["tie_word_embeddings"] = True
    return out


# --- weights -------------------------------------------------------------------------------------
def read_weights(path: str | Path) -> dict[str, torch.Tensor]:
    """All tensors of a model directory: model.safetensors, a sharded safetensors index, or
    pytorch_model.bin (read with ``weights_only=True``).

    Raises:
        ModelDirectoryError: none of the weight files exists (lists the names looked for).
    """
    path = Path(path)
    if (path / "model.safetensors").is_file():
        return load_file(path / "model.safetensors")
    if (path / "model.safetensors.index.json").is_file():
        index = json.loads((path / "model.safetensors.index.json").read_text())
        state: dict[str, torch.Tensor] = {}
        for shard in sorted(set(index["weight_map"].values())):
            state.update(load_file(path / shard))
        return state
    if (path / "pytorch_model.bin").is_file():
        return torch.load(path / "pytorch_model.bin", map_location="cpu", weights_only=True)
    raise ModelDirectoryError(f"{path} has no weights; looked for {', '.join(WEIGHT_FILES)}")


def save_pretrained(model, path: str | Path) -> Path:
    """Write ``model`` as a Hugging Face directory (config.json + model.safetensors).

    The class written into config.json follows the heads: e.g. BertModel, BertForMaskedLM,
    BertForPreTraining. Tied decoder weights are not stored (transformers re-ties them).
    """
    path = Path(path)
    config: EncoderConfig = model.config
    fmap = FAMILIES[config.model_type]
    heads = sorted(model.heads)
    arch = fmap.architectures.get("+".join(heads))
    if arch is None:
        raise CheckpointError(f"{config.model_type} has no Hugging Face class with heads {heads}")
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    hf_state = ours_to_hf(state, fmap, config, heads, config.use_pooler)
    atomic_write(
        path / "model.safetensors",
        lambda tmp: save_file(hf_state, str(tmp), metadata={"format": "pt"}),
    )
    text = json.dumps(config_to_hf(config, arch), indent=2, sort_keys=True) + "\n"
    atomic_write(path / "config.json", lambda tmp: tmp.write_text(text))
    return path


__all__ = [
    "save_pretrained",
    "read_weights",
    "read_hf_config",
    "config_from_hf",
    "config_to_hf",
    "ModelDirectoryError",
    "CheckpointError",
    "LoadReport",
]
