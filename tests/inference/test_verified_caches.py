"""Caches are verified on use and manifests are validated (#34 item 5, #43): the engine's
caches (`inference.caches.VerifiedEntry`: int8 plans, int8 ONNX Runtime graphs, OpenVINO
graphs) carry the digest of their files and of their own record and their key, and what they
claim is checked against the model and the bar before use; an index's meta.json records the
size and SHA-256 of its files, and bulk-embedding manifests are checked field by field; each
failure is one clear error (or, for a cache, a rebuild), never a traceback, a
``ZeroDivisionError`` or a partial result reported complete.

(The fetched-resource cache, hashed at first use in every process, is tested in
``test_fetch.py``: ``test_same_size_same_mtime_edit_is_caught``.)"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest

from bertfamily.errors import BulkEmbedError, VectorIndexError

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def embedder(tmp_path_factory, minilm_dir):
    from bertfamily.pipelines.embedding.embed import SentenceEmbedder
    from helpers import save_tiny

    return SentenceEmbedder(save_tiny(tmp_path_factory.mktemp("caches") / "tiny", minilm_dir))


# ---------------------------------------------------------------- the verified caches


def _plan(embedder):
    """A plan of ``embedder``'s real Linear layers as `plan_int8` would make it: the first
    half quantised (the least damaging by their recorded errors), meeting the default bar."""
    from bertfamily.inference.agreement import AccuracyBar, Agreement
    from bertfamily.inference.int8 import Int8Plan, linear_layers

    layers = linear_layers(embedder.model)
    half = len(layers) // 2
    errors = {n: (0.999 - 0.001 * i, 0.9995 - 0.001 * i) for i, n in enumerate(layers)}
    good = Agreement(0.01, 0.995, 0.998, 1.0, 10)
    held = dict.fromkeys(GATE, good)  # checked on every kind of the gate's text
    return Int8Plan(tuple(layers[:half]), tuple(layers[half:]), errors, good, AccuracyBar(), held)


GATE = {"long prose": (["a long line"], ["a line"]), "STS-B": (["A man sings."], ["A man"])}


def _small_gate(monkeypatch, got) -> None:
    """The accuracy gate on two one-line kinds (`GATE`), each measuring ``got``."""
    from bertfamily.inference import caches

    monkeypatch.setattr(caches, "gate_texts", lambda: GATE)
    monkeypatch.setattr(
        caches, "measure_gate", lambda e, m, k, texts, step=None: {t: got for t in texts}
    )


@pytest.fixture
def int8_cache(tmp_path, monkeypatch, embedder):
    """`cached_int8` with its measuring parts replaced by recorders (no ONNX Runtime needed):
    returns the list of what it measured ("plan", or the graph's path)."""
    from bertfamily.convert import onnx as onnx_mod
    from bertfamily.inference import caches

    monkeypatch.setenv("BERTFAMILY_CACHE", str(tmp_path / "cache"))
    plan = _plan(embedder)
    measured: list[Path] = []

    def measure(embedder, plan, texts, queries, path):
        measured.append(Path(path))
        Path(path).write_bytes(b"int8 graph measured for this model")
        return "model", plan.agreement

    def measure_plan(*a, **k):
        measured.append(Path("plan"))
        return plan

    monkeypatch.setattr(caches, "austen_calibration", lambda **k: (["a text"], ["a query"]))
    _small_gate(monkeypatch, plan.agreement)
    monkeypatch.setattr(caches, "plan_int8", measure_plan)
    monkeypatch.setattr(caches, "int8_onnx_model", measure)
    monkeypatch.setattr(onnx_mod, "OnnxRuntimeModel", lambda path, threads: ("onnx", Path(path)))
    return measured


def _reseal(record: Path, edit) -> None:
    """Apply ``edit`` to the data of the cache record at ``record`` and write it back with a
    matching own digest, as a careful hand would (without this installation's secret, so with
    no valid ``mac``): the claims, then a measurement, decide."""
    from bertfamily.resources.cache import sha256_json

    body = json.loads(record.read_text())
    edit(body["data"])
    del body["sha256"]
    body.pop("mac", None)
    record.write_text(json.dumps(body | {"sha256": sha256_json(body)}))


def test_int8_plan_cache_uses_a_graph_only_when_its_digest_matches(embedder, int8_cache, caplog):
    from bertfamily.inference.caches import cached_int8

    *_, graph, cached = cached_int8(embedder)
    assert not cached and int8_cache[0] == Path("plan") and int8_cache[1].name == "model.onnx"
    assert graph.name == "model.onnx" and graph.parent.parent.name == "int8-onnx"
    int8_cache.remove(Path("plan"))  # the plan is cached apart: measured once below
    record = json.loads((graph.parent / "record.json").read_text())
    assert record["key"] == graph.parent.name and list(record["files"]) == ["model.onnx"]
    assert len(record["files"]["model.onnx"]) == 64 and len(record["sha256"]) == 64
    assert cached_int8(embedder)[-1] is True and len(int8_cache) == 1  # used from the cache
    # the instance: an edited graph (same size) was used (cosine 0.227)
    data = bytearray(graph.read_bytes())
    data[3] ^= 0xFF
    graph.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING):
        assert cached_int8(embedder)[-1] is False  # measured again
    assert "model.onnx: sha256 is" in caplog.text and "(altered)" in caplog.text
    assert len(int8_cache) == 2 and cached_int8(embedder)[-1] is True
    # a file added to the entry, or a record of an older bertfamily: built again too
    (graph.parent / "extra.bin").write_bytes(b"x")
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert cached_int8(embedder)[-1] is False
    assert "extra.bin is not in its record (added)" in caplog.text
    assert not (graph.parent / "extra.bin").exists() and len(int8_cache) == 3
    (graph.parent / "record.json").write_text(json.dumps({"key": graph.parent.name}))
    assert cached_int8(embedder)[-1] is False and len(int8_cache) == 4
    assert Path("plan") not in int8_cache  # the graph was rebuilt, the plan read
    # a graph whose (resealed) agreement misses the bar is not used
    _reseal(graph.parent / "record.json", lambda d: d["onnx_agreement"].update(min_cosine=0.9))
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert cached_int8(embedder)[-1] is False
    assert "misses the bar" in caplog.text


