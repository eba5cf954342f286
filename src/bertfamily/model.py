"""`Model`: the encoder trunk plus whichever heads a checkpoint or a task asks for."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from .checkpoints.io import save_pretrained
from .config import EncoderConfig
from .errors import InputError
from .heads.losses import sequence_loss, span_loss, token_loss
from .heads.pretraining import mlm_loss, pair_loss, rtd_loss
from .modules.encoder import Encoder, EncoderOutput, as_input_tensor


@dataclass
class ModelOutput(EncoderOutput):
    """EncoderOutput plus head outputs.

    Attributes:
        loss: 0-d float, the loss of the heads given their labels (see `Model.forward`), or
            None when no labels were given.
        logits: (B, T, V) masked-LM vocabulary logits, or (M, V) at the M positions selected by
            ``masked_positions``; None without an MLM head. With the "rtd" head: (B, T)
            replaced-token-detection logits (> 0 = replaced). With a task head: (B, C) class
            scores ("classify"; C = 1: regression), (B, T, C) per-token scores ("tokens"),
            (B, K) one score per choice ("choice").
        pair_logits: (B, 2) NSP/SOP logits; None without a pair head.
        start_logits, end_logits: (B, T) answer-span scores of the "qa" head.
    """

    loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    pair_logits: torch.Tensor | None = None
    start_logits: torch.Tensor | None = None
    end_logits: torch.Tensor | None = None


def _select(
    hidden: torch.Tensor, condition: torch.Tensor | None, masked_positions: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Hidden states (and the condition of each) at ``masked_positions``: (M, H) and (M, C)."""
    if masked_positions is None or condition is None:
        return (hidden if masked_positions is None else hidden[masked_positions]), condition
    if condition.dim() == 2:  # (B, C): one vector per sequence
        condition = condition[:, None, :].expand(-1, hidden.shape[1], -1)  # (B, T, C)
    if condition.shape[:2] != hidden.shape[:2]:
        raise InputError(
            f"condition has shape {tuple(condition.shape)}; expected (B, C) or "
            f"(B, T, C) with (B, T) = {tuple(hidden.shape[:2])}"
        )
    return hidden[masked_positions], condition[masked_positions]


