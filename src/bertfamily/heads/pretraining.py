"""Pretraining heads: masked-LM (tied decoder) and sentence-pair (NSP/SOP)."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from ..modules.norms import call_norm


class MaskedLMHead(nn.Module):
    """(.., H) → (.., V) vocabulary logits (Devlin et al. 2019 §3.1, Task #1).

    dense H→E, activation, LayerNorm(E), then the decoder: a product with the (V, E) token
    embedding matrix (tied, not a parameter of this head) plus the head's own bias (V,).

    Args:
        hidden_size: H.
        embedding_size: E (= H except ALBERT).
        act: activation module.
        norm: LayerNorm over E (or a Conditional LayerNorm: then ``takes_condition``).
        decoder_weight_owner: the token embedding module whose ``weight`` (V, E) is the decoder.
    """

    def __init__(
        self,
        hidden_size: int,
        embedding_size: int,
        act: nn.Module,
        norm: nn.Module,
        decoder_weight_owner: nn.Embedding,
    ) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden_size, embedding_size)
        self.act = act
        self.norm = norm
        self.bias = nn.Parameter(torch.zeros(decoder_weight_owner.num_embeddings))
        # A plain attribute, not a submodule: the decoder weight belongs to the embeddings.
        self._embedding = [decoder_weight_owner]

    @property
    def decoder_weight(self) -> torch.Tensor:
        """(V, E), tied to the token embedding."""
        return self._embedding[0].weight

    @property
    def takes_condition(self) -> bool:
        """Whether the head's norm is conditional (forward then needs ``condition``)."""
        return getattr(self.norm, "takes_condition", False)

    def forward(self, hidden: torch.Tensor, condition: torch.Tensor | None = None) -> torch.Tensor:
        """hidden (.., H) float [, condition (B, C) or (.., C) float] → logits (.., V) float."""
        x = call_norm(self.norm, self.act(self.dense(hidden)), condition)  # (.., E)
        return F.linear(x, self.decoder_weight, self.bias)  # (.., V)


class PairHead(nn.Module):
    """(B, H) pooled output → (B, 2) logits: NSP (Devlin et al. §3.1 Task #2; 0 = is next)
    or SOP (Lan et al. 2020 §3.1; 0 = original order)."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.classifier = nn.Linear(hidden_size, 2)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        """(B, H) float → (B, 2) float logits."""
        return self.classifier(pooled)


def mlm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Masked-LM cross-entropy (Devlin et al. 2019 §3.1, Task #1).

    logits (B, T, V) or (M, V) float; labels of the same leading shape, int64 token ids with
    -100 at positions that carry no loss → 0-d float, the mean over predicted positions."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1).long())


def pair_loss(pair_logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """NSP / SOP cross-entropy: pair_logits (B, 2) float, labels (B,) int64 → 0-d float."""
    return F.cross_entropy(pair_logits.reshape(-1, 2), labels.reshape(-1).long())