def _plan_record(cache: Path) -> Path:
    (entry,) = (cache / "int8-plans").iterdir()
    return entry / "record.json"


def test_int8_plan_cache_is_used_only_under_its_own_key(embedder, int8_cache, caplog):
    """What ``quantize="int8"`` reads: the plan alone (torch runs it), measured once."""
    from bertfamily.inference.caches import cached_int8_plan
    from bertfamily.resources.cache import cache_dir

    plan, cached = cached_int8_plan(embedder)
    assert not cached and int8_cache == [Path("plan")] and plan == _plan(embedder)
    assert cached_int8_plan(embedder) == (plan, True) and len(int8_cache) == 1
    meta = _plan_record(cache_dir())
    record = json.loads(meta.read_text())
    assert record["key"] == meta.parent.name and record["files"] == {}
    good = meta.read_text()
    record["key"] = "another model's key"
    meta.write_text(json.dumps(record))
    with caplog.at_level(logging.WARNING):
        assert cached_int8_plan(embedder)[1] is False  # measured again
    assert "another model's key" in caplog.text and len(int8_cache) == 2
    for bad, words in (
        ("[1, 2]", "must hold a cache record, got list"),
        ("[" * 100_000 + "]" * 100_000, "record"),  # issue 43: a RecursionError once
        ("{oops", "not valid JSON"),
    ):
        meta.write_text(bad)
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            assert cached_int8_plan(embedder)[1] is False
        assert words in caplog.text and "measuring again" in caplog.text
    assert len(int8_cache) == 5 and meta.read_text() == good  # the same plan measured again


def _quantise_everything(data: dict) -> None:
    data["quantized"] += data["kept"]
    data["kept"] = []


