"""The OpenVINO runtime of `SentenceEmbedder` (`runtime="openvino"`, `embed --runtime`): the
real MiniLM's vectors against torch fp32 and sentence-transformers, the accuracy gate, the
refusals. Skipped without the optional ``openvino`` package (not in the test extra: 180 MB;
run with `pip install -e ".[test,openvino]"`)."""

from __future__ import annotations

import json
import re

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
HELD_OUT = [
    "It is a truth universally acknowledged.",
    "She walked to the village in the rain.",
    "The letter arrived a day too late.",
    "Music was playing in the next room.",
]


@pytest.fixture(scope="module")
def reference(minilm_dir):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(minilm_dir), device="cpu").encode(
        TEXTS, normalize_embeddings=True
    )


def test_fp32_graph_equals_sentence_transformers(minilm_dir, reference):
    from bertfamily.pipelines.embedding.embed import SentenceEmbedder

    embedder = SentenceEmbedder(minilm_dir, runtime="openvino", dtype="fp32")
    assert embedder.dtype_reason.startswith("OpenVINO f32")
    assert embedder.runtime_check.min_cosine > 0.9999
    np.testing.assert_allclose(embedder.encode(TEXTS), reference, atol=1e-5)


def test_default_precision_keeps_the_bar(minilm_dir, reference):
    from bertfamily.pipelines.embedding.embed import SentenceEmbedder

    embedder = SentenceEmbedder(minilm_dir, runtime="openvino")  # bf16 where the CPU has it
    assert embedder.runtime_check.min_cosine >= 0.99
    assert embedder.runtime_check.top_k_overlap >= 0.95
    cosines = (embedder.encode(TEXTS) * reference).sum(1)
    assert cosines.min() > 0.999, cosines


def test_a_graph_that_misses_the_bar_is_refused(minilm_dir):
    from bertfamily.inference.precision import AccuracyBar
    from bertfamily.pipelines.embedding.embed import SentenceEmbedder

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
        (dict(runtime="openvino", device="meta"), "runs on the CPU"),
    ],
)
def test_refusals(minilm_dir, kwargs, words):
    from bertfamily.pipelines.embedding.embed import SentenceEmbedder

    with pytest.raises(InputError, match=words):
        SentenceEmbedder(minilm_dir, **kwargs)
    with pytest.raises(QuantizationError, match="quantize must be None or 'int8'"):
        SentenceEmbedder(minilm_dir, runtime="openvino", quantize="int4")


def test_cli_embed_runtime_openvino(cli, minilm_dir, reference):
    result = cli("embed", *TEXTS, "--runtime", "openvino", "--dtype", "fp32", "--format", "jsonl")
    assert result.exit_code == 0, result.output
    vectors = np.array([json.loads(line)["embedding"] for line in result.stdout.splitlines()])
    np.testing.assert_allclose(vectors, reference, atol=1e-5)
    assert "runtime: OpenVINO f32" in result.stderr


