"""int8 dynamic quantisation that keeps its accuracy.

int8 here is dynamic quantisation of ``nn.Linear`` layers (Jacob et al. 2018, "Quantization and
Training of Neural Networks for Efficient Integer-Arithmetic-Only Inference", §2.1: r = S(q − Z)):
weights int8 with one symmetric scale per output channel, activations uint8 with one scale per
call, computed at run time. Each layer's error is measured alone on calibration sentences
(`layer_errors`); layers are quantised from the least to the most damaging while the embeddings
still meet the accuracy bar (`AccuracyBar`: minimum cosine to fp32 and top-k search overlap);
the rest stay fp32 (`plan_int8`).
"""

from __future__ import annotations

import copy
import dataclasses
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from ..errors import QuantizationError
from .agreement import AccuracyBar, Agreement, _check_number, _unit, agreement, worst

__all__ = [
    "PLAN_MARGIN",
    "Int8Plan",
    "apply_int8",
    "layer_errors",
    "linear_layers",
    "plan_int8",
    "plan_steps",
]


def linear_layers(model: nn.Module) -> list[str]:
    """Names of the encoder's ``nn.Linear`` layers that an embedding forward pass runs (the
    layer stack; not the pooler or pretraining heads), in order."""
    return [
        n
        for n, m in model.named_modules()
        if isinstance(m, nn.Linear) and n.startswith("encoder.layers.")
    ]


def apply_int8(model: nn.Module, names: Sequence[str], per_channel: bool = True) -> nn.Module:
    """A copy of ``model`` whose Linear layers ``names`` are dynamically quantised to int8
    (`torch.ao.quantization.quantize_dynamic`: int8 weights, uint8 activations scaled per call).

    Args:
        model: an fp32 model on the CPU.
        names: module names of ``nn.Linear`` layers (see `linear_layers`).
        per_channel: one weight scale per output channel (else one per tensor).

    Raises:
        QuantizationError: a name that is not a Linear layer of ``model``, or a non-fp32 model.
    """
    modules = dict(model.named_modules())
    bad = [n for n in names if not isinstance(modules.get(n), nn.Linear)]
    if bad:
        raise QuantizationError(f"not Linear layers of this model: {bad}")
    if any(p.dtype != torch.float32 or p.device.type != "cpu" for p in model.parameters()):
        raise QuantizationError("int8 quantisation needs an fp32 model on the CPU")
    from torch.ao.quantization import (
        default_dynamic_qconfig,
        per_channel_dynamic_qconfig,
        quantize_dynamic,
    )

    from ..modules.kernels import RowBlockedLinear, use_kernel

    qconfig = per_channel_dynamic_qconfig if per_channel else default_dynamic_qconfig
    copied = copy.deepcopy(model)
    onednn = use_kernel(copied, "blas")  # torch.ao maps nn.Linear itself, not the subclass
    layers = dict(copied.named_modules())
    for name in names:  # a batch-invariant (row-blocked) layer too: int8 scales per call anyway
        if type(layers[name]) is RowBlockedLinear:
            layers[name].__class__ = nn.Linear
            layers[name].__dict__.pop("row_blocks", None)
    with warnings.catch_warnings():  # torch.ao's deprecation notice, once per layer
        warnings.simplefilter("ignore")
        quantized = quantize_dynamic(copied, {n: qconfig for n in names}, torch.qint8)
    if onednn:  # the layers kept fp32 run on the kernel they had
        use_kernel(quantized, "onednn")
    return quantized


