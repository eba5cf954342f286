"""Pretraining heads: masked-LM (tied decoder), sentence-pair (NSP/SOP) and replaced-token
detection (ELECTRA's discriminator)."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from ..errors import InputError
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
        bias: whether ``dense`` has a bias (ModernBERT's classifier_bias).
    """

    def __init__(
        self,
        hidden_size: int,
        embedding_size: int,
        act: nn.Module,
        norm: nn.Module,
        decoder_weight_owner: nn.Embedding,
        bias: bool = True,
    ) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden_size, embedding_size, bias=bias)
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


class ReplacedTokenHead(nn.Module):
    """(B, T, H) → (B, T) replaced-token-detection logits: one score per token, > 0 meaning
    "replaced by the generator" (ELECTRA, Clark et al. 2020 §2: the discriminator D(x, t) =
    sigmoid(wᵀ h_D(x)_t)); dense H→H and the activation precede the scoring layer, as in the
    released discriminator.

    Args:
        hidden_size: H.
        act: activation after ``dense`` (the encoder's hidden_act).
    """

    def __init__(self, hidden_size: int, act: nn.Module) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.act = act
        self.out = nn.Linear(hidden_size, 1)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """(B, T, H) float → (B, T) float logits."""
        return self.out(self.act(self.dense(hidden))).squeeze(-1)  # (B, T, 1) → (B, T)


def mlm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Masked-LM cross-entropy (Devlin et al. 2019 §3.1, Task #1).

    logits (B, T, V) or (M, V) float; labels of the same leading shape, int64 token ids with
    -100 at positions that carry no loss → 0-d float, the mean over predicted positions."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1).long())


def pair_loss(pair_logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """NSP / SOP cross-entropy: pair_logits (B, 2) float, labels (B,) int64 → 0-d float."""
    return F.cross_entropy(pair_logits.reshape(-1, 2), labels.reshape(-1).long())


def rtd_loss(
    logits: torch.Tensor, labels: torch.Tensor, attention_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Replaced-token-detection loss (ELECTRA, Clark et al. 2020 §2, L_Disc): binary
    cross-entropy with logits, averaged over the real (non-padding) tokens of the batch.

    Args:
        logits: (B, T) float, the `ReplacedTokenHead` output.
        labels: (B, T) 0/1 (int or float): 1 = the token was replaced, 0 = original.
        attention_mask: (B, T) 0/1, 1 = real token; None = every position counts.

    Returns:
        0-d float.

    Raises:
        ValueError: labels or mask of another shape than the logits; labels other than 0/1;
            a mask with no real token (the mean would be over nothing).
    """
    if tuple(labels.shape) != tuple(logits.shape):
        raise InputError(
            f"replaced-token labels must be (B, T) like the logits {tuple(logits.shape)}, "
            f"got {tuple(labels.shape)}"
        )
    if labels.numel() and not ((labels == 0) | (labels == 1)).all():
        raise InputError("replaced-token labels must be 0 (original) or 1 (replaced)")
    if attention_mask is not None:
        if tuple(attention_mask.shape) != tuple(logits.shape):
            raise InputError(
                f"attention_mask must be (B, T) like the logits {tuple(logits.shape)}, "
                f"got {tuple(attention_mask.shape)}"
            )
        real = attention_mask == 1
        if not real.any():
            raise InputError("attention_mask has no real token: the loss would average nothing")
        logits, labels = logits[real], labels[real]  # (R,) real tokens only
    return F.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype))
