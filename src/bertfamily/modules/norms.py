"""Norm components: Conditional Layer Normalization (LayerNorm itself is `torch.nn.LayerNorm`)."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from ..errors import InputError


class ConditionalLayerNorm(nn.Module):
    """LayerNorm whose gain and bias depend on a condition vector c::

        γ = γ0 + c·W_γ        β = β0 + c·W_β        y = γ ⊙ (x − μ) / √(σ² + eps) + β

    (Ba et al. 2016, eq. 15 for the normalisation; γ and β as functions of a condition follow
    the conditional normalisation of de Vries et al. 2017, "Modulating early visual processing
    by language", §3.1, applied to LayerNorm.) W_γ, W_β have shape (C, H), no bias, and start at
    zero, so a fresh conditional norm computes exactly the plain LayerNorm with γ0, β0. Parameters:
    2H + 2CH (H=768, C=128: 1,536 + 196,608 = 198,144).

    Args:
        size: H, the normalised (last) dimension.
        condition_size: C.
        eps: added to the variance.

    Attributes:
        weight, bias: γ0, β0, (H,) — the same names as `torch.nn.LayerNorm`, so ordinary
            checkpoints load into them.
        condition_weight, condition_bias: W_γ, W_β, (C, H); absent from ordinary checkpoints
            (listed in ``new_parameters``; a loader reports them as newly initialised).
    """

    takes_condition = True
    new_parameters = ("condition_weight", "condition_bias")

    def __init__(self, size: int, condition_size: int, eps: float = 1e-12) -> None:
        super().__init__()
        self.size, self.condition_size, self.eps = size, condition_size, eps
        self.weight = nn.Parameter(torch.ones(size))
        self.bias = nn.Parameter(torch.zeros(size))
        self.condition_weight = nn.Parameter(torch.zeros(condition_size, size))
        self.condition_bias = nn.Parameter(torch.zeros(condition_size, size))

    def reset_parameters(self) -> None:
        """γ0 = 1, β0 = 0, W_γ = W_β = 0 (the model starts as the unconditioned one)."""
        nn.init.ones_(self.weight)
        nn.init.zeros_(self.bias)
        nn.init.zeros_(self.condition_weight)
        nn.init.zeros_(self.condition_bias)

    def check_condition(self, x: torch.Tensor, condition: torch.Tensor | None) -> torch.Tensor:
        """The condition reshaped to broadcast against ``x``.

        Args:
            x: (..., H), e.g. (B, T, H), or (M, H) at selected positions.
            condition: (B, C) — one vector per sequence, broadcast over T — or one vector per
                position with the leading shape of ``x`` (e.g. (B, T, C)).

        Returns:
            condition as (B, 1, C) or (..., C), floating point.

        Raises:
            ValueError: no condition, a size other than C, or leading dimensions that do not
                match ``x``.
        """
        if condition is None:
            raise InputError(
                f"this model has conditional LayerNorms (condition_size C={self.condition_size}); "
                f"pass condition= as a (B, C) or (B, T, C) float tensor"
            )
        if not condition.dtype.is_floating_point:
            raise InputError(f"condition must be a float tensor, got {condition.dtype}")
        if condition.shape[-1] != self.condition_size:
            raise InputError(
                f"condition has size {condition.shape[-1]} in its last dimension; "
                f"this model expects C={self.condition_size}"
            )
        if condition.dim() == x.dim() - 1 and condition.shape[:-1] == x.shape[:1]:
            return condition.unsqueeze(-2) if x.dim() > 2 else condition  # (B, 1, C)
        if condition.dim() == x.dim() and condition.shape[:-1] == x.shape[:-1]:
            return condition
        raise InputError(
            f"condition has shape {tuple(condition.shape)}; expected "
            f"{(x.shape[0], self.condition_size)} or "
            f"{(*x.shape[:-1], self.condition_size)} for input {tuple(x.shape)}"
        )

    def forward(self, x: torch.Tensor, condition: torch.Tensor | None) -> torch.Tensor:
        """x (..., H) float, condition (B, C) or (..., C) float → (..., H) float."""
        c = self.check_condition(x, condition).to(x.dtype)
        # γ n + β = (γ0 n + β0) + (c·W_γ) n + c·W_β: the first term is the plain LayerNorm's own
        # kernel, so with W = 0 the output equals the unconditioned model bit for bit.
        plain = F.layer_norm(x, (self.size,), self.weight, self.bias, self.eps)  # (..., H)
        n = F.layer_norm(x, (self.size,), eps=self.eps)  # (..., H), normalised
        return plain + n * (c @ self.condition_weight) + c @ self.condition_bias

    def extra_repr(self) -> str:
        """Size, condition size and eps, for the module's repr."""
        return f"{self.size}, condition_size={self.condition_size}, eps={self.eps}"


def call_norm(norm: nn.Module, x: torch.Tensor, condition: torch.Tensor | None) -> torch.Tensor:
    """Apply ``norm`` to x, handing it ``condition`` when it takes one (``takes_condition``)."""
    return norm(x, condition) if getattr(norm, "takes_condition", False) else norm(x)