@dataclass(frozen=True)
class Int8Plan:
    """Which Linear layers run int8, which stay fp32, and the evidence.

    ``layer_errors``: name → (min cosine, mean cosine) of the calibration embeddings with that
    layer alone quantised; ``agreement``: the whole plan's agreement with fp32 on calibration;
    ``held_out``: its agreement on each kind of the accuracy gate's held-out text
    (`agreement.gate_texts`; empty when the plan was measured on a caller's calibration only).
    """

    quantized: tuple[str, ...]
    kept: tuple[str, ...]
    layer_errors: dict[str, tuple[float, float]] = field(repr=False)
    agreement: Agreement
    bar: AccuracyBar
    held_out: dict[str, Agreement] = field(default_factory=dict)

    def summary(self) -> str:
        """One line for a log or stderr."""
        n = len(self.quantized) + len(self.kept)
        a = self.agreement
        held = ""
        if self.held_out:
            kind = min(self.held_out, key=lambda k: self.held_out[k].min_cosine)
            w = worst(self.held_out)
            held = (
                f"; held-out ({', '.join(self.held_out)}) worst min cosine {w.min_cosine:.4f} "
                f"({kind}), top-{w.k} overlap {w.top_k_overlap:.3f}"
            )
        return (
            f"int8: {len(self.quantized)} of {n} Linear layers quantised (per-channel dynamic), "
            f"{len(self.kept)} kept fp32; calibration min cosine {a.min_cosine:.4f}, "
            f"top-{a.k} overlap {a.top_k_overlap:.3f}{held} (bar {self.bar.min_cosine}, "
            f"{self.bar.min_overlap})"
        )

    def to_record(self) -> dict:
        """The plan as JSON data (`from_record` reads it back)."""
        return {
            "quantized": list(self.quantized),
            "kept": list(self.kept),
            "layer_errors": {k: list(v) for k, v in self.layer_errors.items()},
            "agreement": dataclasses.asdict(self.agreement),
            "bar": dataclasses.asdict(self.bar),
            "held_out": {k: dataclasses.asdict(v) for k, v in self.held_out.items()},
        }

    @classmethod
    def from_record(cls, data: Mapping, layers: Sequence[str] | None = None) -> Int8Plan:
        """A plan read back from a cache record, its claims checked against each other and
        against the model: every layer named once, quantised or kept; exactly the model's
        ``layers`` (`linear_layers`) when given; at least one layer quantised, and the
        quantised ones the least damaging by their recorded errors (what `plan_int8` picks);
        every number in range; and the recorded agreement, and every held-out kind's, meeting
        the recorded bar.

        Raises:
            ValueError / TypeError / KeyError: a claim that does not hold (the caller measures
                the plan again).
        """
        quantized, kept = tuple(data["quantized"]), tuple(data["kept"])
        names = quantized + kept
        if not all(isinstance(n, str) for n in names) or len(set(names)) != len(names):
            raise ValueError("the plan names a layer twice, or a layer that is not a name")
        errors = {}
        for name, pair in data["layer_errors"].items():
            low, mean = pair
            _check_number(f"the min cosine of {name}", low, -1.0, 1.0 + 1e-6)
            _check_number(f"the mean cosine of {name}", mean, -1.0, 1.0 + 1e-6)
            errors[name] = (low, mean)
        if set(errors) != set(names):
            raise ValueError("the measured layers are not the planned ones")
        if layers is not None and set(names) != set(layers):
            raise ValueError(
                f"the plan's {len(names)} layers are not this model's {len(layers)} Linear layers"
            )
        if not quantized:
            raise ValueError("the plan quantises no layer")
        if kept and min(errors[n][1] for n in quantized) < max(errors[n][1] for n in kept):
            raise ValueError("a kept layer is less damaging than a quantised one")
        plan = cls(
            quantized,
            kept,
            errors,
            Agreement.from_record(data["agreement"]),
            AccuracyBar.from_record(data["bar"]),
            {str(k): Agreement.from_record(v) for k, v in data.get("held_out", {}).items()},
        )
        if not plan.agreement.meets(plan.bar):
            raise ValueError(f"its agreement {plan.agreement} misses its bar {plan.bar}")
        if plan.held_out and not worst(plan.held_out).meets(plan.bar):
            raise ValueError(f"its held-out agreement {plan.held_out} misses its bar {plan.bar}")
        return plan


