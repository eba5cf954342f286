"""FastBERT's self-distillation (Liu et al. 2020, "FastBERT: a Self-distilling BERT with
Adaptive Inference Time", §3.2): after the backbone and its final ("teacher") classifier are
fine-tuned, they are frozen and the student classifiers after layers 1 … L - 1 learn to predict
the teacher's distribution on unlabeled text; no label is read.

Loss (§3.2, eq. 4–5): Σ_{i=1}^{L-1} KL(p_t ‖ p_si), the KL divergence of each student's
distribution p_si from the teacher's p_t, averaged over the batch — the direction the authors'
code trains (``nn.KLDivLoss(log p_s, p_t)``).

Shapes: B batch, T sequence, H hidden, C classes, L layers.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from ..heads.early_exit import StudentClassifiers
from ..model import Model

__all__ = ["self_distillation_loss", "SelfDistillation", "key_mask"]


def self_distillation_loss(
    student_logits: list[torch.Tensor], teacher_logits: torch.Tensor
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Σ_i KL(p_t ‖ p_si), each a batch mean, and the per-student terms.

    Args:
        student_logits: L - 1 tensors (B, C) float, layer 1 first.
        teacher_logits: (B, C) float (no gradient flows into it).

    Returns:
        (0-d loss, L - 1 0-d terms), float32.
    """
    log_t = F.log_softmax(teacher_logits.detach().float(), dim=-1)  # (B, C)
    terms = [
        F.kl_div(F.log_softmax(s.float(), dim=-1), log_t, reduction="batchmean", log_target=True)
        for s in student_logits
    ]
    return torch.stack(terms).sum(), terms


def key_mask(attention_mask: torch.Tensor | None) -> torch.Tensor | None:
    """(B, T) bool real-token mask of a (B, T) 0/1 mask or of a (B, T, T) visibility matrix
    (its diagonal), or None."""
    if attention_mask is None:
        return None
    if attention_mask.dim() == 3:
        return attention_mask.bool().diagonal(dim1=1, dim2=2)
    return attention_mask.bool()


class SelfDistillation(nn.Module):
    """The objective module the `Trainer` trains: a frozen fine-tuned ``model`` (its task head
    is the teacher) and trainable ``students``; ``forward(**batch) -> (loss, parts)``.

    The backbone stays in eval mode (no dropout: the teacher's distribution is a fixed target)
    whatever ``train()`` is called with; only the students' parameters require gradients.

    Args:
        model: a `Model` with a "classify" head, L ≥ 2 layer steps.
        students: `StudentClassifiers` for its L layers.
    """

    def __init__(self, model: Model, students: StudentClassifiers) -> None:
        super().__init__()
        self.model, self.students = model, students
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.model.eval()

    def train(self, mode: bool = True) -> SelfDistillation:
        """Set the students' mode; the frozen backbone and teacher stay in eval mode."""
        super().train(mode)
        self.model.eval()
        return self

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        **unused,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """A batch (input_ids (B, T), attention_mask (B, T) or (B, T, T), optional
        token_type_ids / position_ids (B, T); labels, if any, are ignored) → (loss, {"kl_l":
        the term of the student after layer l})."""
        with torch.no_grad():
            out = self.model(
                input_ids,
                attention_mask,
                token_type_ids,
                position_ids,
                output_hidden_states=True,
            )
        logits = self.students(out.hidden_states, key_mask(attention_mask))
        loss, terms = self_distillation_loss(logits, out.logits)
        return loss, {f"kl_{i + 1}": float(t.detach()) for i, t in enumerate(terms)}