PLAN_EDITS = {  # edits of a plan's claims, resealed; each contradicts the model, itself or the bar
    "a layer this model lacks": (
        lambda d: d.update(
            quantized=["encoder.layers.9.ffn.up"],
            layer_errors={
                "encoder.layers.9.ffn.up": [0.999, 0.9995],
                **{n: v for n, v in d["layer_errors"].items() if n in d["kept"]},
            },
        ),
        "not this model's",
    ),  # fmt: skip
    "a damaging layer quantised": (
        lambda d: d.update(quantized=d["kept"][-1:], kept=d["quantized"] + d["kept"][:-1]),
        "a kept layer is less damaging than a quantised one",
    ),
    "under its bar": (lambda d: d["agreement"].update(min_cosine=0.979), "misses its bar"),
    "another bar": (lambda d: d["bar"].update(min_cosine=0.9), "was measured for"),
    "a cosine as a string": (lambda d: d["agreement"].update(min_cosine="0.5"), "not a number"),
    "NaN": (lambda d: d["agreement"].update(min_cosine=float("nan")), "outside"),
    "nothing quantised": (
        lambda d: d.update(quantized=[], kept=d["quantized"] + d["kept"]),
        "quantises no layer",
    ),
    "a layer twice": (lambda d: d.update(kept=d["kept"] + d["quantized"][:1]), "twice"),
}


def test_an_edited_plan_quantising_every_layer_is_measured_again(embedder, int8_cache, caplog):
    """Issue 43: "an edited int8 plan file quantising every layer is used with rc 0 at cosine
    0.979 against the 0.99 gate". The record's own digest sees the edit: the plan is measured
    again, and what runs is the measured plan."""
    from bertfamily.inference.caches import cached_int8_plan
    from bertfamily.resources.cache import cache_dir

    plan, _ = cached_int8_plan(embedder)
    meta = _plan_record(cache_dir())
    record = json.loads(meta.read_text())
    _quantise_everything(record["data"])
    record["data"]["agreement"]["min_cosine"] = 0.979
    meta.write_text(json.dumps(record, indent=1))
    with caplog.at_level(logging.WARNING):
        again, cached = cached_int8_plan(embedder)
    assert not cached and again == plan and again.kept, again
    assert "record.json is not the record that was written (altered)" in caplog.text
    assert "measuring again" in caplog.text and int8_cache == [Path("plan")] * 2


def test_a_resealed_plan_is_measured_against_the_bar_before_use(
    embedder, int8_cache, caplog, monkeypatch
):
    """Issue 43, the forged variant: an int8 plan quantising every layer, resealed with a
    consistent digest and a claimed agreement that meets the bar, ran at cosine 0.979 against
    the 0.99 gate. No valid mac: the plan runs on the calibration text again, misses the bar
    and is measured again from scratch; what runs is the measured plan."""
    from bertfamily.inference import caches
    from bertfamily.inference.agreement import Agreement
    from bertfamily.inference.caches import cached_int8_plan
    from bertfamily.resources.cache import cache_dir

    plan, _ = cached_int8_plan(embedder)
    _reseal(_plan_record(cache_dir()), _quantise_everything)
    measured = []

    def swapped(embedder, model, texts, queries, k):
        measured.append(model)
        return Agreement(0.02, 0.979, 0.99, 0.9, k)

    monkeypatch.setattr(caches, "swapped_agreement", swapped)
    with caplog.at_level(logging.WARNING):
        again, cached = cached_int8_plan(embedder)
    assert not cached and again == plan and again.kept and len(measured) == 1
    assert "not measured by this installation" in caplog.text
    assert "min cosine 0.9790" in caplog.text and "under the bar" in caplog.text
    assert int8_cache == [Path("plan")] * 2  # the search ran again
    assert cached_int8_plan(embedder) == (plan, True) and len(measured) == 1  # signed: trusted


def test_an_unsigned_plan_meeting_the_bar_is_used_with_what_was_measured(
    embedder, int8_cache, monkeypatch
):
    from bertfamily.inference import caches
    from bertfamily.inference.agreement import Agreement
    from bertfamily.inference.caches import cached_int8_plan
    from bertfamily.resources.cache import cache_dir

    plan, _ = cached_int8_plan(embedder)
    _reseal(_plan_record(cache_dir()), lambda d: None)  # an older cache: no mac
    good = Agreement(0.003, 0.996, 0.999, 1.0, 10)
    monkeypatch.setattr(caches, "swapped_agreement", lambda *a: good)
    again, cached = cached_int8_plan(embedder)
    assert cached and again.quantized == plan.quantized and again.agreement == good
    assert int8_cache == [Path("plan")]  # no search
    record = json.loads(_plan_record(cache_dir()).read_text())
    assert len(record["mac"]) == 64 and record["data"]["agreement"]["min_cosine"] == 0.996
    key = cache_dir() / ".record-key"
    assert key.stat().st_mode & 0o777 == 0o600 and key.stat().st_size == 32


