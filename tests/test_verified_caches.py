"""Caches are verified on use and manifests are validated (#34 item 5): the int8-plan cache
carries the digest of its graph (and the key of the model it was measured on), an index's
meta.json records the size and SHA-256 of its files, and bulk-embedding manifests are checked
field by field; each failure is one clear error (or, for a cache, a rebuild), never a
traceback, a ``ZeroDivisionError`` or a partial result reported complete.

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
    from bertfamily.pipelines.embed import SentenceEmbedder
    from helpers import save_tiny

    return SentenceEmbedder(save_tiny(tmp_path_factory.mktemp("caches") / "tiny", minilm_dir))


# ---------------------------------------------------------------- the int8-plan cache


@pytest.fixture
def int8_cache(tmp_path, monkeypatch):
    """`cached_int8` with its measuring parts replaced by recorders (no ONNX Runtime needed):
    returns the list of graphs it measured."""
    from bertfamily.convert import onnx as onnx_mod
    from bertfamily.pipelines import precision

    monkeypatch.setenv("BERTFAMILY_CACHE", str(tmp_path / "cache"))
    agreement = precision.Agreement(0.01, 0.995, 0.998, 1.0, 10)
    plan = precision.Int8Plan(("a",), ("b",), {"a": (0.99, 0.995)}, agreement,
                              precision.AccuracyBar())  # fmt: skip
    measured: list[Path] = []

    def measure(embedder, plan, texts, queries, path):
        measured.append(Path(path))
        Path(path).write_bytes(b"int8 graph measured for this model")
        return "model", agreement

    monkeypatch.setattr(precision, "austen_calibration", lambda: (["a text"], ["a query"]))

    def measure_plan(*a, **k):
        measured.append(Path("plan"))
        return plan

    monkeypatch.setattr(precision, "plan_int8", measure_plan)
    monkeypatch.setattr(precision, "int8_onnx_model", measure)
    monkeypatch.setattr(onnx_mod, "OnnxRuntimeModel", lambda path, threads: ("onnx", Path(path)))
    return measured


def test_int8_plan_cache_uses_a_graph_only_when_its_digest_matches(embedder, int8_cache, caplog):
    from bertfamily.pipelines.precision import cached_int8

    *_, graph, cached = cached_int8(embedder)
    assert not cached and int8_cache == [Path("plan"), graph]
    int8_cache.remove(Path("plan"))  # the plan is cached apart: measured once below
    meta = json.loads(graph.with_suffix(".json").read_text())
    assert len(meta["graph_sha256"]) == 64 and meta["key"] == graph.stem
    assert cached_int8(embedder)[-1] is True and len(int8_cache) == 1  # used from the cache
    # the instance: an edited graph (same size) was used (cosine 0.227)
    data = bytearray(graph.read_bytes())
    data[3] ^= 0xFF
    graph.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING):
        assert cached_int8(embedder)[-1] is False  # measured again
    assert "(edited)" in caplog.text and len(int8_cache) == 2
    assert cached_int8(embedder)[-1] is True
    # a plan of an older bertfamily (no digest) is measured again too
    meta = json.loads(graph.with_suffix(".json").read_text())
    del meta["graph_sha256"]
    graph.with_suffix(".json").write_text(json.dumps(meta))
    assert cached_int8(embedder)[-1] is False and len(int8_cache) == 3
    assert Path("plan") not in int8_cache  # the graph was rebuilt, the plan read


def test_int8_plan_cache_is_used_only_under_its_own_key(embedder, int8_cache, caplog):
    """What ``quantize="int8"`` reads: the plan alone (torch runs it), measured once."""
    from bertfamily.pipelines.precision import cached_int8_plan
    from bertfamily.resources.cache import cache_dir

    plan, cached = cached_int8_plan(embedder)
    assert not cached and int8_cache == [Path("plan")] and plan.quantized == ("a",)
    assert cached_int8_plan(embedder) == (plan, True) and len(int8_cache) == 1
    (meta,) = (cache_dir() / "int8-plans").glob("*.plan.json")
    record = json.loads(meta.read_text())
    assert record["key"] == meta.name.removesuffix(".plan.json")
    record["key"] = "another model's key"
    meta.write_text(json.dumps(record))
    with caplog.at_level(logging.WARNING):
        assert cached_int8_plan(embedder)[1] is False  # measured again
    assert "another model's key" in caplog.text and len(int8_cache) == 2
    meta.write_text("[1, 2]")  # not an object
    with caplog.at_level(logging.WARNING):
        assert cached_int8_plan(embedder)[1] is False
    assert "not an object" in caplog.text and len(int8_cache) == 3
    # a recorded agreement edited into a string, NaN or an impossible value: measured again
    # (a string once reached the accuracy check and ended in a TypeError traceback)
    for bad in ("0.5", float("nan"), 1.5):
        record = json.loads(meta.read_text())
        record["agreement"]["min_cosine"] = bad
        meta.write_text(json.dumps(record))
        before = len(int8_cache)
        with caplog.at_level(logging.WARNING):
            assert cached_int8_plan(embedder)[1] is False
        assert len(int8_cache) == before + 1


# ---------------------------------------------------------------- index meta.json


@pytest.fixture(scope="module")
def saved_index(embedder, tmp_path_factory):
    pytest.importorskip("faiss")
    from bertfamily.pipelines.index import VectorIndex

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
    from bertfamily.pipelines.index import VectorIndex

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
    from bertfamily.pipelines.bulk import embed_file

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
        "model.dimension is '32', not a int",
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
    from bertfamily.pipelines.bulk import embed_file, load_shards

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
    from bertfamily.pipelines.bulk import BulkPlan, InputIdentity, embed_file

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
