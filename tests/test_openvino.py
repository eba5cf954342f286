"""The OpenVINO runtime of `SentenceEmbedder` (`runtime="openvino"`, `embed --runtime`): the
real MiniLM's vectors against torch fp32 and sentence-transformers, the accuracy gate, the
refusals. Skipped without the optional ``openvino`` package (not in the test extra: 180 MB;
run with `pip install -e ".[test,openvino]"`)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bertfamily.errors import InputError, QuantizationError

pytest.importorskip("openvino")

TEXTS = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "Un homme mange du pain.",
]


@pytest.fixture(scope="module")
def reference(minilm_dir):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(minilm_dir), device="cpu").encode(
        TEXTS, normalize_embeddings=True
    )


def test_fp32_graph_equals_sentence_transformers(minilm_dir, reference):
    from bertfamily.pipelines.embed import SentenceEmbedder

    embedder = SentenceEmbedder(minilm_dir, runtime="openvino", dtype="fp32")
    assert embedder.dtype_reason.startswith("OpenVINO f32")
    assert embedder.runtime_check.min_cosine > 0.9999
    np.testing.assert_allclose(embedder.encode(TEXTS), reference, atol=1e-5)


def test_default_precision_keeps_the_bar(minilm_dir, reference):
    from bertfamily.pipelines.embed import SentenceEmbedder

    embedder = SentenceEmbedder(minilm_dir, runtime="openvino")  # bf16 where the CPU has it
    assert embedder.runtime_check.min_cosine >= 0.99
    assert embedder.runtime_check.top_k_overlap >= 0.95
    cosines = (embedder.encode(TEXTS) * reference).sum(1)
    assert cosines.min() > 0.999, cosines


def test_a_graph_that_misses_the_bar_is_refused(minilm_dir):
    from bertfamily.pipelines.embed import SentenceEmbedder
    from bertfamily.pipelines.precision import AccuracyBar

    impossible = AccuracyBar(min_cosine=1.01)
    with pytest.raises(QuantizationError, match="OpenVINO .* misses the accuracy bar"):
        SentenceEmbedder(
            minilm_dir, runtime="openvino", bar=impossible, calibration=(TEXTS, TEXTS[:2])
        )


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(runtime="onnx"), "runtime must be 'torch' or 'openvino'"),
        (dict(runtime="openvino", dtype="fp16"), "OpenVINO runtime takes dtype"),
        (dict(runtime="openvino", quantize="int8"), "on the CPU, without quantize"),
    ],
)
def test_refusals(minilm_dir, kwargs, words):
    from bertfamily.pipelines.embed import SentenceEmbedder

    with pytest.raises(InputError, match=words):
        SentenceEmbedder(minilm_dir, **kwargs)


def test_cli_embed_runtime_openvino(cli, minilm_dir, reference):
    result = cli("embed", *TEXTS, "--runtime", "openvino", "--dtype", "fp32", "--format", "jsonl")
    assert result.exit_code == 0, result.output
    vectors = np.array([json.loads(line)["embedding"] for line in result.stdout.splitlines()])
    np.testing.assert_allclose(vectors, reference, atol=1e-5)
    assert "runtime: OpenVINO f32" in result.stderr