@pytest.mark.parametrize("edit", list(PLAN_EDITS))
def test_a_resealed_plan_is_held_to_its_claims(embedder, int8_cache, caplog, edit):
    from bertfamily.inference.caches import cached_int8_plan
    from bertfamily.resources.cache import cache_dir

    plan, _ = cached_int8_plan(embedder)
    change, words = PLAN_EDITS[edit]
    _reseal(_plan_record(cache_dir()), change)
    with caplog.at_level(logging.WARNING):
        assert cached_int8_plan(embedder) == (plan, False)
    assert words in caplog.text and "measuring again" in caplog.text
    assert cached_int8_plan(embedder) == (plan, True)


def test_cache_entries_are_written_with_the_umask(embedder, int8_cache):
    import os
    import stat

    from bertfamily.inference.caches import cached_int8

    old = os.umask(0o027)
    try:
        *_, graph, _ = cached_int8(embedder)
    finally:
        os.umask(old)
    for path, mode in (
        (graph.parent, 0o750),
        (graph, 0o640),
        (graph.parent / "record.json", 0o640),
    ):
        assert stat.S_IMODE(path.stat().st_mode) == mode, path
    assert sorted(p.name for p in graph.parent.parent.iterdir()) == [graph.parent.name]


def test_a_linked_cache_directory_is_refused(embedder, int8_cache, tmp_path):
    from bertfamily.errors import UnsafePathError
    from bertfamily.inference.caches import cached_int8_plan

    (tmp_path / "cache").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "cache" / "int8-plans").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(UnsafePathError):
        cached_int8_plan(embedder)
    assert int8_cache == [] and not any((tmp_path / "elsewhere").iterdir())  # before measuring


@pytest.fixture
def openvino_cache(tmp_path, monkeypatch):
    """`cached_openvino` with OpenVINO replaced by a recorder (the package is optional):
    returns the list of graphs it built; each measures the agreement in ``AGREEMENT``."""
    from bertfamily.convert import openvino as ov
    from bertfamily.inference import caches
    from bertfamily.inference.agreement import Agreement

    monkeypatch.setenv("BERTFAMILY_CACHE", str(tmp_path / "cache"))
    built: list[Path] = []

    class Graph:
        def __init__(self, model, threads, precision, ir):
            self.ir, self.threads, self.precision = Path(ir), threads, precision or "f32"
            self.quantized = "not set"

    def save(model, xml):
        built.append(Path(xml))
        Path(xml).write_text("<net/>")
        Path(xml).with_suffix(".bin").write_bytes(b"\x00" * 16)
        return Path(xml)

    monkeypatch.setattr(ov, "OpenVinoModel", Graph)
    monkeypatch.setattr(ov, "save_openvino_ir", save)
    monkeypatch.setattr(ov, "inference_threads", lambda: 2)
    monkeypatch.setattr(caches, "austen_calibration", lambda **k: (["a text"], ["a query"]))
    agreement = Agreement(1e-6, 0.99999, 0.999995, 1.0, 10)
    monkeypatch.setattr(caches, "swapped_agreement", lambda *a: agreement)
    _small_gate(monkeypatch, agreement)
    return built


