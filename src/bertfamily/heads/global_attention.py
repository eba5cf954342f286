"""Default global attention masks for task heads on windowed-attention (Longformer) models.

Beltagy et al. 2020, §4 ("Task-specific global attention") and §6: classification puts global
attention on the first token (<s>, whose state the classifier reads); extractive QA puts it on
every question token. Multiple choice follows transformers' LongformerForMultipleChoice:
global attention on the tokens after the question, i.e. the candidate answer. A caller can
always pass an explicit ``global_attention_mask`` instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import InputError

TASKS = ("classification", "qa", "choice")
# Task head (heads/tasks.py) → the default of this module that a windowed-attention model with
# that head applies when the caller gives no global_attention_mask. Token classification has
# none (as transformers' LongformerForTokenClassification).
HEAD_DEFAULTS = {"classify": "classification", "qa": "qa", "choice": "choice"}


@dataclass(frozen=True)
class TaskGlobalAttention:
    """The default global attention of one task head (a `Model`'s ``default_inputs``
    component, attached by `bertfamily.build.build_model` to windowed-attention models).

    Calling it with (B, T) ``input_ids`` and ``attention_mask`` returns
    {"global_attention_mask": (B, T) int64} from `default_global_attention_mask`, or {} when the
    mask's shape differs from the ids' (the encoder then reports the shape error).

    Attributes:
        task: one of `TASKS`.
        sep_token_id: the separator id (``EncoderConfig.sep_token_id``).
    """

    task: str
    sep_token_id: int | None

    def __call__(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None
    ) -> dict[str, torch.Tensor]:
        """(B, T) ids, (B, T) mask or None → {"global_attention_mask": (B, T) int64}, or {}
        when the mask's shape differs from the ids'."""
        if attention_mask is not None and tuple(attention_mask.shape) != tuple(input_ids.shape):
            return {}
        return {
            "global_attention_mask": default_global_attention_mask(
                input_ids, self.task, sep_token_id=self.sep_token_id, attention_mask=attention_mask
            )
        }


def default_global_attention_mask(
    input_ids: torch.Tensor,
    task: str,
    *,
    sep_token_id: int | None = None,
    attention_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """The global attention mask a task head uses when the caller gives none.

    Args:
        input_ids: (B, T) int64.
        task: "classification" — the first real token of each row (column 0 with right padding,
            as transformers' LongformerForSequenceClassification; with left padding the first
            real token, where transformers would pick a padding position and so no token);
            "qa" — every real token before the first ``sep_token_id`` of each row, i.e.
            ``<s>`` and the question of ``<s> question </s></s> context </s>`` (as
            transformers' LongformerForQuestionAnswering, which also demands exactly three
            separators; one is enough here);
            "choice" — every real token after the first two separators, i.e. the answer of
            ``<s> question </s></s> answer </s>`` and its closing ``</s>`` (as transformers'
            LongformerForMultipleChoice with right padding).
        sep_token_id: separator id (Longformer/RoBERTa: 2); required for "qa" and "choice".
        attention_mask: (B, T) 0/1, 1 = real token; None = all real.

    Returns:
        (B, T) int64, 1 = global attention, 0 = local.

    Raises:
        ValueError: unknown task; input_ids not (B, T); attention_mask of another shape;
            "qa"/"choice" without sep_token_id, or a row without a separator.
    """
    if task not in TASKS:
        raise InputError(f"unknown task {task!r}; expected one of {TASKS}")
    if input_ids.dim() != 2:
        raise InputError(f"input_ids must be (B, T), got shape {tuple(input_ids.shape)}")
    B, T = input_ids.shape
    if attention_mask is None:
        real = torch.ones(B, T, dtype=torch.bool, device=input_ids.device)
    else:
        if tuple(attention_mask.shape) != (B, T):
            raise InputError(
                f"attention_mask has shape {tuple(attention_mask.shape)}; "
                f"expected {(B, T)} like input_ids"
            )
        real = attention_mask.bool()
    positions = torch.arange(T, device=input_ids.device)[None, :].expand(B, T)
    if task == "classification":
        # First real position per row (argmax returns the first True).
        first = real.int().argmax(dim=1, keepdim=True)  # (B, 1)
        return ((positions == first) & real).long()
    if sep_token_id is None:
        raise InputError(
            f"task {task!r} needs sep_token_id to find where the question ends "
            f"(EncoderConfig.sep_token_id, config.json's sep_token_id)"
        )
    is_sep = (input_ids == sep_token_id) & real
    has_sep = is_sep.any(dim=1)
    if not bool(has_sep.all()):
        rows = torch.nonzero(~has_sep).flatten().tolist()
        raise InputError(
            f"rows {rows} hold no separator (sep_token_id={sep_token_id}); "
            f"expected <s> question </s></s> context </s>, or pass "
            f"global_attention_mask explicitly"
        )
    question_end = is_sep.int().argmax(dim=1, keepdim=True)  # first separator, (B, 1)
    if task == "choice":  # skip the separator pair after the question
        return ((positions > question_end + 1) & real).long()
    return ((positions < question_end) & real).long()
