"""`Model`: the encoder trunk plus whichever heads a checkpoint or a task asks for."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from .checkpoints.io import save_pretrained
from .config import EncoderConfig
from .modules.encoder import Encoder, EncoderOutput


@dataclass
class ModelOutput(EncoderOutput):
    """EncoderOutput plus head outputs.

    Attributes:
        logits: (B, T, V) masked-LM vocabulary logits, or (M, V) at the M positions selected by
            ``masked_positions``; None without an MLM head. With a task head: (B, C) class
            scores ("classify"; C = 1: regression), (B, T, C) per-token scores ("tokens"),
            (B, K) one score per choice ("choice").
        pair_logits: (B, 2) NSP/SOP logits; None without a pair head.
        start_logits, end_logits: (B, T) answer-span scores of the "qa" head.
    """

    logits: torch.Tensor | None = None
    pair_logits: torch.Tensor | None = None
    start_logits: torch.Tensor | None = None
    end_logits: torch.Tensor | None = None


def _select(hidden: torch.Tensor, condition: torch.Tensor | None,
            masked_positions: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Hidden states (and the condition of each) at ``masked_positions``: (M, H) and (M, C)."""
    if masked_positions is None or condition is None:
        return (hidden if masked_positions is None else hidden[masked_positions]), condition
    if condition.dim() == 2:  # (B, C): one vector per sequence
        condition = condition[:, None, :].expand(-1, hidden.shape[1], -1)  # (B, T, C)
    if condition.shape[:2] != hidden.shape[:2]:
        raise ValueError(f"condition has shape {tuple(condition.shape)}; expected (B, C) or "
                         f"(B, T, C) with (B, T) = {tuple(hidden.shape[:2])}")
    return hidden[masked_positions], condition[masked_positions]


