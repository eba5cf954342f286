"""Building modules without storage: shapes only, for checking a file against a model before
the model is allocated (`storage_free`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

__all__ = ["storage_free"]


# in-place tensor methods that only write values (weight initialisation): skipped on the meta
# device, where there are no values (and torch would import its compiler to run them)
_VALUE_WRITES = frozenset(
    "normal_ uniform_ zero_ zeros_ ones_ fill_ constant_ trunc_normal_ kaiming_uniform_ "
    "kaiming_normal_ xavier_uniform_ xavier_normal_ orthogonal_ copy_ erfinv_ mul_ add_ sub_ "
    "div_ clamp_ exponential_ bernoulli_ random_ eye_ dirac_ sparse_ masked_fill_".split()
)


class _SkipValueWrites(torch.overrides.TorchFunctionMode):
    """Skips `_VALUE_WRITES` (returns the tensor): a thread-local mode, so a model built at
    the same time on another thread is initialised as usual."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(func, "__name__", "") in _VALUE_WRITES:
            return args[0] if args else kwargs.get("tensor")
        return func(*args, **kwargs)


@contextlib.contextmanager
def storage_free() -> Iterator[None]:
    """Modules built inside are on the meta device (every shape, no storage) and not
    initialised: a model of any size costs no memory, so its shapes can be compared with a
    file's before the real model is allocated."""
    with torch.device("meta"), _SkipValueWrites():
        yield