class Model(nn.Module):
    """One model class for every family: `encoder` + optional `mlm_head` and `pair_head`, or an
    `rtd_head` (replaced-token detection), or one fine-tuning `task_head` named by ``task``
    ("classify", "tokens", "qa", "choice").

    It holds no family knowledge: what differs between families is in the components that
    `bertfamily.build.build_model` gives it —

    - ``mlm_decoder``: an optional decoder between the trunk and the MLM head, called as
      ``mlm_decoder(hidden_states, attention_context, position_ids)`` (e.g. an enhanced mask
      decoder, wired to the encoder's position table and last layer at build time);
    - ``default_inputs``: an optional callable ``(input_ids, attention_mask) -> {keyword:
      tensor}`` giving the task head's defaults for optional encoder inputs the caller left out
      (e.g. task-specific global attention for windowed attention).

    Build with `bertfamily.build_model(config, heads=...)` or load with
    `bertfamily.from_pretrained(path)`.
    """

    def __init__(
        self,
        config: EncoderConfig,
        encoder: Encoder,
        mlm_head: nn.Module | None = None,
        pair_head: nn.Module | None = None,
        mlm_decoder: nn.Module | None = None,
        *,
        task_head: nn.Module | None = None,
        task: str | None = None,
        default_inputs: Callable[..., dict[str, torch.Tensor]] | None = None,
        rtd_head: nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        self.encoder = encoder
        self.mlm_head = mlm_head
        self.pair_head = pair_head
        self.mlm_decoder = mlm_decoder
        self.task_head = task_head
        self.task = task if task_head is not None else None
        self.default_inputs = default_inputs
        self.rtd_head = rtd_head

    @property
    def heads(self) -> tuple[str, ...]:
        """Names of the heads present, e.g. ("mlm", "pair")."""
        return tuple(
            n
            for n, m in (
                ("mlm", self.mlm_head),
                ("pair", self.pair_head),
                ("rtd", self.rtd_head),
                (self.task, self.task_head),
            )
            if m is not None
        )

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        *,
        global_attention_mask: torch.Tensor | None = None,
        masked_positions: torch.Tensor | None = None,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
        condition: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        start_positions: torch.Tensor | None = None,
        end_positions: torch.Tensor | None = None,
        next_sentence_label: torch.Tensor | None = None,
        sentence_order_label: torch.Tensor | None = None,
    ) -> ModelOutput:
        """Run the encoder and the heads; with labels, also the loss.

        Args:
            input_ids: (B, T) int64 in [0, V).
            attention_mask: (B, T) 0/1 (1 = real token); None = all real.
            token_type_ids: (B, T) int64 segment ids (models with a segment embedding only).
            position_ids: (B, T) int64; None = the model's position scheme.
            global_attention_mask: (B, T) 0/1, 1 = global attention (windowed-attention models
                only); None = the task head's default (Beltagy et al. 2020 §4), else none.
            masked_positions: optional (B, T) bool; the MLM head then runs only at these
                positions and returns (M, V) logits (as the original pretraining code gathered
                them).
            output_hidden_states: see `Encoder.forward`.
            output_attentions: see `Encoder.forward`.
            condition: see `Encoder.forward`.
            labels: with ``start_positions``, ``end_positions``, ``next_sentence_label`` and
                ``sentence_order_label``, targets under transformers' names; when any is given,
                ``loss`` is the loss transformers' class with these heads computes —
                ``labels``: (B, T) token ids with -100 = no loss for the MLM head (at
                ``masked_positions`` only when given); (B,) for the pair head alone; (B,)
                class ids, (B,) float targets (one label: regression) or (B, C) 0/1 floats
                (multi-label) for "classify", per ``config.problem_type`` or inferred as
                transformers does; (B, T) with -100 for "tokens"; (B,) the right choice for
                "choice"; (B, T) 0/1 (1 = replaced) for "rtd", binary cross-entropy over
                the real tokens. ``start_positions`` / ``end_positions``: (B,) for "qa" (positions
                outside the sequence carry no loss; padding is never a candidate, so on
                padded batches the loss differs from transformers', whose heads keep padding
                positions as candidates). ``next_sentence_label`` (or its SOP name
                ``sentence_order_label``): (B,) for the pair head beside the MLM head; the
                loss is then the sum of both.

        With the "choice" head, input_ids and the other (B, T) inputs are (B, K, T): K choices
        per example, flattened to (B·K, T) for the encoder; ``logits`` is then (B, K).

        Raises:
            TypeError: an unknown keyword argument; a ``global_attention_mask`` for a model
                whose attention reads none (see `Encoder.forward`).
            ValueError: invalid inputs (see `Encoder.check_inputs`); targets for a head the
                model does not have, or both names of the pair label; a ``condition`` given to a
                model without conditional norms, or missing / of the wrong size C for one with them
                (see `modules.norms.ConditionalLayerNorm.check_condition`).
        """
        if not torch.jit.is_tracing():  # lists, NumPy arrays, any integer width
            device = self.encoder.embeddings.token.weight.device
            input_ids = as_input_tensor(input_ids, "input_ids", device)
            attention_mask = as_input_tensor(attention_mask, "attention_mask", device, False)
            token_type_ids = as_input_tensor(token_type_ids, "token_type_ids", device)
            position_ids = as_input_tensor(position_ids, "position_ids", device)
        if condition is not None and not self.takes_condition:
            raise InputError(
                "condition= was given but this model has no conditional norms "
                "(EncoderConfig.conditional_norms is empty)"
            )
        targets = self._targets(
            labels, start_positions, end_positions, next_sentence_label, sentence_order_label
        )
        if self.task == "choice":
            out = self._forward_choice(
                input_ids,
                attention_mask,
                token_type_ids,
                position_ids,
                global_attention_mask=global_attention_mask,
                output_hidden_states=output_hidden_states,
                output_attentions=output_attentions,
                condition=condition,
            )
            return self._with_loss(out, targets, masked_positions, attention_mask)
        if global_attention_mask is None and self.default_inputs is not None:
            global_attention_mask = self.default_inputs(input_ids, attention_mask).get(
                "global_attention_mask"
            )
        decode = self.mlm_head is not None and self.mlm_decoder is not None
        out, ctx = self.encoder(
            input_ids,
            attention_mask,
            token_type_ids,
            position_ids,
            global_attention_mask=global_attention_mask,
            output_hidden_states=output_hidden_states or decode,
            output_attentions=output_attentions,
            condition=condition,
            return_context=True,
        )
        logits = pair_logits = None
        if self.mlm_head is not None:
            h = out.last_hidden_state
            if decode:
                if position_ids is None:
                    position_ids = self.encoder.position_ids_for(input_ids)
                h = self.mlm_decoder(out.hidden_states, ctx, position_ids)
                if not output_hidden_states:
                    out.hidden_states = None
            if getattr(self.mlm_head, "takes_condition", False):
                logits = self.mlm_head(*_select(h, condition, masked_positions))
            else:
                logits = self.mlm_head(h[masked_positions] if masked_positions is not None else h)
        if self.pair_head is not None:
            pair_logits = self.pair_head(out.pooler_output)
        if self.rtd_head is not None:
            logits = self.rtd_head(out.last_hidden_state)  # (B, T)
        start = end = None
        if self.task_head is not None:
            scores = self.task_head(out.last_hidden_state, out.pooler_output)
            if self.task == "qa":
                start, end = scores.unbind(-1)  # (B, T) each
            else:
                logits = scores
        result = ModelOutput(
            **vars(out), logits=logits, pair_logits=pair_logits, start_logits=start, end_logits=end
        )
        return self._with_loss(result, targets, masked_positions, attention_mask)

    def _targets(
        self,
        labels: torch.Tensor | None,
        start_positions: torch.Tensor | None,
        end_positions: torch.Tensor | None,
        next_sentence_label: torch.Tensor | None,
        sentence_order_label: torch.Tensor | None,
    ) -> dict[str, torch.Tensor]:
        """The given targets by head, checked against the heads present (before any compute)."""
        if next_sentence_label is not None and sentence_order_label is not None:
            raise InputError("give next_sentence_label or sentence_order_label, not both")
        pair = next_sentence_label if next_sentence_label is not None else sentence_order_label
        targets: dict[str, torch.Tensor] = {}
        if labels is not None:
            head = "mlm" if self.mlm_head is not None else self.task
            if head is None and self.rtd_head is not None:
                head = "rtd"
            if head is None and self.pair_head is not None:
                head = "pair"
            if head is None or head == "qa":
                raise InputError(
                    f"labels were given but this model's heads {self.heads or '(none)'} take "
                    "none (qa takes start_positions and end_positions)"
                )
            targets[head] = labels
        if pair is not None:
            if self.pair_head is None or "pair" in targets:
                raise InputError(
                    "next_sentence_label / sentence_order_label need a pair head beside the "
                    f"MLM head; this model has {self.heads or '(no heads)'}"
                )
            targets["pair"] = pair
        if (start_positions is None) != (end_positions is None):
            raise InputError("give start_positions and end_positions together")
        if start_positions is not None:
            if self.task != "qa":
                raise InputError(
                    f"start_positions / end_positions need the qa head; this model has "
                    f"{self.heads or '(no heads)'}"
                )
            targets["qa"] = torch.stack([start_positions.reshape(-1), end_positions.reshape(-1)])
        return targets

    def _with_loss(
        self,
        out: ModelOutput,
        targets: dict[str, torch.Tensor],
        masked_positions: torch.Tensor | None,
        attention_mask: torch.Tensor | None,
    ) -> ModelOutput:
        """``out`` with ``loss`` set to the sum of the losses of the targeted heads."""
        losses = []
        for head, target in targets.items():
            if head == "mlm":
                if masked_positions is not None and target.shape == masked_positions.shape:
                    target = target[masked_positions]
                losses.append(mlm_loss(out.logits, target))
            elif head == "pair":
                losses.append(pair_loss(out.pair_logits, target))
            elif head == "rtd":
                losses.append(rtd_loss(out.logits, target, attention_mask))
            elif head == "qa":
                losses.append(span_loss(out.start_logits, out.end_logits, *target, attention_mask))
            elif head == "tokens":
                losses.append(token_loss(out.logits, target))
            elif head == "choice":
                losses.append(sequence_loss(out.logits, target, "single_label_classification"))
            else:
                losses.append(sequence_loss(out.logits, target, self.config.problem_type))
        if losses:
            out.loss = losses[0] if len(losses) == 1 else torch.stack(losses).sum()
        return out

    def _forward_choice(
        self,
        input_ids: torch.Tensor,
        *tensors: torch.Tensor | None,
        global_attention_mask: torch.Tensor | None,
        **kwargs,
    ) -> ModelOutput:
        """Multiple choice: (B, K, T) inputs → (B·K, T) through the encoder → (B, K) scores."""
        if input_ids.dim() != 3:
            raise InputError(
                f"the choice head takes input_ids of shape (B, K, T), got {tuple(input_ids.shape)}"
            )
        B, K, T = input_ids.shape
        ids = input_ids.reshape(B * K, T)
        flat = [t.reshape(B * K, -1) if t is not None else None for t in tensors]
        if global_attention_mask is not None:
            if tuple(global_attention_mask.shape[:2]) == (B, K):  # else the encoder reports it
                global_attention_mask = global_attention_mask.reshape(B * K, -1)
        elif self.default_inputs is not None:
            global_attention_mask = self.default_inputs(ids, flat[0]).get("global_attention_mask")
        out = self.encoder(ids, *flat, global_attention_mask=global_attention_mask, **kwargs)
        scores = self.task_head(out.last_hidden_state, out.pooler_output)  # (B·K, 1)
        return ModelOutput(**vars(out), logits=scores.view(B, K))

    @property
    def takes_condition(self) -> bool:
        """Whether any norm is conditional (forward then needs ``condition=``)."""
        return any(getattr(m, "takes_condition", False) for m in self.modules() if m is not self)

    def num_parameters(self, heads: bool = False) -> int:
        """Parameter count, each shared tensor counted once; trunk only unless ``heads``."""
        module = self if heads else self.encoder
        return sum(p.numel() for p in module.parameters())

    def save_pretrained(self, path: str | Path) -> Path:
        """Write a Hugging Face directory (config.json + model.safetensors) that
        `transformers.AutoModel.from_pretrained` loads with identical outputs. Atomic."""
        return save_pretrained(self, path)
