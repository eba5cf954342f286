"""Reading and writing Hugging Face model directories (config.json + weights).

Nothing read from disk is trusted: config.json must be a bounded JSON object whose fields pass
`EncoderConfig` validation; a safetensors header is checked against the file (dtypes, shapes,
offsets, size) before any tensor is read; a sharded index must name shards inside its
directory; a ``.bin`` is read with ``weights_only=True``. Every failure is a
`ModelDirectoryError` naming the file. Saves are directory-atomic (`atomic_directory`), and
saves and loads clear the temporaries an interrupted save left (`recover_directory`).
"""

from __future__ import annotations

import json
import logging
import math
import os
import pickle
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from ..config import ConfigError, EncoderConfig, as_config
from ..errors import ModelDirectoryError
from ..files import (
    MAX_JSON_BYTES,
    atomic_directory,
    atomic_write,
    parse_json,
    read_json,
    recover_directory,
    remove_inside,
)
from ..modules.stored import INTEGER_BUFFERS, check_stored_tensors  # noqa: F401 (its old home)
from .convert import CheckpointError, LoadReport, ours_to_hf
from .keymaps import FAMILIES, HF_ACTIVATIONS, OUR_ACTIVATIONS_TO_HF, FamilyMap

log = logging.getLogger(__name__)

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
MAX_SAFETENSORS_HEADER = 100 * 2**20  # the safetensors format's own limit
MAX_LABELS = 1_000_000  # num_labels without id2label

# safetensors dtype -> bytes per element
SAFETENSORS_DTYPES = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E5M2": 1,
    "F8_E4M3": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "I64": 8,
    "U64": 8,
    "F64": 8,
}


