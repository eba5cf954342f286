"""AdamW with decoupled weight decay on weight matrices only.

Biases and normalisation weights (LayerNorm gain/bias) are excluded from weight decay, as in the
original BERT optimizer (Devlin et al. 2019, code release ``optimization.py``) and
Loshchilov & Hutter 2019 (decoupled weight decay).
"""

from __future__ import annotations

from torch import nn
from torch.optim import AdamW

from ..errors import InputError

__all__ = ["param_groups", "build_optimizer"]

_NORM_TYPES = (nn.LayerNorm, nn.GroupNorm, nn.BatchNorm1d, nn.RMSNorm)


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two AdamW parameter groups: ``[{decayed params, weight_decay}, {the rest, 0.0}]``.

    No decay: every parameter whose name ends in ``bias``, every parameter of a normalisation
    module (found by module type, also catching norms with custom names), and every
    one-dimensional parameter (gains, scalar mixes). Shared (tied) parameters appear once.
    Parameters with ``requires_grad=False`` are left out.
    """
    no_decay: set[int] = set()
    for module in model.modules():
        if isinstance(module, _NORM_TYPES) or "norm" in type(module).__name__.lower():
            no_decay.update(id(p) for p in module.parameters(recurse=False))
    decay, rest, seen = [], [], set()
    for name, p in model.named_parameters():
        if not p.requires_grad or id(p) in seen:
            continue
        seen.add(id(p))
        if id(p) in no_decay or name.endswith("bias") or p.ndim < 2:
            rest.append(p)
        else:
            decay.append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]


def build_optimizer(
    model: nn.Module,
    learning_rate: float,
    weight_decay: float = 0.01,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-6,
) -> AdamW:
    """`torch.optim.AdamW` over `param_groups` (BERT defaults: betas (0.9, 0.999), eps 1e-6).

    Raises:
        ValueError: non-positive learning rate or negative weight decay.
    """
    if learning_rate <= 0:
        raise InputError(f"learning_rate must be > 0, got {learning_rate}")
    if weight_decay < 0:
        raise InputError(f"weight_decay must be >= 0, got {weight_decay}")
    return AdamW(param_groups(model, weight_decay), lr=learning_rate, betas=betas, eps=eps)
