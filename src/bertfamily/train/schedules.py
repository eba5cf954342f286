"""Learning-rate schedules as multiplicative factors of the peak rate (for `LambdaLR`).

- ``"linear"``: linear warm-up from 0 to 1 over ``warmup_steps``, then linear decay to 0 at
  ``total_steps`` (Devlin et al. 2019, Appendix A.2).
- ``"inverse_sqrt"``: linear warm-up, then ``sqrt(warmup_steps / step)`` (Vaswani et al. 2017
  §5.3, rescaled so that the factor is 1 at the end of warm-up).
- ``"constant"``: linear warm-up, then 1.

The warm-up counts from the first update (step s trains at (s + 1) / warmup_steps) unless
``from_zero``: then step s trains at s / warmup_steps, so the first update runs at rate 0 (its
gradient only enters AdamW's moments), as transformers' ``get_linear_schedule_with_warmup``
and the trainers built on it (sentence-transformers') do.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch.optim.lr_scheduler import LambdaLR

from ..errors import InputError

__all__ = ["SCHEDULES", "lr_factor", "build_scheduler"]

SCHEDULES = ("linear", "inverse_sqrt", "constant")


def lr_factor(
    schedule: str, warmup_steps: int, total_steps: int, *, from_zero: bool = False
) -> Callable[[int], float]:
    """The factor f(step) in [0, 1] applied to the peak learning rate at optimizer step ``step``
    (0-based: ``step`` updates have been made).

    ``from_zero``: warm-up at ``step / warmup_steps`` (transformers' convention, the first
    update at rate 0) instead of ``(step + 1) / warmup_steps``; after the warm-up both agree.

    Raises:
        ValueError: unknown schedule, negative warm-up, or ``total_steps`` < 1 for "linear".
    """
    if schedule not in SCHEDULES:
        raise InputError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    if warmup_steps < 0:
        raise InputError(f"warmup_steps must be >= 0, got {warmup_steps}")
    if schedule == "linear" and total_steps < 1:
        raise InputError(f"the linear schedule needs total_steps >= 1, got {total_steps}")

    def factor(step: int) -> float:
        # Step s trains with the rate of position s + 1 so that the first update is not zero
        # (from_zero: of position s, transformers' convention).
        if from_zero and step < warmup_steps:
            return step / warmup_steps
        s = step + 1
        if warmup_steps and s <= warmup_steps:
            return s / warmup_steps
        if schedule == "linear":
            return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))
        if schedule == "inverse_sqrt":
            return math.sqrt(max(warmup_steps, 1) / s)
        return 1.0

    return factor


def build_scheduler(
    optimizer: torch.optim.Optimizer,
    schedule: str,
    warmup_steps: int,
    total_steps: int,
    *,
    from_zero: bool = False,
) -> LambdaLR:
    """A `LambdaLR` over ``optimizer`` following `lr_factor`; call ``.step()`` once per update."""
    return LambdaLR(optimizer, lr_factor(schedule, warmup_steps, total_steps, from_zero=from_zero))