class Model(nn.Module):
    """One model class for every family: `encoder` + optional `mlm_head` and `pair_head`, or
    one fine-tuning `task_head` named by ``task`` ("classify", "tokens", "qa", "choice").

    Build with `bertfamily.build_model(config, heads=...)` or load with
    `bertfamily.from_pretrained(path)`.
    """

    def __init__(self, config: EncoderConfig, encoder: Encoder,
                 mlm_head: nn.Module | None = None, pair_head: nn.Module | None = None,
                 mlm_decoder: nn.Module | None = None, *,
                 task_head: nn.Module | None = None, task: str | None = None) -> None:
        super().__init__()
        self.config = config
        self.encoder = encoder
        self.mlm_head = mlm_head
        self.pair_head = pair_head
        # Optional decoder between the trunk and the MLM head (DeBERTa's enhanced mask decoder).
        self.mlm_decoder = mlm_decoder
        self.task_head = task_head
        self.task = task if task_head is not None else None

    @property
    def heads(self) -> tuple[str, ...]:
        """Names of the heads present, e.g. ("mlm", "pair")."""
        return tuple(n for n, m in (("mlm", self.mlm_head), ("pair", self.pair_head),
                                    (self.task, self.task_head)) if m is not None)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None, *,
                masked_positions: torch.Tensor | None = None,
                output_hidden_states: bool = False,
                output_attentions: bool = False,
                condition: torch.Tensor | None = None,
                **attention_inputs) -> ModelOutput:
        """Run the encoder and the heads.

        Args:
            input_ids: (B, T) int64 in [0, V).
            attention_mask: (B, T) 0/1 (1 = real token); None = all real.
            token_type_ids: (B, T) int64 segment ids (models with a segment embedding only).
            position_ids: (B, T) int64; None = the model's position scheme.
            masked_positions: optional (B, T) bool; the MLM head then runs only at these
                positions and returns (M, V) logits (as the original BERT gathered them).
            output_hidden_states / output_attentions / condition / attention_inputs: see
                `Encoder.forward`.

        With the "choice" head, input_ids and the other (B, T) inputs are (B, K, T): K choices
        per example, flattened to (B·K, T) for the encoder; ``logits`` is then (B, K).

        Raises:
            ValueError: invalid inputs (see `Encoder.check_inputs`); a ``condition`` given to a
                model without conditional norms, or missing / of the wrong size C for one with
                them (see `modules.norms.ConditionalLayerNorm.check_condition`).
        """
        if condition is not None and not self.takes_condition:
            raise ValueError("condition= was given but this model has no conditional norms "
                             "(EncoderConfig.conditional_norms is empty)")
        attention_inputs = self._task_attention_inputs(input_ids, attention_mask,
                                                       attention_inputs)
        if self.task == "choice":
            return self._forward_choice(input_ids, attention_mask, token_type_ids, position_ids,
                                        output_hidden_states=output_hidden_states,
                                        output_attentions=output_attentions,
                                        condition=condition, **attention_inputs)
        decode = self.mlm_head is not None and self.mlm_decoder is not None
        out = self.encoder(input_ids, attention_mask, token_type_ids, position_ids,
                           output_hidden_states=output_hidden_states or decode,
                           output_attentions=output_attentions, condition=condition,
                           **attention_inputs)
        logits = pair_logits = None
        if self.mlm_head is not None:
            h = out.last_hidden_state
            if decode:
                h = self._decode(out, input_ids, position_ids)
                if not output_hidden_states:
                    out.hidden_states = None
            if getattr(self.mlm_head, "takes_condition", False):
                logits = self.mlm_head(*_select(h, condition, masked_positions))
            else:
                logits = self.mlm_head(h[masked_positions] if masked_positions is not None else h)
        if self.pair_head is not None:
            pair_logits = self.pair_head(out.pooler_output)
        start = end = None
        if self.task_head is not None:
            scores = self.task_head(out.last_hidden_state, out.pooler_output)
            if self.task == "qa":
                start, end = scores.unbind(-1)  # (B, T) each
            else:
                logits = scores
        return ModelOutput(**vars(out), logits=logits, pair_logits=pair_logits,
                           start_logits=start, end_logits=end)

    def _forward_choice(self, input_ids: torch.Tensor, *tensors: torch.Tensor | None,
                        **kwargs) -> ModelOutput:
        """Multiple choice: (B, K, T) inputs → (B·K, T) through the encoder → (B, K) scores."""
        if input_ids.dim() != 3:
            raise ValueError(f"the choice head takes input_ids of shape (B, K, T), got "
                             f"{tuple(input_ids.shape)}")
        B, K, T = input_ids.shape
        flat = [t.reshape(B * K, -1) if t is not None else None for t in tensors]
        for name, value in kwargs.items():  # per-token attention inputs (global_attention_mask)
            if isinstance(value, torch.Tensor) and tuple(value.shape[:2]) == (B, K):
                kwargs[name] = value.reshape(B * K, *value.shape[2:])
        out = self.encoder(input_ids.reshape(B * K, T), *flat, **kwargs)
        scores = self.task_head(out.last_hidden_state, out.pooler_output)  # (B·K, 1)
        return ModelOutput(**vars(out), logits=scores.view(B, K))

    def _task_attention_inputs(self, input_ids: torch.Tensor,
                               attention_mask: torch.Tensor | None, attention_inputs: dict) -> dict:
        """Task-specific global attention (Beltagy et al. 2020 §4): a windowed-attention model
        with a classify, qa or choice head and no ``global_attention_mask`` from the caller
        gets the default of `heads.global_attention.default_global_attention_mask` (first
        token; question tokens; answer tokens), the separator id from
        ``config.sep_token_id``. An explicit mask (even all zeros) is used as given."""
        from .heads.global_attention import HEAD_DEFAULTS, default_global_attention_mask

        if (self.config.attention_kind != "windowed" or self.task not in HEAD_DEFAULTS
                or attention_inputs.get("global_attention_mask") is not None):
            return attention_inputs
        ids, mask = input_ids, attention_mask
        if self.task == "choice" and input_ids.dim() == 3:  # (B, K, T) → (B·K, T) and back
            ids = input_ids.flatten(0, 1)
            mask = attention_mask.flatten(0, 1) if attention_mask is not None else None
        if mask is not None and tuple(mask.shape) != tuple(ids.shape):
            return attention_inputs  # let the encoder report the shape error
        default = default_global_attention_mask(ids, HEAD_DEFAULTS[self.task],
                                                sep_token_id=self.config.sep_token_id,
                                                attention_mask=mask)
        return {**attention_inputs, "global_attention_mask": default.view(input_ids.shape)}

    @property
    def takes_condition(self) -> bool:
        """Whether any norm is conditional (forward then needs ``condition=``; SPEC §5)."""
        return any(getattr(m, "takes_condition", False) for m in self.modules() if m is not self)

    def _decode(self, out, input_ids: torch.Tensor,
                position_ids: torch.Tensor | None) -> torch.Tensor:
        """(B, T, H) states for the MLM head from the enhanced mask decoder (absolute positions
        of the encoder's position table, last layer re-applied)."""
        if position_ids is None:
            position_ids = self.encoder.position_ids_for(input_ids)
        positions = self.encoder.embeddings.position(position_ids)  # (B or 1, T, H)
        last = self.encoder.layers[self.encoder.schedule[-1]]
        return self.mlm_decoder(out.hidden_states, out.attention_context, last, positions)

    def num_parameters(self, heads: bool = False) -> int:
        """Parameter count, each shared tensor counted once; trunk only unless ``heads``."""
        module = self if heads else self.encoder
        return sum(p.numel() for p in module.parameters())

    def save_pretrained(self, path: str | Path) -> Path:
        """Write a Hugging Face directory (config.json + model.safetensors) that
        `transformers.AutoModel.from_pretrained` loads with identical outputs. Atomic."""
        return save_pretrained(self, path)
