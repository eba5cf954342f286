"""The run precision: ``dtype="auto"`` picks bf16 only with bf16 matrix units, and int8 keeps the
accuracy bar (min cosine 0.99, top-10 overlap 0.95) on real MiniLM and real Austen text, where
naive per-tensor int8 of every layer does not."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

from bertfamily.convert.onnx import OnnxRuntimeModel, onnx_node_name
from bertfamily.inference.precision import (
    AccuracyBar,
    QuantizationError,
    agreement,
    apply_int8,
    cpu_bf16_units,
    cpu_int8_units,
    int8_onnx_model,
    linear_layers,
    plan_int8,
    resolve_dtype,
)
from bertfamily.pipelines.embedding.embed import SentenceEmbedder

AMX = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"
AVX512_BF16 = "flags\t\t: fpu avx2 avx512f avx512_bf16\n"
AVX2 = "flags\t\t: fpu fma avx avx2\n"


def test_cpu_bf16_units_read_from_cpuinfo():
    assert cpu_bf16_units(AMX) == ["amx_bf16", "avx512_bf16"]
    assert cpu_bf16_units(AVX512_BF16) == ["avx512_bf16"]
    assert cpu_bf16_units(AVX2) == []


def test_cpu_int8_units_read_from_cpuinfo():
    assert cpu_int8_units("flags\t\t: fpu avx2 avx512f avx512_vnni amx_int8\n") == [
        "amx_int8",
        "avx512_vnni",
    ]
    assert cpu_int8_units("flags\t\t: fpu avx2 avx_vnni\n") == ["avx_vnni"]
    assert cpu_int8_units(AVX2) == [] and cpu_int8_units("no flags here") == []


def test_auto_is_fp32_on_every_cpu_and_fastest_picks_bf16_only_with_bf16_units():
    for cpu in (AMX, AVX512_BF16, AVX2):  # the faithful default, whatever the CPU (issue 42)
        dtype, reason = resolve_dtype("auto", "cpu", cpu)
        assert dtype == torch.float32 and reason.startswith("fp32 (auto: the faithful default")
    dtype, reason = resolve_dtype("fastest", "cpu", AMX)
    assert dtype == torch.bfloat16 and "AMX-BF16" in reason
    dtype, reason = resolve_dtype("fastest", "cpu", AVX512_BF16)  # Zen 4: measured 1.64x fp32
    assert dtype == torch.bfloat16 and "AVX512-BF16" in reason
    dtype, reason = resolve_dtype("fastest", "cpu", AVX2)
    assert dtype == torch.float32 and "no bf16 matrix units" in reason
    # an explicit choice is obeyed whatever the CPU
    assert resolve_dtype("bf16", "cpu", AVX2)[0] == torch.bfloat16
    assert resolve_dtype(torch.float32)[0] == torch.float32
    assert resolve_dtype(None)[0] == torch.float32
    with pytest.raises(ValueError, match="auto, fastest or one of"):
        resolve_dtype("fp8")


def test_agreement_measures_cosine_and_overlap():
    rng = np.random.default_rng(0)
    ref, q = rng.normal(size=(30, 8)), rng.normal(size=(5, 8))
    same = agreement(ref, ref.copy(), q, q.copy(), k=10)
    assert same.min_cosine == pytest.approx(1.0) and same.top_k_overlap == 1.0
    flipped = ref.copy()
    flipped[0] *= -1  # one row opposite: cosine -1
    a = agreement(ref, flipped, q, q, k=10)
    assert a.min_cosine == pytest.approx(-1.0)
    assert not a.meets(AccuracyBar())
    shuffled = agreement(ref, rng.normal(size=(30, 8)), q, q, k=10)
    assert shuffled.top_k_overlap < 0.8
    with pytest.raises(ValueError, match="shapes differ"):
        agreement(ref, ref[:3], q, q)


def test_onnx_node_names_follow_the_exporter():
    assert onnx_node_name("encoder.layers.0.ffn.up") == "/model/encoder/layers.0/ffn/up/MatMul"
    assert (
        onnx_node_name("encoder.layers.11.attention.qkv")
        == "/model/encoder/layers.11/attention/qkv/MatMul"
    )


@pytest.fixture(scope="module")
def austen_slice():
    """16 real sentences (3–24 words) and 8 short queries from the fetched Austen text."""
    from bertfamily.resources.cache import fetch

    lines = (fetch("janeausten") / "austen.txt").read_text(encoding="utf-8").splitlines()
    lines = [x.strip() for x in lines if 3 <= len(x.split()) <= 24 and not x.isupper()]
    short = [x for x in lines if 4 <= len(x.split()) <= 10]
    return lines[11 :: len(lines) // 16][:16], short[13 :: len(short) // 8][:8]


@pytest.mark.slow
def test_int8_meets_the_bar_where_naive_int8_fails(minilm_dir, austen_slice, caplog):
    texts, queries = austen_slice
    emb = SentenceEmbedder(minilm_dir, dtype="fp32")
    fp32 = emb.model
    ref, ref_q = emb.encode(texts), emb.encode(queries)
    bar = AccuracyBar()

    # the naive quantisation (every Linear, one scale per tensor) misses the bar
    emb.model = apply_int8(fp32, linear_layers(fp32), per_channel=False)
    naive = agreement(ref, emb.encode(texts), ref_q, emb.encode(queries))
    emb.model = fp32
    assert not naive.meets(bar), naive
    assert naive.min_cosine < 0.97

    with caplog.at_level(logging.WARNING, logger="bertfamily.pipelines.embedding.embed"):
        int8 = SentenceEmbedder(minilm_dir, quantize="int8", calibration=(texts, queries))
    # without VNNI/AMX int8 is no faster than fp32 (measured): the user is told
    warned = "no int8 dot-product units" in caplog.text
    assert warned == (not cpu_int8_units())
    plan = int8.int8_plan
    # the engine --quantize int8 runs on: torch's dynamic int8 in exactly the planned layers
    from torch.ao.nn.quantized.dynamic import Linear as DynamicInt8Linear

    modules = dict(int8.model.named_modules())
    assert {n for n, m in modules.items() if isinstance(m, DynamicInt8Linear)} == set(
        plan.quantized
    )
    assert len(plan.quantized) + len(plan.kept) == len(linear_layers(fp32)) == 24
    assert plan.quantized, "some layers must be quantisable within the bar"
    assert set(plan.layer_errors) == set(linear_layers(fp32))
    # re-measure what the embedder returns, independently of the plan's own bookkeeping
    got = agreement(ref, int8.encode(texts), ref_q, int8.encode(queries))
    assert got.min_cosine >= 0.99 and got.top_k_overlap >= 0.95, got
    assert got.max_abs_diff > 1e-4  # it is really quantised
    assert got.min_cosine == pytest.approx(int8.int8_check.min_cosine, abs=1e-6)
    # the plan's agreement is that of the model it returns, with the plan's margin
    assert got.min_cosine >= 0.992 and got.top_k_overlap >= 0.97, got
    # the same plan as ONNX Runtime's graph (what `export --quantize int8` writes) meets the bar
    graph, on_ort = int8_onnx_model(emb, plan, texts, queries)
    assert isinstance(graph, OnnxRuntimeModel) and on_ort.meets(bar), on_ort

    # a bar no quantised layer can meet is refused, not met with worse vectors
    with pytest.raises(QuantizationError, match="cannot meet the accuracy bar"):
        plan_int8(emb, texts[:4], queries[:2], AccuracyBar(min_cosine=0.999999, min_overlap=1.0))


def test_int8_refuses_what_it_cannot_run(minilm_dir):
    with pytest.raises(QuantizationError, match="fp32"):
        SentenceEmbedder(minilm_dir, dtype="bf16", quantize="int8")
    with pytest.raises(QuantizationError, match="int8"):
        SentenceEmbedder(minilm_dir, quantize="int4")
    emb = SentenceEmbedder(minilm_dir, dtype="fp32")
    with pytest.raises(QuantizationError, match="not Linear layers"):
        apply_int8(emb.model, ["encoder.embeddings"])


def test_default_dtype_is_auto_and_says_why(minilm_dir):
    emb = SentenceEmbedder(minilm_dir)
    want, reason = resolve_dtype("auto", "cpu")
    assert next(emb.model.parameters()).dtype == want == torch.float32
    assert emb.dtype_reason == reason and reason.startswith("fp32 (auto")


def test_embed_command_prints_the_dtype_choice(cli, minilm_dir):
    result = cli("embed", "a cat", "a dog", "--model", minilm_dir)
    assert result.exit_code == 0, result.output
    assert "dtype: " + resolve_dtype("auto", "cpu")[1] in " ".join(result.output.split())
    bad = cli("embed", "a cat", "--model", minilm_dir, "--quantize", "int4")
    assert bad.exit_code == 2 and "int8" in bad.output


OLD_NAMES = (  # what `pipelines/precision.py` exported before it was split (issue 42)
    "DTYPE_NAMES Agreement AccuracyBar Int8Plan QuantizationError agreement apply_int8 "
    "austen_calibration cached_int8 cached_int8_plan cached_openvino openvino_int8 "
    "int8_onnx_model cpu_bf16_units cpu_int8_units fastest_dtype layer_errors linear_layers "
    "plan_int8 resolve_dtype swapped_agreement int8_plan_key int8_cache_key openvino_cache_key "
    "OPENVINO_CACHE PLAN_MARGIN CALIBRATION_VERSION"
).split()


def test_every_old_precision_name_is_the_engine_module_s_own():
    """`inference.precision` (and the old `pipelines.precision`) re-export each name of the
    modules it was split into: the same objects, so a patch goes where the name is looked up."""
    import importlib
    import warnings

    from bertfamily.inference import agreement, caches, dtype, int8, int8_graphs, precision

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        old = importlib.import_module("bertfamily.pipelines.precision")
    homes = (dtype, agreement, int8, int8_graphs, caches)
    for name in OLD_NAMES:
        assert getattr(old, name) is getattr(precision, name), name
        if name not in ("QuantizationError", "cpu_bf16_units", "cpu_int8_units"):
            (home,) = [m for m in homes if name in vars(m) and name in m.__all__]
            assert getattr(home, name) is getattr(precision, name), name
    assert set(OLD_NAMES) <= set(precision.__all__)
