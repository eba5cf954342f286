"""The exported graph run by OpenVINO: the `runtime="openvino"` of `SentenceEmbedder`.

On an Intel CPU OpenVINO's CPU plugin fuses the encoder's attention, LayerNorm and GELU and, on
a CPU with AMX-BF16 tiles, runs bf16 by default; on the 2-core Xeon of
``benchmarks/results/embed.json`` it embedded MiniLM 2.0× faster than our torch bf16 and 2.7×
our fp32, at min cosine 0.99996 to fp32 and the same STS-B Spearman. The graph is our own ONNX
export (`convert.onnx.export_onnx`), converted by ``openvino.convert_model`` and compiled with
dynamic batch and sequence axes; tokenisation, batching and pooling stay `SentenceEmbedder`'s.

Needs the optional package ``openvino`` (``pip install "bertfamily[openvino]"``).
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from ..errors import InputError
from ..runtime import require
from .onnx import _Hidden  # the encoder output both exported-graph runtimes return

__all__ = [
    "INT8_STEPS",
    "OPENVINO_PRECISIONS",
    "OpenVinoModel",
    "inference_threads",
    "openvino_precision",
    "quantize_openvino_ir",
    "save_openvino_ir",
]

# --dtype → OpenVINO's INFERENCE_PRECISION_HINT ("auto" is fp32, the faithful default, as on the
# torch runtime; "fastest" and None: the CPU plugin's default, bf16 where the CPU has AMX-BF16
# or AVX512-BF16, else f32)
OPENVINO_PRECISIONS = {"auto": "f32", "fastest": None, "fp32": "f32", "bf16": "bf16"}


def openvino_precision(dtype: str | torch.dtype | None) -> str | None:
    """The precision hint for a ``dtype`` request ("auto" and None: f32; "fastest": OpenVINO's
    default).

    Raises:
        InputError: a dtype OpenVINO is not asked to run (fp16 and others).
    """
    if dtype is None:
        return "f32"
    if isinstance(dtype, torch.dtype):
        dtype = {torch.float32: "fp32", torch.bfloat16: "bf16"}.get(dtype, str(dtype))
    if dtype not in OPENVINO_PRECISIONS:
        raise InputError(
            f"the OpenVINO runtime takes dtype {sorted(OPENVINO_PRECISIONS)}, got {dtype!r}"
        )
    return OPENVINO_PRECISIONS[dtype]


def save_openvino_ir(model, xml: str | Path) -> Path:
    """Export ``model`` (`convert.onnx.export_onnx`) and save it as an OpenVINO IR: ``xml``
    (the graph) and the ``.bin`` beside it (the weights, kept float32: OpenVINO's default
    compression of weights to fp16 is turned off, so the IR computes what the ONNX graph does).

    Returns:
        ``xml`` as a Path.

    Raises:
        MissingDependency: openvino (or onnx, for the export) is not installed.
    """
    ov = require("openvino", "openvino", "the OpenVINO runtime")
    from .onnx import export_onnx

    xml = Path(xml)
    with tempfile.TemporaryDirectory() as tmp:
        graph = ov.convert_model(str(export_onnx(model, Path(tmp) / "model.onnx")))
    ov.save_model(graph, str(xml), compress_to_fp16=False)
    return xml


# int8 by NNCF post-training quantisation, tried in this order until the graph keeps the
# accuracy bar: the matrix products left in float are named by patterns on our export's node
# names (every family's feed-forward is `ffn.up` → `ffn.down`). On all-MiniLM-L6-v2, 200
# held-out Austen lines: every MatMul int8 min cosine 0.980, top-10 overlap 0.922 (misses the
# bar); without the feed-forward output 0.996 / 0.954; without the feed-forward 0.998 / 0.974.
INT8_STEPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("every matrix product", ()),
    ("every matrix product but the feed-forward output", (r".*/ffn/down/MatMul",)),
    ("the attention products (the feed-forward in float)", (r".*/ffn/.*/MatMul",)),
)


def quantize_openvino_ir(
    xml: str | Path,
    out: str | Path,
    batches: list[dict[str, np.ndarray]],
    keep: tuple[str, ...] = (),
) -> Path:
    """int8 of an IR by NNCF's post-training quantisation (``nncf.quantize``,
    ``ModelType.TRANSFORMER``: int8 weights per output channel and int8 activations with scales
    from ``batches``; Softmax, LayerNorm and GELU stay in float), saved at ``out``.

    Args:
        xml: the fp32 IR (`save_openvino_ir`).
        out: where to save the int8 IR (``.xml``, its ``.bin`` beside it).
        batches: calibration inputs, each {"input_ids", "attention_mask"[, "token_type_ids"]}
            → (B, T) int64 arrays.
        keep: regular expressions of node names left in float (NNCF ``IgnoredScope``).

    Returns:
        ``out`` as a Path.

    Raises:
        MissingDependency: openvino or nncf is not installed.
    """
    ov = require("openvino", "openvino", "the OpenVINO runtime")
    nncf = require("nncf", "openvino", "OpenVINO int8")
    import logging

    nncf.set_log_level(logging.ERROR)
    graph = ov.Core().read_model(str(xml))
    names = {i.get_any_name() for i in graph.inputs}
    data = [{k: v for k, v in b.items() if k in names} for b in batches]
    ignored = nncf.IgnoredScope(patterns=list(keep), validate=False) if keep else None
    # NNCF draws its progress bars on stdout, which carries a command's output (--format jsonl)
    with contextlib.redirect_stdout(sys.stderr):
        quantized = nncf.quantize(
            graph,
            nncf.Dataset(data),
            model_type=nncf.ModelType.TRANSFORMER,
            subset_size=len(data),
            ignored_scope=ignored,
        )
    out = Path(out)
    ov.save_model(quantized, str(out), compress_to_fp16=False)
    return out


def inference_threads() -> int:
    """The threads to compile a graph with: a command's thread governor's most when one is
    active (`runtime.AdaptiveThreads`: a compiled graph cannot follow it, and compiling with
    the count of a busy moment would keep a long run or a server on it for good; OpenVINO's
    own scheduler shares the cores out), else torch's count."""
    from ..runtime import active_governor

    governor = active_governor()
    return governor.max_threads if governor is not None else torch.get_num_threads()


