"""The int8 graphs of the other runtimes, each checked against the accuracy bar before use:
ONNX Runtime's graph of an `Int8Plan` (`int8_onnx_model`: what ``export --quantize int8``
writes) and OpenVINO's NNCF-quantised graph (`openvino_int8`)."""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from ..errors import QuantizationError
from .agreement import AccuracyBar, measure_gate, swapped_agreement, worst
from .int8 import Int8Plan

__all__ = ["int8_onnx_model", "openvino_int8"]

log = logging.getLogger(__name__)


def int8_onnx_model(embedder, plan: Int8Plan, texts, queries, path: str | Path | None = None):
    """The plan run by ONNX Runtime (the engine chosen when it measured faster on a loaded
    machine; on the idle re-run of benchmarks/embed.py torch's dynamic int8 of the same plan
    was faster, see benchmarks/results/embed.json): ``embedder``'s fp32 model exported
    (`convert.onnx.export_onnx`), its planned layers quantised by ONNX Runtime's quantiser
    (`convert.onnx.quantize_onnx_int8`), and the graph checked against ``plan.bar`` on
    ``texts``/``queries`` through ``embedder``'s own tokenisation and pooling.

    Args:
        embedder: a `SentenceEmbedder` with the fp32 model (left unchanged).
        plan: from `plan_int8`.
        path: where to keep the int8 graph (None: a temporary file, removed once loaded).

    Returns:
        (`convert.onnx.OnnxRuntimeModel`, its `Agreement` with fp32 on the calibration text).

    Raises:
        QuantizationError: the graph misses the bar (nothing kept at ``path``).
        MissingDependency: onnx / onnxruntime are not installed.
    """
    import tempfile

    from ..convert.onnx import OnnxRuntimeModel, export_onnx, quantize_onnx_int8

    with tempfile.TemporaryDirectory() as tmp:
        export_onnx(embedder.model, Path(tmp) / "fp32.onnx")
        graph = quantize_onnx_int8(
            Path(tmp) / "fp32.onnx", Path(tmp) / "int8.onnx", list(plan.quantized)
        )
        model = OnnxRuntimeModel(graph, torch.get_num_threads())
        got = swapped_agreement(embedder, model, texts, queries, plan.bar.k)
        if not got.meets(plan.bar):
            raise QuantizationError(
                f"the int8 ONNX Runtime graph misses the accuracy bar on calibration text: min "
                f"cosine {got.min_cosine:.4f}, top-{got.k} overlap {got.top_k_overlap:.3f} (bar "
                f"{plan.bar.min_cosine}, {plan.bar.min_overlap}); run it in fp32"
            )
        if path is not None:
            from ..files import atomic_write

            data = graph.read_bytes()
            atomic_write(Path(path), lambda t: t.write_bytes(data))
    return model, got


def openvino_int8(
    embedder,
    xml: Path,
    out: Path,
    calibration,
    check,
    bar: AccuracyBar,
    precision: str | None,
    step=None,
):
    """The int8 OpenVINO graph of ``embedder``'s fp32 IR ``xml`` that keeps ``bar``: NNCF
    post-training quantisation calibrated on ``calibration`` ((sentences, queries), tokenised
    by ``embedder``, batches of 32), each step of `convert.openvino.INT8_STEPS` in turn (fewer
    products in int8 at each) until the graph's agreement with torch fp32 on every kind of
    ``check`` (kind → (sentences, queries), text disjoint from the calibration:
    `agreement.gate_texts`) meets ``bar`` (`agreement.measure_gate`, the worst kind decides).
    ``precision``: OpenVINO's precision hint for what stays in float (None: its default).
    ``step``: called after each quantisation and each kind measured (a progress bar's
    ``advance``; at most ``len(INT8_STEPS) * (1 + len(check))`` calls).

    Returns:
        (`OpenVinoModel` of the graph saved at ``out``, its ``quantized`` the step's
        description and its ``held_out`` the agreement per kind; the worst of those
        `Agreement` s, `agreement.worst`), or the last step's when none meets the bar (the
        caller refuses it, naming the kind: `agreement.gate_failure`).

    Raises:
        MissingDependency: openvino or nncf is not installed.
    """
    import numpy as np

    from ..convert.openvino import (
        INT8_STEPS,
        OpenVinoModel,
        inference_threads,
        quantize_openvino_ir,
    )

    texts = list(calibration[0]) + list(calibration[1])
    rows = embedder.tokenize(texts).rows
    batches = []
    for i in range(0, len(texts), 32):
        chunk = {k: v[i : i + 32] for k, v in rows.items()}
        padded = embedder.tokenizer.pad_rows(chunk, max(len(r) for r in chunk["input_ids"]))
        batches.append({k: np.asarray(v, dtype=np.int64) for k, v in padded.items()})
    threads = inference_threads()
    for products, keep in INT8_STEPS:
        quantize_openvino_ir(xml, out, batches, keep)
        if step is not None:
            step()
        model = OpenVinoModel(embedder.model, threads, precision, ir=out)
        per_kind = measure_gate(embedder, model, bar.k, check, step)
        got = worst(per_kind)
        log.info("OpenVINO int8, %s: %s", products, per_kind)
        if got.meets(bar):
            break
    model.quantized, model.held_out = products, per_kind
    return model, got