def test_openvino_graph_cache_is_verified_on_use(embedder, openvino_cache, caplog):
    from bertfamily.inference.caches import cached_openvino
    from bertfamily.resources.cache import cache_dir

    model, got, cached = cached_openvino(embedder, "f32")
    (entry,) = (cache_dir() / "openvino-graphs").iterdir()
    assert not cached and len(openvino_cache) == 1 and model.quantized is None
    assert sorted(p.name for p in entry.iterdir()) == ["model.bin", "model.xml", "record.json"]
    again, same, cached = cached_openvino(embedder, "f32")
    assert cached and same == got and again.ir == entry / "model.xml" and again.threads == 2
    # an edited weight file, an edited record, an int8 entry asked as float: built again
    (entry / "model.bin").write_bytes(b"\x01" * 16)
    with caplog.at_level(logging.WARNING):
        assert cached_openvino(embedder, "f32")[-1] is False
    assert "model.bin: sha256 is" in caplog.text and "building it again" in caplog.text
    record = json.loads((entry / "record.json").read_text())
    record["data"]["agreement"]["min_cosine"] = 1.0
    (entry / "record.json").write_text(json.dumps(record))
    assert cached_openvino(embedder, "f32")[-1] is False
    _reseal(entry / "record.json", lambda d: d.update(int8="every matrix product"))
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert cached_openvino(embedder, "f32")[-1] is False
    assert "does not match the quantisation asked for" in caplog.text
    assert len(openvino_cache) == 4
    # a record this installation did not sign: its claim is not used, its graph is measured
    # again (here: meeting the bar), and the record signed
    _reseal(entry / "record.json", lambda d: d["agreement"].update(min_cosine=0.5))
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        _, got, cached = cached_openvino(embedder, "f32")
    assert cached and got.min_cosine == 0.99999 and len(openvino_cache) == 4
    assert "not measured by this installation" in caplog.text
    assert json.loads((entry / "record.json").read_text())["data"]["agreement"]["min_cosine"] == (
        0.99999
    )
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert cached_openvino(embedder, "f32")[-1] is True
    assert caplog.text == ""  # signed now: used without measuring


# ---------------------------------------------------------------- index meta.json


@pytest.fixture(scope="module")
def saved_index(embedder, tmp_path_factory):
    pytest.importorskip("faiss")
    from bertfamily.pipelines.retrieval.dense import VectorIndex

    path = tmp_path_factory.mktemp("index") / "idx"
    texts = ["a cat sat", "a dog ran", "rivers flow", "trains run late"]
    VectorIndex.build(embedder, texts, ids=["c", "d", "r", "t"]).save(path)
    return path


def _edit_meta(**changes):
    def edit(d: Path) -> None:
        meta = json.loads((d / "meta.json").read_text())
        meta.update(changes)
        (d / "meta.json").write_text(json.dumps(meta))

    return edit


def _same_size_text_edit(d: Path) -> None:
    path = d / "texts.jsonl"
    path.write_text(path.read_text().replace("a cat sat", "a bat sat"))


def _raw(name: str, text: str):
    return lambda d: (d / name).write_text(text)


INDEX_CORRUPTIONS = {
    "meta not an object": (_raw("meta.json", "[1, 2]"), "not an object"),
    "meta not JSON": (_raw("meta.json", "{oops"), "not readable JSON"),
    "count a string": (_edit_meta(count="4"), "count '4' is not a row count"),
    "unknown kind": (_edit_meta(kind="ivf"), "kind 'ivf'"),
    "model a list": (_edit_meta(model=[1]), "is not a model identity"),
    "dimension zero": (
        _edit_meta(model={"digest": "x", "dimension": 0, "pooling": "mean"}),
        "not a model identity",
    ),
    "hnsw settings": (_edit_meta(hnsw={"m": "many"}), "hnsw"),
    "same-size text edit": (_same_size_text_edit, "texts.jsonl: its SHA-256 is not"),
    "truncated index": (
        lambda d: (d / "index.faiss").write_bytes((d / "index.faiss").read_bytes()[:-9]),
        "truncated or changed",
    ),
    "count disagrees": (_edit_meta(count=5, files={}), "4 rows, meta.json says 5"),
    "row not an object": (
        lambda d: (
            _raw(
                "texts.jsonl",
                '[1]\n{"id": 2, "text": "b"}\n{"id": 3, "text": "c"}\n{"id": 4, "text": "d"}\n',
            )(d),
            _edit_meta(files={})(d),
        ),  # fmt: skip
        'line 1: not an {"id", "text"} row',
    ),
    "repeated id": (
        lambda d: (
            _raw(
                "texts.jsonl",
                '{"id": 1, "text": "a"}\n{"id": 1, "text": "b"}\n'
                '{"id": 3, "text": "c"}\n{"id": 4, "text": "d"}\n',
            )(d),
            _edit_meta(files={})(d),
        ),  # fmt: skip
        "line 2: id 1 repeats",
    ),
}