# --- directory hygiene ---------------------------------------------------------------------------
@contextmanager
def _parent_lock(path: Path, exclusive: bool, blocking: bool = True) -> Iterator[bool]:
    """An advisory ``flock`` on the parent directory of ``path``: saves hold it exclusively,
    so a concurrent load never deletes a save's temporary directory as stale, and never reads
    config.json of one version and weights of another. Yields whether the lock is held (False
    where locks are unavailable, or when not ``blocking`` and it is taken)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - no flock (Windows): best effort
        yield False
        return
    try:
        fd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        yield False
        return
    try:
        flags = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
        try:
            fcntl.flock(fd, flags | (0 if blocking else fcntl.LOCK_NB))
            held = True
        except OSError:
            held = False
        yield held
    finally:
        os.close(fd)  # releases the lock


@contextmanager
def reading_directory(path: str | Path) -> Iterator[Path]:
    """Hold a model directory still while it is read: removes the temporaries an interrupted
    save left (`recover_directory`, when no save or other reader is active), waits for a save
    in progress, puts back the previous version when a kill came at the rename instant, and
    keeps saves out until the block ends."""
    path = Path(path)
    with _parent_lock(path, exclusive=True, blocking=False) as alone:
        if alone:
            _recover(path)
    with _parent_lock(path, exclusive=False):
        if not path.exists():
            _recover(path)
        yield path


def _recover(path: Path) -> None:
    try:
        recover_directory(path)
    except OSError as e:  # a read-only location: nothing to clean there
        log.debug("could not clean temporaries beside %s: %s", path, e)


# --- config.json ---------------------------------------------------------------------------------
def read_json_file(file: Path, what: str = "a JSON object") -> dict[str, Any]:
    """A bounded JSON object from ``file`` (`files.read_json`, at most `MAX_JSON_BYTES`).

    Raises:
        ModelDirectoryError: the file is missing, too large, not UTF-8, not JSON, nested too
            deep, or not a JSON object; the message names the file.
    """
    return read_json(file, what=what, max_bytes=MAX_JSON_BYTES, error=ModelDirectoryError)


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def read_hf_config(path: str | Path) -> dict[str, Any]:
    """The parsed config.json of a model directory.

    Raises:
        ModelDirectoryError: the directory or its config.json is missing, or config.json is
            not a JSON object (or too large to be a config).
    """
    path = Path(path)
    if not path.is_dir():
        raise ModelDirectoryError(f"{path} is not a directory")
    cfg = path / "config.json"
    if not cfg.is_file():
        raise ModelDirectoryError(f"{path} has no config.json")
    return read_json_file(cfg, "a JSON object of model settings")


def family_of(hf_config: dict[str, Any]) -> FamilyMap:
    """The key table for config.json's model_type.

    Raises:
        ModelDirectoryError: model_type missing or not supported (lists the supported ones).
    """
    model_type = hf_config.get("model_type")
    if not isinstance(model_type, str) or model_type not in FAMILIES:
        raise ModelDirectoryError(
            f"unsupported model_type {model_type!r}; supported: {', '.join(FAMILIES)}"
        )
    return FAMILIES[model_type]


def config_from_hf(hf_config: dict[str, Any], source: str | Path = "config.json") -> EncoderConfig:
    """EncoderConfig from a Hugging Face config.json dict.

    Args:
        hf_config: the parsed config.json.
        source: the file it came from, named in error messages.

    Raises:
        ModelDirectoryError: not an object, unsupported model_type, activation or variant
            (e.g. relative position embeddings in a BERT config), or a field of the wrong type
            or out of range (the message names ``source``, the field and the value).
    """
    if not isinstance(hf_config, dict):
        raise ModelDirectoryError(f"{source} must hold a JSON object, got {_short(hf_config)}")
    try:
        return _config_from_hf(hf_config)
    except ConfigError as e:
        raise ModelDirectoryError(f"{source}: {e}") from e
    except ModelDirectoryError as e:
        raise ModelDirectoryError(f"{source}: {e}") from e


def _flatten_layer_types(hf_config: dict[str, Any]) -> dict[str, Any]:
    """transformers 5's per-layer-type fields in their flat form: ``rope_parameters``
    {"full_attention": {"rope_theta": ...}, "sliding_attention": {...}} as global_rope_theta /
    local_rope_theta (a flat {"rope_theta": ..., "rope_type": ...} as rope_theta and rope_type),
    and ``layer_types`` as global_attn_every_n_layers (the one pattern the
    families have: full attention at layers 0, n, 2n, ...; anything else is refused)."""
    out = dict(hf_config)
    rope = hf_config.get("rope_parameters")
    if isinstance(rope, dict) and "rope_theta" in rope:  # one table for every layer (GTE, ...)
        for key in ("rope_theta", "rope_type"):
            if rope.get(key) is not None:
                out[key] = rope[key]
    elif isinstance(rope, dict):
        for kind, name in (
            ("full_attention", "global_rope_theta"),
            ("sliding_attention", "local_rope_theta"),
        ):
            theta = (rope.get(kind) or {}).get("rope_theta")
            if theta is not None:
                out[name] = theta
    types = hf_config.get("layer_types")
    if isinstance(types, list) and types:
        full = [i for i, t in enumerate(types) if t == "full_attention"]
        every = full[1] if len(full) > 1 else len(types)
        if [t == "full_attention" for t in types] != [i % every == 0 for i in range(len(types))]:
            raise ModelDirectoryError(
                f"layer_types {_short(types)}: only full attention at every n-th layer from "
                "layer 0 (global_attn_every_n_layers) is supported"
            )
        out["global_attn_every_n_layers"] = every
    return out


def _config_from_hf(hf_config: dict[str, Any]) -> EncoderConfig:
    fmap = family_of(hf_config)
    hf_config = _flatten_layer_types(hf_config)
    for name, value in fmap.config_required.items():
        if name in hf_config and hf_config[name] != value:
            raise ModelDirectoryError(
                f"{fmap.model_type} config has {name}={hf_config[name]!r}; only {value!r} is "
                f"supported"
            )
    head_dim = hf_config.get("head_dim")
    heads, hidden = hf_config.get("num_attention_heads"), hf_config.get("hidden_size")
    if head_dim is not None and isinstance(heads, int) and isinstance(hidden, int) and heads:
        if head_dim != hidden // heads:  # NomicBertConfig's head_dim: ours is always H / N
            raise ModelDirectoryError(
                f"head_dim={_short(head_dim)} differs from hidden_size / num_attention_heads = "
                f"{hidden // heads}; only head_dim = H / N is supported"
            )
    fields: dict[str, Any] = {"model_type": fmap.model_type, **fmap.config_defaults}
    for hf_name, ours in fmap.config_fields.items():
        if hf_name in hf_config and hf_config[hf_name] is not None:
            fields[ours] = hf_config[hf_name]
    act = fields.get("hidden_act", "gelu")
    if not isinstance(act, str) or act not in HF_ACTIVATIONS:
        raise ModelDirectoryError(
            f"unsupported hidden_act {_short(act)}; supported: {sorted(HF_ACTIVATIONS)}"
        )
    fields["hidden_act"] = HF_ACTIVATIONS[act]
    # tanh is not a hidden_act, kept as is (DeBERTa-v2's conv_act defaults to it)
    for name, what in (("classifier_activation", "classifier"), ("conv_act", "convolution")):
        head_act = fields.get(name)
        if head_act is None or head_act == "tanh":
            continue
        if not isinstance(head_act, str) or head_act not in HF_ACTIVATIONS:
            raise ModelDirectoryError(
                f"unsupported {what} activation {head_act!r}; "
                f"supported: {['tanh'] + sorted(HF_ACTIVATIONS)}"
            )
        fields[name] = HF_ACTIVATIONS[head_act]
    fields.update(fmap.config_fixed)
    for ours, source in fmap.config_mirrors.items():
        fields[ours] = fields.get(source, "gelu")
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
    if id2label is not None and not isinstance(id2label, dict):
        raise ModelDirectoryError(f"id2label must be an object, got {_short(id2label)}")
    if id2label:
        try:
            pairs = sorted((int(k), str(v)) for k, v in id2label.items())
        except (TypeError, ValueError) as e:
            raise ModelDirectoryError(
                f"id2label keys must be integers, got {_short(id2label)}"
            ) from e
        if [i for i, _ in pairs] != list(range(len(pairs))):
            raise ModelDirectoryError(
                f"id2label keys must be 0..{len(pairs) - 1}, got {[i for i, _ in pairs]}"
            )
        return tuple(v for _, v in pairs)
    num = hf_config.get("num_labels")
    if num is None or num == 0:  # 0: transformers' "no head" (read as the default labels)
        return None
    if isinstance(num, bool) or not isinstance(num, int) or not 1 <= num <= MAX_LABELS:
        raise ModelDirectoryError(
            f"num_labels must be an integer in [1, {MAX_LABELS:,}], got {_short(num)}"
        )
    return tuple(f"LABEL_{i}" for i in range(num))


def task_of(fmap: FamilyMap, hf_config: dict[str, Any]) -> str | None:
    """The fine-tuning head named by config.json's ``architectures`` (e.g.
    BertForTokenClassification → "tokens"), or None. Task heads share key names
    (``classifier.*``), so they are read from the class name, never sniffed from the keys."""
    from ..heads.task_heads import TASK_HEADS

    by_class = {cls: heads for heads, cls in fmap.architectures.items() if heads in TASK_HEADS}
    archs = hf_config.get("architectures") or ()
    for arch in archs if isinstance(archs, list) else ():
        if isinstance(arch, str) and arch in by_class:
            return by_class[arch]
    return None


def config_to_hf(config: EncoderConfig, architecture: str) -> dict[str, Any]:
    """A Hugging Face config.json dict for our config (an `EncoderConfig` or a preset name).

    Raises:
        CheckpointError: the config differs from a value every checkpoint of its family has
            (``FamilyMap.config_fixed``, e.g. a DistilBERT with a pooler or an ELECTRA whose
            classifier uses tanh): transformers would run the saved model differently.
    """
    config = as_config(config)
    fmap = FAMILIES[config.model_type]
    differ = {
        name: (getattr(config, name), value)
        for name, value in fmap.config_fixed.items()
        if name != "pair_head" and getattr(config, name) != value  # heads name the pair head
    }
    for name, source in fmap.config_mirrors.items():
        if getattr(config, name) != getattr(config, source):
            differ[name] = (getattr(config, name), f"{source}={getattr(config, source)!r}")
    if differ:
        listed = ", ".join(f"{k}={v[0]!r} (always {v[1]!r})" for k, v in sorted(differ.items()))
        raise CheckpointError(
            f"cannot save as model_type {config.model_type!r}: {listed}; transformers' "
            f"{config.model_type} classes would run it differently"
        )
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
            if ours in ("hidden_act", "classifier_activation", "conv_act")
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
def inside(directory: Path, name: Any, source: Path) -> Path:
    """``directory / name`` for a relative path ``name`` read from ``source`` that stays
    inside ``directory`` (checked on the text, so symlinked files such as the Hugging Face
    cache's blobs still load).

    Raises:
        ModelDirectoryError: ``name`` is not a non-empty string, is absolute, or leaves the
            directory (``..``); the message names ``source``.
    """
    if not isinstance(name, str) or not name or "\x00" in name:
        raise ModelDirectoryError(f"{source} names an invalid file {_short(name)}")
    posix, windows = PurePosixPath(name), PureWindowsPath(name)
    if posix.is_absolute() or windows.is_absolute() or windows.drive or windows.root:
        raise ModelDirectoryError(
            f"{source} names the absolute path {name!r}; files must lie inside {directory}"
        )
    if ".." in posix.parts or ".." in windows.parts:
        raise ModelDirectoryError(
            f"{source} names {name!r}, outside its directory {directory}; refused"
        )
    return directory / name


def check_safetensors(file: Path) -> dict[str, Any]:
    """Validate a safetensors file's header against the file before any tensor is read.

    Returns:
        the header's tensor entries (name → {dtype, shape, data_offsets}).

    Raises:
        ModelDirectoryError: too short, a header length past the file or the format's limit,
            a header that is not a JSON object, an unknown dtype, a bad shape, offsets that do
            not match the shape or overlap, leave gaps or run past the end of the file (a
            truncated file); the message names the file.
    """

    def bad(problem: str) -> ModelDirectoryError:
        return ModelDirectoryError(f"{file} is not a valid safetensors file: {problem}")

    try:
        size = file.stat().st_size
        with open(file, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise bad(f"{size} bytes, shorter than the 8-byte header length (truncated?)")
            (n,) = struct.unpack("<Q", head)
            if n > MAX_SAFETENSORS_HEADER:
                raise bad(f"header length {n:,} exceeds the format's limit (corrupt?)")
            if 8 + n > size:
                raise bad(f"header of {n:,} bytes runs past the end of the file (truncated?)")
            raw = f.read(n)
    except OSError as e:
        raise ModelDirectoryError(f"{file} cannot be read: {e}") from e
    header = parse_json(raw, source="its header", what="an object of tensors", error=bad)
    entries = {k: v for k, v in header.items() if k != "__metadata__"}
    meta = header.get("__metadata__")
    if meta is not None and not (
        isinstance(meta, dict) and all(isinstance(v, str) for v in meta.values())
    ):
        raise bad("__metadata__ must map names to strings")
    spans = []
    for name, entry in entries.items():
        if not isinstance(entry, dict):
            raise bad(f"tensor {name!r}: entry is not an object")
        dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
        if dtype not in SAFETENSORS_DTYPES:
            raise bad(f"tensor {name!r}: unknown dtype {_short(dtype)}")
        if not isinstance(shape, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
        ):
            raise bad(f"tensor {name!r}: shape {_short(shape)} is not a list of sizes >= 0")
        if (
            not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
            or not 0 <= offsets[0] <= offsets[1]
        ):
            raise bad(f"tensor {name!r}: data_offsets {_short(offsets)} are not [begin, end]")
        nbytes = math.prod(shape) * SAFETENSORS_DTYPES[dtype]
        if offsets[1] - offsets[0] != nbytes:
            raise bad(
                f"tensor {name!r}: data_offsets {offsets} hold {offsets[1] - offsets[0]:,} "
                f"bytes; dtype {dtype} shape {shape} needs {nbytes:,}"
            )
        spans.append((offsets[0], offsets[1], name))
    data_size = size - 8 - n
    end = 0
    for begin, stop, name in sorted(spans):
        if begin != end:
            raise bad(
                f"tensor {name!r} starts at byte {begin:,} of the data, expected {end:,} "
                f"(overlapping or gapped offsets)"
            )
        end = stop
    if end != data_size:
        raise bad(
            f"the tensors end at byte {end:,} of the data but the file holds {data_size:,} "
            f"({'truncated' if end > data_size else 'trailing bytes'}?)"
        )
    return entries


def read_safetensors(file: Path) -> dict[str, torch.Tensor]:
    """All tensors of one safetensors file, validated first (`check_safetensors`).

    Raises:
        ModelDirectoryError: the file is missing, corrupt or truncated; names the file.
    """
    if not file.is_file():
        raise ModelDirectoryError(f"{file} does not exist")
    check_safetensors(file)
    try:
        state = load_file(file)
    except Exception as e:  # safetensors' own checks (SafetensorError is no ValueError)
        raise ModelDirectoryError(f"{file} is not a valid safetensors file: {e}") from e
    return check_stored_tensors(state, file)


def read_sharded(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of a sharded safetensors checkpoint (model.safetensors.index.json).

    Raises:
        ModelDirectoryError: the index is not a JSON object with a ``weight_map`` of tensor
            name → shard file; a shard path leaves the directory or is missing; a shard is
            corrupt; a shard lacks a tensor the index assigns to it, or two shards hold one.
    """
    index_file = path / "model.safetensors.index.json"
    index = read_json_file(index_file, "a JSON object with a weight_map")
    weight_map = index.get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise ModelDirectoryError(
            f"{index_file} has no weight_map (an object of tensor name -> shard file), got "
            f"{_short(weight_map)}"
        )
    shards: dict[str, list[str]] = {}
    for tensor, shard in weight_map.items():
        inside(path, shard, index_file)
        shards.setdefault(shard, []).append(tensor)
    state: dict[str, torch.Tensor] = {}
    for shard in sorted(shards):
        file = path / shard
        if not file.is_file():
            raise ModelDirectoryError(f"{index_file} names the shard {shard!r}, which is missing")
        tensors = read_safetensors(file)
        absent = [t for t in shards[shard] if t not in tensors]
        if absent:
            raise ModelDirectoryError(
                f"{index_file} assigns {absent[:5]} to {shard}, which does not hold them"
            )
        twice = sorted(set(tensors) & set(state))
        if twice:
            raise ModelDirectoryError(f"{file} repeats tensors of another shard: {twice[:5]}")
        state.update(tensors)
    return state


MAX_TORCH_MEMBERS = 1_000_000  # records of a torch.save zip: far above any real checkpoint


def torch_archive_problem(file: Path) -> str | None:
    """Why the ``torch.save`` file ``file`` cannot be loaded without allocating more than it
    holds (None: it can), found from its zip directory alone, before anything is unpacked.

    ``torch.save`` writes an uncompressed (stored) zip whose records together are no larger
    than the file. A compressed record (a "zip bomb": a 2 MB file whose records expand to
    gigabytes), records whose sizes add up to more than the file, or a million records are
    refused. A file that is not a zip (the format of torch before 1.6) reads its storages from
    the file itself, so it cannot hold more than it is; it is left to ``torch.load``.
    """
    import zipfile

    try:
        size = file.stat().st_size
        if not zipfile.is_zipfile(file):
            return None
        with zipfile.ZipFile(file) as archive:
            members = archive.infolist()
    except (OSError, zipfile.BadZipFile, ValueError) as e:
        return f"its zip directory cannot be read ({e})"
    if len(members) > MAX_TORCH_MEMBERS:
        return f"it lists {len(members):,} records; a checkpoint has far fewer"
    total = 0
    for info in members:
        if info.compress_type != zipfile.ZIP_STORED:
            return (
                f"record {info.filename!r} is compressed ({info.compress_size:,} bytes that "
                f"expand to {info.file_size:,}); torch.save never compresses, so it is not "
                "unpacked (a zip bomb?)"
            )
        total += info.file_size
    if total > size:
        return (
            f"its records declare {total:,} bytes but the file has {size:,} (corrupt, or a "
            "zip bomb); nothing is unpacked"
        )
    return None


def read_bin(file: Path) -> dict[str, torch.Tensor]:
    """A ``pytorch_model.bin`` read with ``weights_only=True`` (no code runs on load), after
    its zip directory is checked against the file (`torch_archive_problem`: nothing is
    unpacked that would allocate more than the file holds).

    Raises:
        ModelDirectoryError: the file is refused (it pickles something other than tensors,
            e.g. code; it holds compressed or oversized records), is corrupt, or does not hold
            a dict of name -> tensor; names the file.
    """
    problem = torch_archive_problem(file)
    if problem is not None:
        raise ModelDirectoryError(f"{file} was refused: {problem}")
    try:
        state = torch.load(file, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        raise ModelDirectoryError(
            f"{file} was refused: it holds objects other than tensors (weights_only load); "
            f"it may run code when unpickled, so it is not loaded. Convert it to safetensors "
            f"from a trusted source. ({str(e).splitlines()[0] if str(e) else e!r})"
        ) from e
    except Exception as e:  # corrupt zip/pickle: RuntimeError, EOFError, ...
        raise ModelDirectoryError(f"{file} is not a readable PyTorch checkpoint: {e}") from e
    if not isinstance(state, dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()
    ):
        raise ModelDirectoryError(f"{file} does not hold a dict of name -> tensor")
    return check_stored_tensors(state, file)


def read_weights(path: str | Path) -> dict[str, torch.Tensor]:
    """All tensors of a model directory: model.safetensors, a sharded safetensors index, or
    pytorch_model.bin (read with ``weights_only=True``).

    Raises:
        ModelDirectoryError: none of the weight files exists (lists the names looked for), or
            the one found is corrupt, truncated, refused or inconsistent (names the file).
    """
    path = Path(path)
    if (path / "model.safetensors").is_file():
        return read_safetensors(path / "model.safetensors")
    if (path / "model.safetensors.index.json").is_file():
        return read_sharded(path)
    if (path / "pytorch_model.bin").is_file():
        return read_bin(path / "pytorch_model.bin")
    raise ModelDirectoryError(f"{path} has no weights; looked for {', '.join(WEIGHT_FILES)}")


def save_pretrained(model, path: str | Path) -> Path:
    """Write ``model`` as a Hugging Face directory (config.json + model.safetensors).

    The class written into config.json follows the heads: e.g. BertModel, BertForMaskedLM,
    BertForPreTraining. Tied decoder weights are not stored (transformers re-ties them).

    A head stored in several layouts is written in the family's first one
    (`keymaps.FamilyMap.head_layouts`). DeBERTa (v1 and v2) masked-LM models are written in the
    ``cls.predictions.*`` layout with ``"legacy": true`` in config.json, not in the
    ``lm_predictions.lm_head.*`` layout of the published checkpoints (which `from_pretrained`
    reads too): transformers 4.x, given legacy=false, ties ``lm_predictions.lm_head.dense`` to
    the word embedding and cannot run the model, while the legacy layout loads with identical
    outputs in transformers 4.x and 5.x.

    The save is all-or-nothing (`atomic_directory`): the new version is built beside ``path``
    and swapped in, so a reader (or a kill) sees the old model or the new one, never new
    weights beside an old config. Other files of the directory (a tokenizer, training state)
    are kept; other weight files (shards, pytorch_model.bin) are dropped, since
    model.safetensors now holds the weights. Temporaries of an interrupted save are removed.
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
    text = json.dumps(config_to_hf(config, arch), indent=2, sort_keys=True) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    with _parent_lock(path, exclusive=True), atomic_directory(path) as tmp:
        _drop_other_weights(tmp)
        atomic_write(
            tmp / "model.safetensors",
            lambda t: save_file(hf_state, str(t), metadata={"format": "pt"}),
        )
        atomic_write(tmp / "config.json", lambda t: t.write_text(text))
    return path


def _drop_other_weights(directory: Path) -> None:
    """Remove the weight files a new model.safetensors supersedes (kept hard links): the
    shards ``model.safetensors.index.json`` names, when they are ``.safetensors`` files inside
    ``directory`` reached through real directories only (`files.remove_inside`: a shard
    behind a symbolic link, or outside, is kept and named in a warning), the index itself and
    ``pytorch_model.bin``."""
    index = directory / "model.safetensors.index.json"
    if index.is_file() and not index.is_symlink():
        try:
            weight_map = read_json_file(index, "a JSON object with a weight_map")
            weight_map = weight_map.get("weight_map") or {}
            shards = set(weight_map.values()) if isinstance(weight_map, dict) else set()
        except (ModelDirectoryError, AttributeError, TypeError) as e:
            log.warning("could not read the shards named by %s: %s", index, e)
            shards = set()
        for shard in sorted(s for s in shards if isinstance(s, str)):
            try:
                file = inside(directory, shard, index)
            except ModelDirectoryError as e:
                log.warning("kept %r: %s", shard, e)
                continue
            if not shard.endswith(".safetensors"):
                log.warning(
                    "kept %s: the index names it as a shard, but it is no .safetensors", file
                )
                continue
            remove_inside(directory, file)
    remove_inside(directory, index)
    remove_inside(directory, directory / "pytorch_model.bin")


__all__ = [
    "save_pretrained",
    "read_weights",
    "read_hf_config",
    "config_from_hf",
    "config_to_hf",
    "ModelDirectoryError",
    "ConfigError",
    "CheckpointError",
    "LoadReport",
]
