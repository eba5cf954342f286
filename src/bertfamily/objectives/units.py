"""The units of an optimizer step, for objectives called without them.

The `Trainer` normalises every loss term over the whole accumulated step: it counts each
term's units over the step's micro-batches (an objective's ``counts``) and hands the totals
(``denominators``) to the objective's ``forward(batch, denominators)``. A ``loss_fn`` written
``lambda m, b: m(b)`` cannot pass them on, so the Trainer also makes them the step's
denominators here, and every objective's ``forward`` called without ``denominators`` reads
them (`step_denominators`); outside a Trainer step there are none (per-batch means).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

_STEP: ContextVar[dict[str, float] | None] = ContextVar(
    "bertfamily_step_denominators", default=None
)


def step_denominators(given: dict[str, float] | None = None) -> dict[str, float] | None:
    """``given`` when not None, else the denominators of the Trainer step being run (None
    outside one: each term is then its batch's mean)."""
    return given if given is not None else _STEP.get()


@contextlib.contextmanager
def denominators_of_step(denominators: dict[str, float] | None) -> Iterator[None]:
    """Make ``denominators`` the step's (`step_denominators`) while the block runs."""
    token = _STEP.set(denominators)
    try:
        yield
    finally:
        _STEP.reset(token)
