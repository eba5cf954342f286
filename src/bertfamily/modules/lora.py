"""LoRA: a low-rank update added to a frozen linear layer (Hu et al. 2021, "LoRA: Low-Rank
Adaptation of Large Language Models", §4.1, eq. 3: h = W₀x + ΔWx = W₀x + (α/r)·B A x).

Our attention keeps Q, K and V in one fused projection (``qkv``, rows [Q; K; V]), while an
adapter trained on a Hugging Face model adapts ``query`` and ``value`` apart. So one
`LoraLinear` holds several *parts*, one per adapted source module, each with its own A, B and
scale and the output rows it updates (``rows``: the source's rows inside ours, in our order).
Which rows a source owns is the checkpoint layer's knowledge (`checkpoints.adapters`); this
module only does the arithmetic.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["LoraLinear", "LoraPart"]


class LoraPart(nn.Module):
    """One low-rank update of some output rows of a linear layer.

    Args:
        A: (r, in_features) float, the down-projection.
        B: (rows, r) float, the up-projection (zero at the start of training).
        scaling: α/r (or α/√r for rank-stabilised LoRA), dimensionless.
        rows: (rows,) int64, the output positions of the layer this part adds to, in order.
        dropout: dropout probability on the part's input (training only).
        source: the adapted module's Hugging Face name (what a PEFT adapter file calls it).
    """

    def __init__(
        self,
        A: torch.Tensor,
        B: torch.Tensor,
        scaling: float,
        rows: torch.Tensor,
        dropout: float = 0.0,
        source: str = "",
    ) -> None:
        super().__init__()
        self.A = nn.Parameter(A)
        self.B = nn.Parameter(B)
        self.scaling = float(scaling)
        self.register_buffer("rows", rows.to(torch.long), persistent=False)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.source = source

    @property
    def rank(self) -> int:
        """r, the rank of the update."""
        return self.A.shape[0]

    def delta(self) -> torch.Tensor:
        """(rows, in_features): the part's weight update (α/r)·B A."""
        return (self.B @ self.A) * self.scaling

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(..., in_features) → (..., rows): (α/r)·B A dropout(x)."""
        return F.linear(F.linear(self.dropout(x), self.A), self.B) * self.scaling


class LoraLinear(nn.Linear):
    """An ``nn.Linear`` (its ``weight`` and ``bias`` frozen, the same tensors as the layer it
    replaces, so the state dict keeps their names) plus LoRA parts: y = x Wᵀ + b + Σ_p
    scatter(rows_p, part_p(x)). A subclass of ``nn.Linear``, so code that looks for linears
    finds it, while the kernels that swap the class of plain linears leave it alone.

    Args:
        base: the linear layer to adapt; its parameters are reused, not copied.
        parts: the updates (see `LoraPart`); their rows may overlap only by design (none do
            for adapters of distinct source modules).
    """

    def __init__(self, base: nn.Linear, parts: list[LoraPart]) -> None:
        nn.Module.__init__(self)
        self.in_features, self.out_features = base.in_features, base.out_features
        self.weight = base.weight
        self.bias = base.bias
        self.weight.requires_grad_(False)
        if self.bias is not None:
            self.bias.requires_grad_(False)
        self.lora = nn.ModuleList(parts)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(..., in_features) → (..., out_features)."""
        y = F.linear(x, self.weight, self.bias)
        for part in self.lora:
            y = y.index_add(-1, part.rows, part(x).to(y.dtype))  # (..., out) += at rows
        return y

    def merged(self) -> nn.Linear:
        """A plain ``nn.Linear`` holding W + Σ_p scatter(rows_p, (α/r)·B_p A_p): the same
        function without the extra products (Hu et al. 2021 §4.1: no inference latency)."""
        weight = self.weight.detach().clone()
        for part in self.lora:
            weight.index_add_(0, part.rows, part.delta().detach().to(weight.dtype))
        bias = self.bias is not None
        out = nn.Linear(self.in_features, self.out_features, bias=bias, device="meta")
        out.weight = nn.Parameter(weight)
        if self.bias is not None:
            out.bias = nn.Parameter(self.bias.detach().clone())
        return out