class _OpenVinoEncoder:
    def __init__(self, compiled) -> None:
        self.request = compiled.create_infer_request()
        self.inputs = {i.get_any_name() for i in compiled.inputs}
        self.output = compiled.output("last_hidden_state")

    def __call__(self, **batch: torch.Tensor) -> _Hidden:
        feed = {k: v.cpu().numpy() for k, v in batch.items() if k in self.inputs}
        hidden = np.array(self.request.infer(feed)[self.output], dtype=np.float32)  # a copy
        return _Hidden(torch.from_numpy(hidden))


class OpenVinoModel:
    """Stands for a `Model` in a pipeline that only calls ``model.encoder`` (`SentenceEmbedder`):
    ``encoder(input_ids=…, attention_mask=…[, token_type_ids=…])`` ((B, T) int64) → an object
    with ``last_hidden_state`` (B, T, H) float32.

    Args:
        model: the fp32 `Model` to export (left unchanged); its ``config`` is kept.
        threads: OpenVINO inference threads (``INFERENCE_NUM_THREADS``; 0: its default).
        precision: ``INFERENCE_PRECISION_HINT`` ("f32", "bf16"), or None for the CPU plugin's
            default.
        ir: an OpenVINO IR ``.xml`` saved from this model by `save_openvino_ir`, compiled
            instead of exporting again (the caller vouches that it is this model's).

    Attributes:
        precision: the precision OpenVINO compiled for ("f32" or "bf16").
        threads: the inference threads it compiled for.
        quantized: for an int8 graph, which products are int8 (a step of `INT8_STEPS`, set by
            `pipelines.precision.openvino_int8` or read from its cache); None otherwise.
        held_out: for an int8 graph, its `Agreement` with torch fp32 on each kind of the
            accuracy gate's held-out text (`inference.agreement.measure_gate`); None otherwise.

    Raises:
        MissingDependency: openvino (or onnx, for the export) is not installed.
    """

    def __init__(
        self, model, threads: int = 0, precision: str | None = None, ir: str | Path | None = None
    ) -> None:
        ov = require("openvino", "openvino", "the OpenVINO runtime")
        core = ov.Core()
        if ir is not None:
            graph = core.read_model(str(ir))
        else:
            from .onnx import export_onnx

            with tempfile.TemporaryDirectory() as tmp:
                graph = ov.convert_model(str(export_onnx(model, Path(tmp) / "model.onnx")))
        config: dict = {}
        if threads:
            config["INFERENCE_NUM_THREADS"] = threads
        if precision is not None:
            config["INFERENCE_PRECISION_HINT"] = precision
        compiled = core.compile_model(graph, "CPU", config)
        self.precision = compiled.get_property("INFERENCE_PRECISION_HINT").to_string()
        self.threads = int(compiled.get_property("INFERENCE_NUM_THREADS"))
        self.quantized: str | None = None
        self.held_out: dict | None = None
        self.config = model.config
        self.encoder = _OpenVinoEncoder(compiled)

    def parameters(self):
        """No torch parameters (the weights live in the compiled graph)."""
        return iter(())
