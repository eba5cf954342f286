"""Position-wise feed-forward block."""

from __future__ import annotations

import torch
from torch import nn

from .kernels import OneDnnLinear


class FeedForward(nn.Module):
    """H → I → activation → H (Vaswani et al. 2017, eq. 2; BERT uses GELU, Devlin et al. 2019 §3).

    Input and output (..., H) float; dropout is applied by the layer, after this block.
    ``bias``: both projections have biases; ``up_bias`` (None = ``bias``): the H → I one's.
    """

    def __init__(
        self,
        hidden_size: int,
        intermediate_size: int,
        act: nn.Module,
        bias: bool = True,
        up_bias: bool | None = None,
    ) -> None:
        super().__init__()
        up_bias = bias if up_bias is None else up_bias
        self.up = nn.Linear(hidden_size, intermediate_size, bias=up_bias)
        self.act = act
        self.down = nn.Linear(intermediate_size, hidden_size, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(..., H) float → (..., H) float: dense to I → activation → dense to H."""
        if type(self.up) is OneDnnLinear:  # the activation as the matrix product's post-op
            return self.down(self.up.with_activation(x, self.act))
        return self.down(self.act(self.up(x)))  # (.., H) -> (.., I) -> (.., H)


class GatedFeedForward(nn.Module):
    """Gated linear unit feed-forward (Shazeer 2020, "GLU Variants Improve Transformer", eq. 6):
    one H → 2I projection split into [input; gate], act(input) ⊙ gate, then I → H. GeGLU with
    GELU (ModernBERT, GTE), SwiGLU with SiLU (NomicBERT).

    Args:
        hidden_size: H.
        intermediate_size: I (the projection has 2I outputs).
        act: the activation of the input half.
        bias: whether both projections have biases.
        up_bias: whether the H → 2I projection has one (None = ``bias``; GTE: only I → H).
    """

    def __init__(
        self,
        hidden_size: int,
        intermediate_size: int,
        act: nn.Module,
        bias: bool = True,
        up_bias: bool | None = None,
    ) -> None:
        super().__init__()
        up_bias = bias if up_bias is None else up_bias
        self.up = nn.Linear(hidden_size, 2 * intermediate_size, bias=up_bias)
        self.act = act
        self.down = nn.Linear(intermediate_size, hidden_size, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(..., H) float → (..., H) float."""
        value, gate = self.up(x).chunk(2, dim=-1)  # (.., I) each
        return self.down(self.act(value) * gate)
