"""ONNX export of any bertfamily model, with dynamic batch and sequence axes."""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from torch import nn

from .files import atomic_write
from .model import Model

log = logging.getLogger(__name__)


class _OnnxWrapper(nn.Module):
    """Positional inputs/outputs for the exporter: (input_ids, attention_mask[, token_type_ids])
    → last_hidden_state (B, T, H)[, pooler_output (B, H)][, logits (B, T, V)]."""

    def __init__(self, model: Model, with_token_types: bool) -> None:
        super().__init__()
        self.model = model
        self.with_token_types = with_token_types

    def forward(self, input_ids, attention_mask, token_type_ids=None):
        out = self.model(
            input_ids, attention_mask, token_type_ids if self.with_token_types else None
        )
        result = [out.last_hidden_state]
        if out.pooler_output is not None:
            result.append(out.pooler_output)
        if out.logits is not None:
            result.append(out.logits)
        return tuple(result)


def output_names(model: Model) -> list[str]:
    """Output names of ``model``'s ONNX graph: last_hidden_state, then pooler_output and
    logits where the model has a pooler and an MLM head."""
    names = ["last_hidden_state"]
    if model.encoder.pooler is not None:
        names.append("pooler_output")
    if model.mlm_head is not None:
        names.append("logits")
    return names


def export_onnx(model: Model, path: str | Path, opset: int = 17) -> Path:
    """Write ``model`` as an ONNX graph with dynamic batch (B) and sequence (T) axes.

    Inputs: input_ids (B, T) int64, attention_mask (B, T) int64, and token_type_ids (B, T)
    int64 for models with a segment embedding. Outputs: last_hidden_state (B, T, H) float32,
    pooler_output (B, H) where the model has a pooler, logits (B, T, V) with an MLM head.
    The padded execution path is exported (the graph is static; unpadding is data-dependent).

    Raises:
        ValueError: the model has attention weights output switched on or another
            data-dependent configuration the exporter cannot trace.
    """
    path = Path(path)
    was_training, unpad = model.training, model.encoder.unpad
    model.eval()
    model.encoder.unpad = False
    with_tt = model.config.type_vocab_size > 0
    T = min(8, model.config.max_sequence_length)
    ids = torch.full(
        (2, T),
        model.config.pad_token_id + 1
        if model.config.pad_token_id + 1 < model.config.vocab_size
        else 0,
        dtype=torch.long,
    )
    mask = torch.ones(2, T, dtype=torch.long)
    mask[1, T // 2 :] = 0
    inputs = (ids, mask) + ((torch.zeros_like(ids),) if with_tt else ())
    names_in = ["input_ids", "attention_mask"] + (["token_type_ids"] if with_tt else [])
    names_out = output_names(model)
    axes = {n: {0: "B", 1: "T"} for n in names_in + names_out}
    if "pooler_output" in axes:
        axes["pooler_output"] = {0: "B"}
    try:

        def write(tmp: Path) -> None:
            torch.onnx.export(
                _OnnxWrapper(model, with_tt),
                inputs,
                str(tmp),
                input_names=names_in,
                output_names=names_out,
                dynamic_axes=axes,
                opset_version=opset,
                dynamo=False,
            )

        atomic_write(path, write)
    finally:
        model.train(was_training)
        model.encoder.unpad = unpad
    log.info("exported %s to %s", type(model).__name__, path)
    return path