@pytest.mark.parametrize("corruption", list(INDEX_CORRUPTIONS))
def test_index_meta_and_files_are_validated_with_one_clear_error(saved_index, tmp_path, corruption):
    from bertfamily.pipelines.retrieval.dense import VectorIndex

    corrupt, words = INDEX_CORRUPTIONS[corruption]
    path = tmp_path / "idx"
    shutil.copytree(saved_index, path)
    assert len(VectorIndex.load(path)) == 4
    corrupt(path)
    with pytest.raises(VectorIndexError, match=words) as info:
        VectorIndex.load(path)
    assert "\n" not in str(info.value)


def test_cli_search_of_an_edited_index_is_one_line(cli, saved_index, embedder, tmp_path):
    path = tmp_path / "idx"
    shutil.copytree(saved_index, path)
    _same_size_text_edit(path)
    result = cli("search", "a cat", "--index", path, "--model", embedder.path)
    assert result.exit_code == 2, result.output
    assert "texts.jsonl: its SHA-256 is not the one meta.json recorded" in result.output
    assert "Traceback" not in result.output


# ---------------------------------------------------------------- bulk-embedding manifests


@pytest.fixture(scope="module")
def bulk_run(embedder, tmp_path_factory):
    from bertfamily.pipelines.embedding.bulk import embed_file

    base = tmp_path_factory.mktemp("bulk")
    corpus = base / "corpus.txt"
    corpus.write_text("".join(f"line number {i}\n" for i in range(50)))
    embed_file(embedder, corpus, base / "out", shard_size=20)
    return corpus, base / "out"


def _edit_manifest(edit):
    def apply(d: Path) -> None:
        body = json.loads((d / "manifest.json").read_text())
        edit(body)
        (d / "manifest.json").write_text(json.dumps(body))

    return apply


MANIFEST_CORRUPTIONS = {
    # before: ZeroDivisionError
    "shard size 0": (_edit_manifest(lambda b: b.update(shard_size=0)), "shard_size is 0, below 1"),
    # before: 20 of 50 rows returned, and `embed` said complete
    "lines 50 -> 20": (
        _edit_manifest(lambda b: b["input"].update(lines=20)),
        "shards is not what a plan of 20 lines",
    ),
    "dimension a string": (
        _edit_manifest(lambda b: b["model"].update(dimension="32")),
        "model.dimension is '32', not an integer",
    ),
    "not an object": (lambda d: (d / "manifest.json").write_text("[]"), "not an object"),
    "not JSON": (lambda d: (d / "manifest.json").write_text("{"), "cannot read"),
    "sha256 cut": (
        _edit_manifest(lambda b: b["input"].update(sha256="ab")),
        "is not a SHA-256",
    ),
}


@pytest.mark.parametrize("corruption", list(MANIFEST_CORRUPTIONS))
def test_bulk_manifest_is_validated_with_one_clear_error(embedder, bulk_run, tmp_path, corruption):
    from bertfamily.pipelines.embedding.bulk import embed_file, load_shards

    corpus, out = bulk_run
    path = tmp_path / "out"
    shutil.copytree(out, path)
    assert load_shards(path).shape == (50, embedder.dimension)
    corrupt, words = MANIFEST_CORRUPTIONS[corruption]
    corrupt(path)
    for use in (
        lambda: load_shards(path),
        lambda: embed_file(embedder, corpus, path, shard_size=20),
    ):
        with pytest.raises(BulkEmbedError, match=words) as info:
            use()
        assert "\n" not in str(info.value)


def test_a_consistent_but_edited_manifest_is_refused_on_resume(embedder, bulk_run, tmp_path):
    """A hand-made manifest consistent with itself (20 lines, 1 shard) over a 50-line input
    with the same SHA-256: resuming would report 20 rows complete."""
    from bertfamily.pipelines.embedding.bulk import BulkPlan, InputIdentity, embed_file

    corpus, out = bulk_run
    path = tmp_path / "out"
    shutil.copytree(out, path)
    plan = BulkPlan.read(path)
    small = BulkPlan(plan.model, InputIdentity(**{**plan.input.__dict__, "lines": 20}), 20)
    (path / "manifest.json").write_text(small.to_json())
    for s in (1, 2):
        (path / f"shard-{s:05d}.npy").unlink()
    with pytest.raises(BulkEmbedError, match="describes input 'corpus.txt' as 20 lines"):
        embed_file(embedder, corpus, path, shard_size=20)
    assert np.load(path / "shard-00000.npy").shape[0] == 20
