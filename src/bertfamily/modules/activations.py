"""Activation functions by name (the names `EncoderConfig.hidden_act` accepts)."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from ..errors import InputError


class SigmoidGELU(nn.Module):
    """x·σ(1.702x), the sigmoid approximation of GELU (Hendrycks & Gimpel 2016, §2)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(...) float → (...) float: x·σ(1.702x)."""
        return x * torch.sigmoid(1.702 * x)


def activation(name: str) -> nn.Module:
    """Module for an activation name.

    - ``gelu``: exact x·Φ(x) with the Gaussian CDF via erf (BERT, RoBERTa, DistilBERT, DeBERTa,
      Longformer; Hendrycks & Gimpel 2016, eq. 1).
    - ``gelu_tanh``: 0.5x(1 + tanh(√(2/π)(x + 0.044715x³))) (ALBERT checkpoints, "gelu_new").
    - ``gelu_sigmoid``: x·σ(1.702x).
    - ``relu``, ``silu``.

    Raises:
        ValueError: unknown name.
    """
    table = {
        "gelu": lambda: nn.GELU(approximate="none"),
        "gelu_tanh": lambda: nn.GELU(approximate="tanh"),
        "gelu_sigmoid": SigmoidGELU,
        "relu": nn.ReLU,
        "silu": nn.SiLU,
    }
    if name not in table:
        raise InputError(f"unknown activation {name!r}; expected one of {sorted(table)}")
    return table[name]()


__all__ = ["activation", "SigmoidGELU", "F"]