@pytest.fixture
def own_cache(tmp_path, monkeypatch):
    """A fresh cache directory, and a short calibration sample in place of the fetched one."""
    from bertfamily.inference import caches

    monkeypatch.setenv("BERTFAMILY_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(caches, "austen_calibration", _short_calibration)
    return tmp_path / "cache" / caches.OPENVINO_CACHE


def _short_calibration(*args, held_out: bool = False):
    """Stands for `austen_calibration`: the texts, and others for the held-out check."""
    return (HELD_OUT * 3, HELD_OUT[:2]) if held_out else (TEXTS * 3, TEXTS[:2])


def test_the_graph_and_its_check_are_cached_and_used_again(
    minilm_dir, reference, own_cache, monkeypatch
):
    from bertfamily.convert import onnx
    from bertfamily.inference import caches
    from bertfamily.pipelines.embedding.embed import SentenceEmbedder

    first = SentenceEmbedder(minilm_dir, runtime="openvino", dtype="fp32")
    (entry,) = own_cache.iterdir()
    assert sorted(p.name for p in entry.iterdir()) == ["model.bin", "model.xml", "record.json"]
    record = json.loads((entry / "record.json").read_text())["data"]
    assert record["precision"] == "f32"
    assert record["agreement"]["min_cosine"] == first.runtime_check.min_cosine

    def no_export(*args, **kwargs):
        raise AssertionError("exported again")

    def no_measure(*args, **kwargs):
        raise AssertionError("measured again")

    monkeypatch.setattr(onnx, "export_onnx", no_export)
    monkeypatch.setattr(caches, "swapped_agreement", no_measure)
    again = SentenceEmbedder(minilm_dir, runtime="openvino", dtype="fp32")
    assert again.runtime_check == first.runtime_check
    np.testing.assert_allclose(again.encode(TEXTS), reference, atol=1e-5)
    # another precision is another entry
    monkeypatch.undo()
    monkeypatch.setenv("BERTFAMILY_CACHE", str(own_cache.parent))
    monkeypatch.setattr(caches, "austen_calibration", _short_calibration)
    SentenceEmbedder(minilm_dir, runtime="openvino", dtype="bf16")
    assert len(list(own_cache.iterdir())) == 2


def test_an_edited_cached_graph_is_built_again(minilm_dir, reference, own_cache, caplog):
    from bertfamily.pipelines.embedding.embed import SentenceEmbedder

    SentenceEmbedder(minilm_dir, runtime="openvino", dtype="fp32")
    (entry,) = own_cache.iterdir()
    weights = bytearray((entry / "model.bin").read_bytes())
    weights[1000:1004] = b"\x00\x00\xc0\x7f"  # a NaN in a weight
    (entry / "model.bin").write_bytes(bytes(weights))
    with caplog.at_level("WARNING"):
        embedder = SentenceEmbedder(minilm_dir, runtime="openvino", dtype="fp32")
    assert "model.bin: sha256 is" in caplog.text and "building it again" in caplog.text
    np.testing.assert_allclose(embedder.encode(TEXTS), reference, atol=1e-5)
    json.loads((entry / "record.json").read_text())  # rebuilt whole


def _reseal(record_file, edit) -> None:
    """Edit the data of a cache record and write it back with its own digest matching (as
    the cache itself would write such a measurement)."""
    from bertfamily.resources.cache import sha256_json

    body = json.loads(record_file.read_text())
    edit(body["data"])
    del body["sha256"]
    record_file.write_text(json.dumps(body | {"sha256": sha256_json(body)}))


def test_a_cached_check_under_the_bar_is_still_refused(minilm_dir, own_cache):
    from bertfamily.pipelines.embedding.embed import SentenceEmbedder

    SentenceEmbedder(minilm_dir, runtime="openvino", dtype="fp32")
    (entry,) = own_cache.iterdir()
    # as if this CPU's graph had measured so
    _reseal(entry / "record.json", lambda d: d["agreement"].update(min_cosine=0.5))
    with pytest.raises(QuantizationError, match="min cosine 0.5000"):
        SentenceEmbedder(minilm_dir, runtime="openvino", dtype="fp32")


def test_index_and_search_with_the_openvino_runtime(cli, minilm_dir, tmp_path):
    docs = tmp_path / "docs.txt"
    docs.write_text("A cat sleeps on the sofa.\n\nStock markets fell today.\nThe train was late.\n")
    hits = {}
    for runtime in ("torch", "openvino"):
        built = cli(
            "index", "build", "--corpus", str(docs), "-o", str(tmp_path / runtime),
            "--model", str(minilm_dir), "--runtime", runtime, "--dtype", "fp32",
        )  # fmt: skip
        assert built.exit_code == 0, built.output
        found = cli(
            "search", "a cat resting", "--index", str(tmp_path / runtime), "--model",
            str(minilm_dir), "--runtime", runtime, "--dtype", "fp32", "--format", "jsonl",
        )  # fmt: skip
        assert found.exit_code == 0, found.output
        hits[runtime] = [json.loads(line) for line in found.stdout.splitlines()]
    ids = [h["id"] for h in hits["torch"]]
    assert ids[0] == 1 and sorted(ids) == [1, 3, 4]  # by line; line 2 is blank
    assert [h["id"] for h in hits["openvino"]] == ids
    for a, b in zip(hits["openvino"], hits["torch"]):
        assert abs(a["score"] - b["score"]) < 1e-5


def test_bulk_embed_with_the_openvino_runtime(cli, minilm_dir, reference, tmp_path):
    (tmp_path / "in.txt").write_text("\n".join(TEXTS) + "\n")
    result = cli(
        "embed", "--input", str(tmp_path / "in.txt"), "--output", str(tmp_path / "shards"),
        "--model", str(minilm_dir), "--runtime", "openvino", "--dtype", "fp32",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "runtime: OpenVINO f32" in result.stderr
    np.testing.assert_allclose(
        np.load(tmp_path / "shards" / "shard-00000.npy"), reference, atol=1e-5
    )


def test_serve_with_the_openvino_runtime(minilm_dir, reference):
    from fastapi.testclient import TestClient

    from bertfamily.serve.app import ServeSettings, create_app, load_served_model

    served = load_served_model(minilm_dir, dtype="fp32", runtime="openvino")
    with TestClient(create_app(served, ServeSettings())) as client:
        info = client.get("/info").json()
        assert (info["runtime"], info["model_dtype"]) == ("openvino", "float32")
        vectors = np.array(client.post("/embed", json={"inputs": TEXTS}).json())
    np.testing.assert_allclose(vectors, reference, atol=1e-5)


@pytest.fixture
def real_calibration_cache(tmp_path, monkeypatch):
    """A fresh cache directory; the real Austen calibration (NNCF's activation scales need
    more than a few sentences: on 12 even the last step misses the bar)."""
    from bertfamily.inference import caches

    monkeypatch.setenv("BERTFAMILY_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / caches.OPENVINO_CACHE


def test_int8_graph_keeps_the_bar_on_held_out_text_and_is_cached(
    minilm_dir, reference, real_calibration_cache, monkeypatch
):
    """`runtime="openvino", quantize="int8"`: NNCF's int8, calibrated on one sample and
    checked on every kind of held-out text (the accuracy gate), the step that met the bar
    and each kind's agreement recorded and cached."""
    pytest.importorskip("nncf")
    from bertfamily.convert import openvino
    from bertfamily.inference import agreement, caches, int8_graphs
    from bertfamily.inference.agreement import GATE_KINDS, gate_texts, swapped_agreement
    from bertfamily.pipelines.embedding.embed import SentenceEmbedder

    own_cache = real_calibration_cache
    held_out = [sentences for sentences, _ in gate_texts().values()]

    checked: list[list[str]] = []
    real = swapped_agreement

    def spy(embedder, model, texts, queries, k=10):
        checked.append(list(texts))
        return real(embedder, model, texts, queries, k)

    monkeypatch.setattr(agreement, "swapped_agreement", spy)
    embedder = SentenceEmbedder(minilm_dir, runtime="openvino", quantize="int8")
    assert checked and all(t in held_out for t in checked)  # never its calibration text
    assert set(embedder.model.held_out) == set(GATE_KINDS)
    got = embedder.runtime_check
    assert got.min_cosine >= 0.99 and got.top_k_overlap >= 0.95
    assert got.min_cosine == min(a.min_cosine for a in embedder.model.held_out.values())
    steps = [step for step, _ in openvino.INT8_STEPS]
    assert embedder.model.quantized in steps
    assert embedder.dtype_reason.startswith(f"OpenVINO int8 in {embedder.model.quantized}")
    cosines = (embedder.encode(TEXTS) * reference).sum(1)
    assert cosines.min() > 0.99, cosines
    (entry,) = own_cache.iterdir()
    record = json.loads((entry / "record.json").read_text())
    assert record["data"]["int8"] == embedder.model.quantized
    assert set(record["data"]["held_out"]) == set(GATE_KINDS)
    assert sorted(p.name for p in entry.iterdir()) == ["model.bin", "model.xml", "record.json"]
    # used again without quantising or measuring
    monkeypatch.setattr(openvino, "quantize_openvino_ir", lambda *a, **k: 1 / 0)
    monkeypatch.setattr(agreement, "swapped_agreement", lambda *a, **k: 1 / 0)
    monkeypatch.setattr(int8_graphs, "swapped_agreement", lambda *a, **k: 1 / 0)
    monkeypatch.setattr(caches, "swapped_agreement", lambda *a, **k: 1 / 0)
    again = SentenceEmbedder(minilm_dir, runtime="openvino", quantize="int8")
    assert again.model.quantized == embedder.model.quantized
    assert again.model.held_out == embedder.model.held_out
    assert again.dtype_reason.endswith("graph from the cache")
    np.testing.assert_allclose(again.encode(TEXTS), embedder.encode(TEXTS), atol=1e-6)


def test_int8_steps_keep_more_in_float_until_the_bar_is_met(minilm_dir, monkeypatch):
    """The ladder: an impossible bar tries every step and is refused, naming the last."""
    pytest.importorskip("nncf")
    from bertfamily.convert import openvino
    from bertfamily.inference.precision import AccuracyBar
    from bertfamily.pipelines.embedding.embed import SentenceEmbedder

    tried: list[tuple[str, ...]] = []
    real = openvino.quantize_openvino_ir

    def spy(xml, out, batches, keep=()):
        tried.append(keep)
        return real(xml, out, batches, keep)

    monkeypatch.setattr(openvino, "quantize_openvino_ir", spy)
    impossible = AccuracyBar(min_cosine=1.01)
    last = openvino.INT8_STEPS[-1][0]
    words = re.escape(f"OpenVINO int8 ({last})") + ".* misses the accuracy"
    with pytest.raises(QuantizationError, match=words):
        SentenceEmbedder(
            minilm_dir,
            runtime="openvino",
            quantize="int8",
            bar=impossible,
            calibration=(TEXTS + HELD_OUT, TEXTS[:2] + HELD_OUT[:2]),
        )
    assert tried == [keep for _, keep in openvino.INT8_STEPS]


def test_cli_embed_openvino_int8(cli, minilm_dir, reference, real_calibration_cache):
    pytest.importorskip("nncf")
    args = ("--runtime", "openvino", "--quantize", "int8", "--format", "jsonl")
    result = cli("embed", *TEXTS, *args)
    assert result.exit_code == 0, result.output
    vectors = np.array([json.loads(line)["embedding"] for line in result.stdout.splitlines()])
    assert (vectors * reference).sum(1).min() > 0.99
    assert "runtime: OpenVINO int8 in" in result.stderr


def test_serve_openvino_int8(minilm_dir, reference, real_calibration_cache):
    """`serve --runtime openvino --quantize int8`: the int8 graph, named in /info (not torch's
    dynamic int8, which `--quantize int8` alone gives)."""
    pytest.importorskip("nncf")
    from fastapi.testclient import TestClient

    from bertfamily.serve.app import ServeSettings, create_app, load_served_model

    served = load_served_model(minilm_dir, runtime="openvino", quantize="int8")
    assert served.int8_plan is None and served.model.quantized is not None
    with TestClient(create_app(served, ServeSettings())) as client:
        info = client.get("/info").json()
        assert info["runtime"] == "openvino" and info["model_dtype"].startswith("int8+")
        vectors = np.array(client.post("/embed", json={"inputs": TEXTS}).json())
    assert (vectors * reference).sum(1).min() > 0.99


def test_an_edited_check_record_is_built_again(minilm_dir, own_cache, caplog):
    """The record carries its own digest: an edit of what it measured is seen and the entry
    built again; a record whose digest matches is still held to its claims (a value edited
    into a string, NaN, or an int8 step that does not exist)."""
    from bertfamily.pipelines.embedding.embed import SentenceEmbedder

    SentenceEmbedder(minilm_dir, runtime="openvino", dtype="fp32")
    (entry,) = own_cache.iterdir()
    record = json.loads((entry / "record.json").read_text())
    edited = json.loads(json.dumps(record))
    edited["data"]["agreement"]["min_cosine"] = 0.123  # refused by the embedder, if read
    (entry / "record.json").write_text(json.dumps(edited))
    with caplog.at_level("WARNING"):
        SentenceEmbedder(minilm_dir, runtime="openvino", dtype="fp32")
    assert "(altered)" in caplog.text and "building it again" in caplog.text
    for field, bad in (("min_cosine", "0.5"), ("min_cosine", float("nan")), ("int8", "<b>x</b>")):

        def edit(data, field=field, bad=bad):
            (data if field == "int8" else data["agreement"])[field] = bad

        _reseal(entry / "record.json", edit)
        caplog.clear()
        with caplog.at_level("WARNING"):
            embedder = SentenceEmbedder(minilm_dir, runtime="openvino", dtype="fp32")
        assert "its record does not hold" in caplog.text, field
        assert "building it again" in caplog.text, field
        assert embedder.runtime_check.min_cosine > 0.9999


def test_a_graph_is_compiled_for_the_governors_most_threads(minilm_dir, own_cache):
    """A compiled graph cannot follow the thread governor: compiled for the count of a busy
    moment it would keep a server on one thread for good, so it gets the governor's most."""
    import torch

    from bertfamily.pipelines.embedding.embed import SentenceEmbedder
    from bertfamily.runtime import AdaptiveThreads

    before = torch.get_num_threads()
    with AdaptiveThreads(2, threads=1):
        assert torch.get_num_threads() == 1
        embedder = SentenceEmbedder(minilm_dir, runtime="openvino", dtype="fp32")
    assert embedder.model.threads == 2 and "2 threads" in embedder.dtype_reason
    assert torch.get_num_threads() == before