def layer_errors(
    embedder, texts: Sequence[str], ref: np.ndarray, step: Callable[[], None] | None = None
) -> dict[str, tuple[float, float]]:
    """Each encoder Linear layer's damage alone: the (min, mean) cosine of ``texts``' vectors
    with only that layer quantised (per-channel int8) to the fp32 vectors ``ref`` (N, D).
    ``step``: called after each layer (a progress bar's ``advance``)."""
    fp32 = embedder.model
    out = {}
    try:
        for name in linear_layers(fp32):
            embedder.model = apply_int8(fp32, [name])
            cos = (_unit(ref) * _unit(embedder.encode(texts))).sum(1)
            out[name] = (float(cos.min()), float(cos.mean()))
            if step is not None:
                step()
    finally:
        embedder.model = fp32
    return out


PLAN_MARGIN = (0.002, 0.02)  # (cosine, overlap) the plan keeps above the bar on calibration


def plan_steps(layers: int) -> int:
    """The most measurements `plan_int8` makes on a model of ``layers`` Linear layers: one
    per layer, then the binary search's (and one more when it fails)."""
    return layers + max(1, layers).bit_length() + 1


def plan_int8(
    embedder,
    texts: Sequence[str],
    queries: Sequence[str],
    bar: AccuracyBar = AccuracyBar(),
    margin: tuple[float, float] = PLAN_MARGIN,
    step: Callable[[], None] | None = None,
) -> Int8Plan:
    """Choose the Linear layers to quantise: measure each alone (`layer_errors`), order them
    from least to most damaging (mean cosine), and keep the longest prefix whose quantised model
    meets ``bar`` raised by ``margin`` on ``texts``/``queries`` (binary search over the prefix
    length). The margin is there because the plan must hold on text it was not chosen on: with
    none, a plan at exactly 0.953 calibration overlap gave 0.943 on held-out Austen lines.

    Args:
        embedder: a `SentenceEmbedder` with an fp32 model on the CPU (left unchanged).
        texts: calibration sentences; queries: calibration queries searched among them.
        bar: the accuracy to keep.
        margin: (cosine, overlap) added to the bar during the search (capped at 1).
        step: called after each measurement (one per layer, then one per search step: at most
            `plan_steps` in all), for a progress bar.

    Raises:
        QuantizationError: no texts or queries; not even the least damaging layer meets the bar.
    """
    if not texts or not queries:
        raise QuantizationError("int8 calibration needs sentences and queries")
    fp32 = embedder.model
    ref, ref_q = embedder.encode(texts), embedder.encode(queries)
    errors = layer_errors(embedder, texts, ref, step)
    order = sorted(errors, key=lambda n: -errors[n][1])
    search = AccuracyBar(
        min(1.0, bar.min_cosine + margin[0]), min(1.0, bar.min_overlap + margin[1]), bar.k
    )

    def check(n: int) -> Agreement:
        embedder.model = apply_int8(fp32, order[:n])
        try:
            return agreement(ref, embedder.encode(texts), ref_q, embedder.encode(queries), bar.k)
        finally:
            embedder.model = fp32
            if step is not None:
                step()

    lo, hi, best = 0, len(order), None  # invariant: prefix lo meets the bar
    while lo < hi:
        mid = (lo + hi + 1) // 2
        a = check(mid)
        if a.meets(search):
            lo, best = mid, a
        else:
            hi = mid - 1
    if lo == 0:
        a = check(1)
        raise QuantizationError(
            f"int8 cannot meet the accuracy bar on this model: quantising only its least "
            f"damaging layer ({order[0]}) gives min cosine {a.min_cosine:.4f}, top-{a.k} overlap "
            f"{a.top_k_overlap:.3f} (bar {search.min_cosine}, {search.min_overlap} with the "
            f"calibration margin); run it in fp32"
        )
    return Int8Plan(tuple(order[:lo]), tuple(order[lo:]), errors, best, bar)
