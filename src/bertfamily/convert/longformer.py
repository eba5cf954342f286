"""RoBERTa-family checkpoint → Longformer with a longer position table.

Beltagy, Peters & Cohan 2020, §5 ("Pretraining and Finetuning", "Position Embeddings"): the
learned 512 RoBERTa position embeddings are copied block by block into the longer table (4096
positions = 8 copies), which keeps the local structure the attention heads learned; the global
projections Q_g, K_g, V_g start as copies of the local Q, K, V ("Linear Projections for Global
Attention"). With a window covering the whole input, the result computes exactly what RoBERTa
computes.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import torch

from ..build import build_model
from ..checkpoints.io import ModelDirectoryError, config_from_hf, read_hf_config
from ..errors import InputError, TokenizerFileError
from ..files import atomic_write, read_json
from ..pretrained import from_pretrained

log = logging.getLogger(__name__)

# Tokenizer files copied next to the converted weights (whichever exist).
TOKENIZER_FILES = (
    "tokenizer.json",
    "vocab.json",
    "merges.txt",
    "special_tokens_map.json",
    "added_tokens.json",
)


def extend_position_table(table: torch.Tensor, rows: int, offset: int) -> torch.Tensor:
    """A (rows, E) position table from a shorter (P, E) one, copied block by block.

    Rows [0, offset) (RoBERTa: the padding position and the unused one before the first real
    position) are kept; the P - offset learned rows are then repeated until ``rows`` is filled
    (the last copy cut short).

    Raises:
        ValueError: ``rows`` smaller than P, or no learned rows to copy.
    """
    P = table.shape[0]
    if rows < P:
        raise InputError(f"the new position table ({rows} rows) is smaller than the old ({P})")
    learned = table[offset:]
    if learned.shape[0] == 0:
        raise InputError("the position table has no rows after the padding offset")
    out = table.new_empty(rows, table.shape[1])
    out[:offset] = table[:offset]
    k = offset
    while k < rows:
        n = min(learned.shape[0], rows - k)
        out[k : k + n] = learned[:n]
        k += n
    return out


def to_longformer(
    model_dir: str | Path, output_dir: str | Path, *, max_positions: int = 4096, window: int = 512
) -> Path:
    """Convert a RoBERTa checkpoint directory into a Longformer one.

    Args:
        model_dir: Hugging Face directory of model_type roberta (base model or ForMaskedLM).
        output_dir: where config.json, model.safetensors and the tokenizer files are written
            (each file atomically). It loads in transformers' LongformerModel /
            LongformerForMaskedLM and in `bertfamily.from_pretrained`.
        max_positions: longest input of the result (its table has max_positions + pad_token_id + 1
            rows; 4096 → 4098 as in allenai/longformer-base-4096).
        window: full attention window of every layer (even; 512 in the paper).

    Returns:
        ``output_dir`` as a Path.

    Raises:
        ModelDirectoryError: not a readable model directory, or not a RoBERTa-family checkpoint.
        ValueError: ``max_positions`` shorter than the source's limit, or a bad window.
    """
    model_dir, output_dir = Path(model_dir), Path(output_dir)
    source_config = config_from_hf(read_hf_config(model_dir))
    if source_config.position_scheme != "absolute_from_padding" or (
        source_config.attention_kind != "full"
    ):
        raise ModelDirectoryError(
            f"to-longformer needs a RoBERTa-family checkpoint (full attention, positions from "
            f"the padding offset); {model_dir} has model_type {source_config.model_type!r}"
        )
    if not isinstance(max_positions, int) or max_positions < source_config.max_sequence_length:
        raise InputError(
            f"max_positions ({max_positions}) must be at least the source's limit "
            f"of {source_config.max_sequence_length} positions"
        )
    source = from_pretrained(model_dir)
    config = source.config.replace(
        model_type="longformer",
        attention_kind="windowed",
        attention_window=window,
        max_position_embeddings=max_positions + source.config.position_offset,
    )
    with torch.device("meta"):
        target = build_model(config, heads=source.heads)
    state = source.state_dict()
    new: dict[str, torch.Tensor] = {}
    H = config.hidden_size
    for key, meta in target.state_dict().items():
        if key == "encoder.embeddings.position.weight":
            new[key] = extend_position_table(state[key], meta.shape[0], config.position_offset)
        elif key.endswith("attention.query_global.weight") or key.endswith(
            "attention.query_global.bias"
        ):
            new[key] = state[key.replace("query_global", "qkv")][:H].clone()
        elif key.endswith("attention.kv_global.weight") or key.endswith("attention.kv_global.bias"):
            new[key] = state[key.replace("kv_global", "qkv")][H:].clone()
        else:
            new[key] = state[key]
        if tuple(new[key].shape) != tuple(meta.shape):
            raise AssertionError(
                f"{key}: built {tuple(new[key].shape)}, expected {tuple(meta.shape)}"
            )
    target.load_state_dict(new, assign=True)
    target.eval()
    target.save_pretrained(output_dir)
    _copy_tokenizer(model_dir, output_dir, max_positions)
    log.info(
        "converted %s → %s (Longformer, %d positions, window %d)",
        model_dir,
        output_dir,
        max_positions,
        window,
    )
    return output_dir


def _copy_tokenizer(source: Path, target: Path, max_positions: int) -> None:
    for name in TOKENIZER_FILES:
        if (source / name).is_file():
            atomic_write(target / name, lambda tmp, s=source / name: shutil.copyfile(s, tmp))
    if (source / "tokenizer_config.json").is_file():
        data = read_json(source / "tokenizer_config.json", error=TokenizerFileError)
        data["model_max_length"] = max_positions
        text = json.dumps(data, indent=2) + "\n"
        atomic_write(target / "tokenizer_config.json", lambda tmp: tmp.write_text(text))
