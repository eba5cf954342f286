"""The run precision, one import away: every name of the engine's precision modules, where
``bertfamily.inference.precision`` (and the old ``bertfamily.pipelines.precision``) users find
them.

- `inference.dtype`: the dtype policy (fp32 by default; bf16 as ``"bf16"`` or ``"fastest"``);
- `inference.agreement`: the accuracy bar, how agreement with fp32 is measured, the
  calibration text, the accuracy gate on several kinds of held-out text;
- `inference.int8`: int8 dynamic quantisation and its per-layer plan;
- `inference.int8_graphs`: the int8 graphs of ONNX Runtime and OpenVINO;
- `inference.caches`: the verified caches of plans and graphs (`VerifiedEntry`).

Patch a function where it is looked up (``inference.caches.plan_int8``, not this module's
name for it).
"""

from __future__ import annotations

from ..errors import QuantizationError
from ..train.mixed_precision import cpu_bf16_units, cpu_int8_units
from .agreement import (
    CALIBRATION_VERSION,
    GATE_KINDS,
    AccuracyBar,
    Agreement,
    agreement,
    austen_calibration,
    gate_failure,
    gate_texts,
    gate_version,
    measure_gate,
    require_gate,
    swapped_agreement,
    worst,
)
from .caches import (
    INT8_ONNX_CACHE,
    OPENVINO_CACHE,
    PLAN_CACHE,
    VerifiedEntry,
    cached_int8,
    cached_int8_plan,
    cached_openvino,
    int8_cache_key,
    int8_plan_key,
    openvino_cache_key,
)
from .dtype import DTYPE_NAMES, fastest_dtype, resolve_dtype
from .int8 import (
    PLAN_MARGIN,
    Int8Plan,
    apply_int8,
    layer_errors,
    linear_layers,
    plan_int8,
    plan_steps,
)
from .int8_graphs import int8_onnx_model, openvino_int8

__all__ = [
    "CALIBRATION_VERSION",
    "DTYPE_NAMES",
    "GATE_KINDS",
    "INT8_ONNX_CACHE",
    "OPENVINO_CACHE",
    "PLAN_CACHE",
    "PLAN_MARGIN",
    "AccuracyBar",
    "Agreement",
    "Int8Plan",
    "QuantizationError",
    "VerifiedEntry",
    "agreement",
    "apply_int8",
    "austen_calibration",
    "cached_int8",
    "cached_int8_plan",
    "cached_openvino",
    "cpu_bf16_units",
    "cpu_int8_units",
    "fastest_dtype",
    "gate_failure",
    "gate_texts",
    "gate_version",
    "int8_cache_key",
    "int8_onnx_model",
    "int8_plan_key",
    "layer_errors",
    "linear_layers",
    "measure_gate",
    "openvino_cache_key",
    "openvino_int8",
    "plan_int8",
    "plan_steps",
    "require_gate",
    "resolve_dtype",
    "swapped_agreement",
    "worst",
]
