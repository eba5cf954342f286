"""Which CPU kernel runs the fp32 and bf16 Linear layers at inference.

PyTorch's ``F.linear`` on the CPU calls the BLAS it was built with (MKL on x86 wheels);
oneDNN's matrix multiply (the kernel behind ``torch.ops.mkldnn._linear_pointwise``, which
PyTorch's own compiler emits for CPU linears) was faster on a 2-core AMD EPYC (AVX2): 1.05–1.35×
on MiniLM's three Linear shapes at 400 and 1,000 tokens, and 1.03× (Austen lines) / 1.05×
(short queries) for the whole embedding in one interleaved run (benchmarks/embed.py →
results/embed_epyc_kernels.json), outputs within 2e-7. On an Intel Xeon (AVX-512) it was no
faster than MKL when both ran unconstrained; in the batch-invariant default (`row_blocked`)
oneDNN is the faster one there too, because it gives a row the same bits whatever the row count
of its call (measured per shape: `row_invariance`) while MKL does not and must run fixed blocks.
So "auto" uses oneDNN on every CPU.

The weight is handed to oneDNN **pre-packed**: reordered once into oneDNN's blocked layout
(``torch.ops.mkldnn._reorder_linear_weight``, what torch's compiler does for CPU linears) and kept
beside the parameter, so no call reorders it again. On a 2-core AMD EPYC (Zen 5) that made the
whole fp32 embedding 1.15× (Austen lines) / 1.18× (short queries) the unpacked oneDNN calls,
and bf16 1.24× / 1.20× ``F.linear`` (benchmarks/embed.py → results/embed_zen5_no_ct2.json,
embed_zen5_bf16_kernel.json). The cost is a second copy of
each Linear weight in memory while the model runs (MiniLM: 42 MB in fp32).

oneDNN also applies an activation to the matrix product before writing it out (a "post-op"):
the feed-forward block's H → I projection and its GELU or ReLU are one call
(`OneDnnLinear.with_activation`), so the (tokens, I) product — the largest tensor of the
layer — is not read back and written again by a separate GELU pass.

The swap changes only the forward of inference calls (no autograd, fp32 or bf16, CPU):
training, other dtypes and devices run ``nn.Linear`` as before, and the parameters, their
names and the state dict stay the same.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import InputError
from ..files import write_text_atomic
from ..runtime import cpu_info_field

log = logging.getLogger(__name__)

__all__ = [
    "INVARIANT_ROWS",
    "LINEAR_KERNELS",
    "ONEDNN_DTYPES",
    "OneDnnLinear",
    "RowBlockedLinear",
    "apply_linear_kernel",
    "make_batch_invariant",
    "cpu_vendor",
    "resolve_linear_kernel",
    "use_kernel",
]

LINEAR_KERNELS = ("auto", "blas", "onednn")
ONEDNN_DTYPES = (torch.float32, torch.bfloat16)
# The row count the packed layout is chosen for (oneDNN's "batch size" hint, what torch's compiler
# passes for dynamic shapes); any row count runs on it. 64 and the real count measured alike.
PACK_ROWS_HINT = 64
# Rows of every matrix product of a batch-invariant inference linear (`row_blocked`): a BLAS
# picks its code path by the row count (on a Xeon with MKL: one path for 1 row, another for
# 2..15, a third from 16), so a row's result depends on how many rows share its call.
INVARIANT_ROWS = 64


def cpu_vendor(cpuinfo: str | None = None) -> str:
    """The ``vendor_id`` of the first CPU in /proc/cpuinfo ("GenuineIntel", "AuthenticAMD",
    …), or "" where it cannot be read (not Linux, or no such line); ``cpuinfo``: its text
    (read when None; `runtime.cpu_info_field`)."""
    return cpu_info_field("vendor_id", cpuinfo) or ""


def _onednn_available() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def resolve_linear_kernel(
    kernel: str = "auto", dtype: torch.dtype = torch.float32
) -> tuple[str, str]:
    """(kernel, reason) for the CPU inference Linear layers of a ``dtype`` model: "blas"
    (``F.linear``) or "onednn" (`OneDnnLinear`: oneDNN on a pre-packed weight).

    "auto": oneDNN on every CPU, fp32 and bf16 (what torch's own compiler emits for CPU
    linears), BLAS where this torch has no oneDNN. In the batch-invariant default each row's
    result must not depend on its call's row count: oneDNN measured invariant from 1–2 rows on
    an Intel Xeon (Sapphire Rapids), so it runs one call per product, while MKL splits its
    reduction by the row count (its 1536 → 384 product at 2 threads) and keeps fixed 64-row
    blocks (`row_invariance`); on that Xeon the whole embedding ran 1.10× (Austen lines) / 1.11×
    (short queries) faster on oneDNN than on BLAS idle, level with a core busy
    (benchmarks/embed.py → results/embed_xeon_spr.json). On AMD EPYCs oneDNN was faster before
    that too (1.03–1.05× on a Zen 1, 2.1–2.5× MKL's products on a Zen 5).

    Raises:
        InputError: an unknown name, or "onednn" on a torch built without oneDNN.
    """
    if kernel not in LINEAR_KERNELS:
        raise InputError(f"linear_kernel must be one of {', '.join(LINEAR_KERNELS)}: {kernel!r}")
    if kernel == "onednn" and not _onednn_available():
        raise InputError("this torch build has no oneDNN linear kernel; use 'blas'")
    if kernel != "auto":
        return kernel, f"{kernel} (asked)"
    if not _onednn_available():
        return "blas", "blas (auto: this torch has no oneDNN linear kernel)"
    if dtype == torch.bfloat16:
        return "onednn", "onednn (auto: bf16, pre-packed weights as torch's compiler uses)"
    return "onednn", "onednn (auto: pre-packed weights, one call per product where row-invariant)"


def _exporting() -> bool:
    """Whether the call is being traced or compiled (ONNX export, torch.jit, torch.compile):
    there ``F.linear``, the operation every exporter knows."""
    return torch.jit.is_tracing() or torch.onnx.is_in_onnx_export() or torch.compiler.is_compiling()


# The row counts `row_invariance` tries: every count up to 40 (where kernels switch paths: MKL on
# a Xeon has one for 1 row, one for 2..15 and one from 16, and oneDNN a matrix-vector path for
# 1 row), then the block edges of the sizes kernels tile by and a few large counts (a kernel splits
# the reduction over threads only when there are too few row and column blocks to share out).
PROBE_ROWS = (*range(1, 41), 63, 64, 65, 127, 128, 129, 255, 256, 257, 512)
# The most padding rows `row_blocked` adds to a short call of an invariant kernel.
MAX_MIN_ROWS = 16
_ROW_INVARIANCE: dict[tuple, int] = {}


def _machine_key() -> str:
    """What a kernel's row invariance can depend on besides its shapes and thread count: the
    CPU model and its flags, torch's version and its oneDNN's."""
    flags = hashlib.sha256((cpu_info_field("flags") or "").encode()).hexdigest()[:16]
    onednn = getattr(torch.backends.mkldnn, "version", lambda: "")()
    return f"{cpu_info_field('model name') or '?'}|{flags}|torch {torch.__version__}|{onednn}"


def _store() -> Path:
    from ..resources.cache import cache_dir

    return cache_dir() / "kernels" / "row-invariance.json"


def _read_store() -> dict[str, int]:
    """The measured row counts of earlier runs on this machine ({} when none can be read)."""
    try:
        data = json.loads(_store().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, int)} if isinstance(data, dict) else {}


def _remember(text: str, value: int) -> None:
    """Add one measurement to the store (atomic; a store that cannot be written is skipped:
    the measurement is only repeated by the next process)."""
    data = _read_store()
    data[text] = value
    try:
        write_text_atomic(_store(), json.dumps(data, indent=0, sort_keys=True))
    except OSError as exc:
        log.debug("row invariance not stored: %s", exc)


def row_invariance(
    matmul: Callable[[torch.Tensor], torch.Tensor], like: torch.Tensor, key: tuple
) -> int:
    """Whether ``matmul`` (rows (M, in_features) → (M, out)) gives every row the same bits
    whatever M, measured on this CPU and thread count: each row count of `PROBE_ROWS` is
    multiplied in one call (seeded random rows, ``matmul``'s own weight) and compared bit for
    bit with the same rows multiplied in `INVARIANT_ROWS`-row blocks (what `row_blocked` does
    where a kernel is not invariant).

    A kernel's path depends on the shapes, the thread count and the machine, not on the
    values, so the answer is kept per ``key`` (the kernel, shapes, dtype, post-op), thread
    count, CPU and torch build: in memory, and in the cache directory
    (``kernels/row-invariance.json``) for the next process on this machine. ``like``: a tensor
    of the rows' dtype and width.

    Returns:
        The smallest row count m such that every probed count ≥ m agreed (a call of fewer rows
        is padded to m), or 0 when that is above `MAX_MIN_ROWS` (the kernel's result depends on
        how many rows share a call: `row_blocked` keeps fixed blocks).
    """
    key = (*key, torch.get_num_threads())
    found = _ROW_INVARIANCE.get(key)
    if found is not None:
        return found
    text = "|".join(map(str, key)) + "|" + _machine_key()
    found = _read_store().get(text)
    if found is None:
        gen = torch.Generator().manual_seed(0)
        x = torch.randn(max(PROBE_ROWS), like.shape[1], generator=gen).to(like.dtype)
        ref = _blocks(x, matmul)
        good = 0
        for rows in sorted(PROBE_ROWS, reverse=True):
            if not torch.equal(matmul(x[:rows]), ref[:rows]):
                break
            good = rows
        found = good if 0 < good <= MAX_MIN_ROWS else 0
        _remember(text, found)
    _ROW_INVARIANCE[key] = found
    return found


def _blocks(flat: torch.Tensor, matmul: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """``matmul`` of ``flat`` (M ≥ 1 rows) in blocks of exactly `INVARIANT_ROWS` rows, the last
    one zero-padded."""
    n = flat.shape[0]
    pad = (-n) % INVARIANT_ROWS
    if pad:
        flat = torch.cat([flat, flat.new_zeros(pad, flat.shape[1])])
    blocks = [matmul(flat[i : i + INVARIANT_ROWS]) for i in range(0, len(flat), INVARIANT_ROWS)]
    return torch.cat(blocks)[:n]


def row_blocked(
    flat: torch.Tensor,
    matmul: Callable[[torch.Tensor], torch.Tensor],
    out_features: int,
    key: tuple | None = None,
) -> torch.Tensor:
    """``matmul`` applied to ``flat`` (M, in_features) so that each row's result depends on
    that row alone, not on how many rows its batch has or where the row sits (fp32 and bf16 on
    the CPU; tests/inference/test_faithful.py). Returns (M, out_features).

    Where the kernel was measured row-invariant on this CPU and thread count
    (`row_invariance`, under ``key``), one call on all M rows (padded to its smallest invariant
    row count when M is below it); otherwise, or without a ``key``, blocks of exactly
    `INVARIANT_ROWS` rows (the last one zero-padded), so every product has the same shape. Both
    give the same bits.
    """
    n = flat.shape[0]
    if n == 0:
        return flat.new_zeros(0, out_features)
    min_rows = row_invariance(matmul, flat, key) if key is not None else 0
    if not min_rows:
        return _blocks(flat, matmul)
    if n >= min_rows:
        return matmul(flat)
    return matmul(torch.cat([flat, flat.new_zeros(min_rows - n, flat.shape[1])]))[:n]


def _invariant(module: nn.Linear, x: torch.Tensor) -> bool:
    """Whether ``module``'s call on ``x`` runs row-blocked: switched on for it, a CPU inference
    call (no autograd), not traced or compiled."""
    return (
        module.__dict__.get("row_blocks", False)
        and x.device.type == "cpu"
        and not (torch.is_grad_enabled() and (x.requires_grad or module.weight.requires_grad))
        and not _exporting()
    )


class RowBlockedLinear(nn.Linear):
    """``nn.Linear`` (BLAS) whose CPU inference calls run in fixed blocks of `INVARIANT_ROWS`
    rows (`row_blocked`) when its ``row_blocks`` attribute is set: (..., in_features) →
    (..., out_features), y = x Wᵀ + b, each row's bits independent of its neighbours."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (..., in_features) → (..., out_features)."""
        if not _invariant(self, x):
            return F.linear(x, self.weight, self.bias)
        flat = x.reshape(-1, x.shape[-1])
        key = ("blas", self.in_features, flat.dtype, self.out_features)
        if flat.shape[0] and row_invariance(self._matmul, flat, key):
            y = row_blocked(flat, self._matmul, self.out_features, key)
        else:
            y = blas_row_blocked(flat, self.weight, self.bias)
        return y.reshape(*x.shape[:-1], self.out_features)

    def _matmul(self, rows: torch.Tensor) -> torch.Tensor:
        return F.linear(rows, self.weight, self.bias)


def blas_row_blocked(
    flat: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    """`row_blocked` for BLAS: (M, in) → (M, out), each block of `INVARIANT_ROWS` rows one
    ``addmm`` written into its slice of the output (no concatenation); the last, partial block
    computed zero-padded to the full size. The same products as `row_blocked` of ``F.linear``
    in shape, so each row's bits depend on that row alone."""
    n, rows = flat.shape[0], INVARIANT_ROWS
    wt = weight.t()
    b = bias if bias is not None else flat.new_zeros(weight.shape[0])
    out = flat.new_empty(n, weight.shape[0])
    full = n - n % rows
    for i in range(0, full, rows):
        torch.addmm(b, flat[i : i + rows], wt, out=out[i : i + rows])
    if full < n:
        tail = flat.new_zeros(rows, flat.shape[1])
        tail[: n - full] = flat[full:]
        out[full:] = torch.addmm(b, tail, wt)[: n - full]
    return out


def make_batch_invariant(model: nn.Module, on: bool = True) -> int:
    """Make ``model``'s CPU inference give each sequence the same result, bit for bit, whatever
    else is in its batch (issue 42: a text's vector must not depend on its batch neighbours,
    its batch size or the server's request interleaving), in place:

    - its encoders run every batch packed (`modules.unpad`), even one without padding;
    - packed attention runs one call per sequence on that sequence alone
      (``packed_strategy = "per_sequence"``);
    - every Linear layer (BLAS or oneDNN) multiplies in fixed blocks of `INVARIANT_ROWS` rows
      (`row_blocked`).

    What still changes a result: the thread count (fp32 differs by ≤ 2e-7 between counts) and
    attention kinds that cannot run packed (disentangled, windowed), which keep the padded
    batch. ``on=False`` undoes it.

    Returns:
        The number of Linear layers switched.
    """
    count = 0
    for module in model.modules():
        if hasattr(module, "batch_invariant"):  # an Encoder (not imported: no cycle)
            module.batch_invariant = on
        if hasattr(module, "packed_strategy") and hasattr(module, "supports_unpadded"):
            if on:
                module.packed_strategy = "per_sequence"
            else:
                module.__dict__.pop("packed_strategy", None)
        if type(module) in (nn.Linear, RowBlockedLinear):
            module.__class__ = RowBlockedLinear if on else nn.Linear
        if isinstance(module, nn.Linear) and type(module) in (RowBlockedLinear, OneDnnLinear):
            module.__dict__["row_blocks"] = on
            count += 1
    return count


def _post_op(act: nn.Module) -> tuple[str, str] | None:
    """oneDNN's (post-op, algorithm) for an activation module it computes the same way, or None:
    exact (erf) GELU, tanh GELU, ReLU."""
    if type(act) is nn.GELU:
        return "gelu", act.approximate  # "none" (erf) or "tanh", oneDNN's names too
    if type(act) is nn.ReLU:
        return "relu", ""
    return None


class OneDnnLinear(nn.Linear):
    """``nn.Linear`` whose fp32 and bf16 CPU inference forward runs oneDNN's matrix multiply on
    a pre-packed copy of the weight (`_packed_weight`, rebuilt when the weight changes).

    Input (..., in_features) float32 or bfloat16 (the weight's dtype) → (..., out_features) of
    that dtype, y = x Wᵀ + b as ``nn.Linear``; with autograd on, another dtype or device, or
    while traced or compiled (ONNX export) it is ``F.linear``.
    """

    pack = True  # False: oneDNN on the plain weight (benchmarks compare the two)

    def _fast(self, x: torch.Tensor) -> bool:
        return (
            x.dtype in ONEDNN_DTYPES
            and x.dtype == self.weight.dtype
            and x.device.type == "cpu"
            and not (torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad))
            and not _exporting()
        )

    def _packed_weight(self) -> torch.Tensor:
        """The weight in oneDNN's blocked layout, reordered once and kept beside the parameter
        (not in the state dict); reordered again when the weight is replaced or changed in
        place (its storage, dtype, shape or version counter differ from the kept copy's)."""
        w = self.weight
        key = (w.data_ptr(), w._version, w.dtype, tuple(w.shape))
        kept = self.__dict__.get("_onednn_packed")
        if kept is None or kept[0] != key:
            packed = torch.ops.mkldnn._reorder_linear_weight(w.detach(), PACK_ROWS_HINT)
            # the packed weight's source is kept alive with it: its memory cannot be freed and
            # handed to a replacement weight (``.to()`` there and back), whose equal address
            # and version count would otherwise pass for the old weight's
            kept = self.__dict__["_onednn_packed"] = (key, packed, w.detach())
        return kept[1]

    def __getstate__(self) -> dict:
        """Copies and pickles leave the packed weight behind (it is rebuilt on first use)."""
        state = self.__dict__.copy()
        state.pop("_onednn_packed", None)
        return state

    def _onednn(self, x: torch.Tensor, post_op: str, algorithm: str) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        weight = self._packed_weight() if self.pack and flat.shape[0] > 0 else self.weight

        def matmul(rows: torch.Tensor) -> torch.Tensor:
            return torch.ops.mkldnn._linear_pointwise(
                rows, weight, self.bias, post_op, [], algorithm
            )

        if _invariant(self, x):
            key = ("onednn", self.in_features, weight.dtype, self.out_features, post_op, algorithm)
            y = row_blocked(flat, matmul, self.out_features, key)
        else:
            y = matmul(flat)
        return y.reshape(*x.shape[:-1], self.out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (..., in_features) → (..., out_features)."""
        if self._fast(x):
            return self._onednn(x, "none", "")
        return F.linear(x, self.weight, self.bias)

    def with_activation(self, x: torch.Tensor, act: nn.Module) -> torch.Tensor:
        """``act(self(x))``, as one oneDNN call where ``act`` is a GELU (erf or tanh) or ReLU
        module and the call is an fp32 CPU inference one; otherwise the two steps.

        x (..., in_features) float → (..., out_features) float.
        """
        post = _post_op(act)
        if post is not None and self._fast(x):
            return self._onednn(x, *post)
        return act(self(x))


def use_kernel(model: nn.Module, kernel: str) -> int:
    """Run ``model``'s plain ``nn.Linear`` layers with ``kernel`` ("onednn": as `OneDnnLinear`;
    "blas": back to ``nn.Linear``), in place (the class of each module changes, its parameters
    do not). Subclasses of ``nn.Linear`` other than these two (int8, LoRA, …) are left alone.
    Every packed weight is dropped, to be packed again on first use: call it again after
    editing weights through ``.data`` (the one in-place change the packed copy cannot see; a
    ``load_state_dict`` or an in-place op under ``torch.no_grad`` is seen by itself).

    Returns:
        The number of layers switched.
    """
    count = 0
    for module in model.modules():
        module.__dict__.pop("_onednn_packed", None)  # packed again from the weight as it is now
        blocked = type(module) is RowBlockedLinear or module.__dict__.get("row_blocks", False)
        target = (
            OneDnnLinear if kernel == "onednn" else (RowBlockedLinear if blocked else nn.Linear)
        )
        if (
            type(module) in (nn.Linear, OneDnnLinear, RowBlockedLinear)
            and type(module) is not target
        ):
            module.__class__ = target
            count += 1
    return count


def apply_linear_kernel(
    model: nn.Module, kernel: str, dtype: torch.dtype, device: torch.device
) -> tuple[str | None, str]:
    """Give an inference ``model`` (parameters in ``dtype`` on ``device``) the Linear kernel
    ``kernel`` resolves to (`resolve_linear_kernel`) where one applies: on the CPU, for fp32
    and bf16 (`use_kernel`); elsewhere the model is left as it is.

    Returns:
        (the kernel now in use, or None where none applies; the reason).

    Raises:
        InputError: an unknown ``kernel`` (on every device), or "onednn" without oneDNN.
    """
    chosen, reason = resolve_linear_kernel(kernel, dtype)
    if torch.device(device).type != "cpu" or dtype not in ONEDNN_DTYPES:
        return None, f"none ({dtype} on {device})"
    use_kernel(model, chosen)
    return chosen, reason
