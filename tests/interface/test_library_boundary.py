"""Issue 43, kinds 6 and 7: the instances that came back as tracebacks, each with its right
outcome (a one-line `BertFamilyError`, exit code 2 on the command line, or a correct result),
and third-party errors turned into one-line errors at the library boundary."""

from __future__ import annotations

import json
import logging
import shutil

import pytest

import bertfamily as bf
from bertfamily.errors import (
    BulkEmbedError,
    InputError,
    TokenizerFileError,
    VectorIndexError,
    as_user_error,
)
from bertfamily.files import parse_json, read_json
from helpers import save_tiny

DEEP = "[" * 100_000 + "]" * 100_000


def _one_line(result) -> str:
    """The command's error line; fails unless it exited with 2 and printed no traceback."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.output
    return lines[0]


@pytest.fixture(scope="module")
def tiny(minilm_dir, tmp_path_factory):
    return save_tiny(tmp_path_factory.mktemp("boundary") / "m", minilm_dir)


# --- tokenizer --------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [-5, -1, 2.5, "8", True])
def test_tokenizer_refuses_a_max_length_that_is_no_length(minilm_tokenizer, bad):
    with pytest.raises(InputError, match=r"max_length must be None or an integer >= 0"):
        minilm_tokenizer(["a b c"], truncation=True, max_length=bad)


def test_tokenizer_takes_a_huge_max_length_as_no_cut(minilm_tokenizer):
    whole = minilm_tokenizer(["a b c"], truncation=True)["input_ids"]
    huge = minilm_tokenizer(["a b c"], truncation=True, max_length=10**20)["input_ids"]
    assert huge.tolist() == whole.tolist() == [[101, 1037, 1038, 1039, 102]]


# --- command line: pretrain, index build, index meta.json --------------------------------------


@pytest.mark.parametrize(
    "name, data",
    [("c.txt", b"ok line\n" * 30 + b"caf\xe9\n"), ("c.jsonl", b'{"text": "caf\xe9"}\n')],
)
def test_pretrain_on_non_utf8_text_is_one_line(cli, minilm_dir, tmp_path, name, data):
    corpus = tmp_path / name
    corpus.write_bytes(data)
    result = cli("pretrain", corpus, "-o", tmp_path / "run", "--tokenizer", minilm_dir,
                 "--preset", "tiny-bert", "--max-steps", "1")  # fmt: skip
    assert "UTF-8" in _one_line(result) and name in result.output


def test_index_build_on_a_full_disk_is_one_line(cli, tiny, tmp_path, monkeypatch):
    import faiss

    def full(*args, **kwargs):
        raise RuntimeError("Error in faiss::FileIOWriter::operator(): fwrite: No space left")

    corpus = tmp_path / "c.txt"
    corpus.write_text("one document\nanother document\n", encoding="utf-8")
    monkeypatch.setattr(faiss, "write_index", full)
    line = _one_line(cli("index", "build", "--corpus", corpus, "-o", tmp_path / "idx",
                         "--model", tiny))  # fmt: skip
    assert "cannot write the index" in line and "No space left" in line
    assert not (tmp_path / "idx").exists()  # nothing half-written


META_EDITS = {
    "count str": ("count", "7"),
    "count huge": ("count", 10**30),
    "kind list": ("kind", ["flat"]),
    "hnsw str": ("hnsw", "fast"),
    "hnsw m huge": ("hnsw", {"m": 10**30, "ef_construction": 1, "ef_search": 1}),
    "model list": ("model", [1, 2]),
    "files str": ("files", "x"),
    "deep": ("model", json.loads("[" * 60 + "]" * 60)),
}


@pytest.fixture(scope="module")
def built_index(cli, tiny, tmp_path_factory):
    out = tmp_path_factory.mktemp("index") / "idx"
    corpus = out.parent / "c.txt"
    corpus.write_text("one document\nanother document\n", encoding="utf-8")
    assert cli("index", "build", "--corpus", corpus, "-o", out, "--model", tiny).exit_code == 0
    return out


@pytest.mark.parametrize("edit", sorted(META_EDITS))
def test_index_meta_with_wrong_types_is_one_line(cli, tiny, built_index, tmp_path, edit):
    key, value = META_EDITS[edit]
    index = tmp_path / "idx"
    shutil.copytree(built_index, index)
    meta = json.loads((index / "meta.json").read_text())
    meta[key] = value
    (index / "meta.json").write_text(json.dumps(meta))
    assert "meta.json" in _one_line(cli("search", "one", "--index", index, "--model", tiny))


# --- bulk manifest ------------------------------------------------------------------------------


def test_bulk_manifest_claiming_a_trillion_lines_is_refused_at_once(tmp_path):
    from bertfamily.pipelines.embedding.bulk import BulkPlan, InputIdentity
    from bertfamily.pipelines.retrieval.base import ModelIdentity

    plan = BulkPlan(ModelIdentity("d" * 64, 8, "mean"), InputIdentity("c.txt", 20, "0" * 64, 4), 2)
    (tmp_path / "manifest.json").write_text(plan.to_json())
    assert BulkPlan.read(tmp_path) == plan
    for claim in ({"lines": 10**12}, {"lines": 10**12, "bytes": 10**13}):
        body = json.loads(plan.to_json())
        body["input"].update(claim)
        (tmp_path / "manifest.json").write_text(json.dumps(body))
        with pytest.raises(BulkEmbedError, match=r"edited or is corrupt"):
            BulkPlan.read(tmp_path)  # at once: no list of 10^12 / 2 shards is built


# --- metadata JSON nested 100,000 deep -----------------------------------------------------------


@pytest.mark.parametrize("name", [".manifest.json", "tokenizer_config.json", "record.json"])
def test_json_nested_100000_deep_is_one_line(tmp_path, name):
    (tmp_path / name).write_text(DEEP)
    with pytest.raises(bf.JSONFileError, match=r"not valid JSON: nested deeper"):
        read_json(tmp_path / name)


def test_deep_tokenizer_config_is_a_tokenizer_file_error(minilm_dir, tmp_path):
    shutil.copytree(minilm_dir, tmp_path / "m")
    (tmp_path / "m" / "tokenizer_config.json").write_text(DEEP)
    with pytest.raises(TokenizerFileError, match=r"tokenizer_config\.json is not valid JSON"):
        bf.load_tokenizer(tmp_path / "m")


def test_deep_int8_plan_record_is_measured_again(tmp_path, caplog):
    from bertfamily.inference.caches import RECORD, VerifiedEntry

    entry = VerifiedEntry("int8-plans", "k" * 32, "int8 plan", "measuring again", root=tmp_path)
    entry.path.mkdir(parents=True)
    (entry.path / RECORD).write_text(DEEP)
    with caplog.at_level(logging.WARNING):
        assert entry.read(lambda data: data) is None
    assert "measuring again" in caplog.text


def test_parse_json_bounds_one_row():
    assert parse_json('{"a": [1]}') == {"a": [1]}
    with pytest.raises(bf.JSONFileError, match=r"rows\.jsonl:3 is not valid JSON: nested deeper"):
        parse_json(DEEP, source="rows.jsonl:3", kind=None)


# --- the boundary: third-party errors ------------------------------------------------------------


def test_faiss_and_memory_errors_become_one_line():
    faiss_error = RuntimeError("Error in void faiss::write_index(...): fwrite failed")
    assert isinstance(as_user_error(faiss_error), VectorIndexError)
    oom = RuntimeError(
        "[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: "
        "you tried to allocate 2900000000 bytes."
    )
    for error in (oom, MemoryError()):
        user = as_user_error(error)
        assert isinstance(user, InputError) and user.__cause__ is error
        assert str(user).startswith("not enough memory") and "--batch-size" in str(user)
    assert as_user_error(RuntimeError("a bug")) is None  # a bug keeps its traceback
