"""Shared readers and one error boundary (issue 42, item 5): the bounded JSON loader
(`files.read_json`), the text-input reader (`data.text_input`) every command uses, and the
mapping of third-party exceptions to one-line errors (`errors.as_user_error`) the command line
prints. Thread counts (flag and environment) are in test_runtime.py."""

from __future__ import annotations

import errno
import io
import json

import pytest

from bertfamily.errors import (
    BertFamilyError,
    DataEngineError,
    DataError,
    FileAccessError,
    InputError,
    JSONFileError,
    ModelDirectoryError,
    VectorIndexError,
    as_user_error,
)
from bertfamily.files import MAX_JSON_DEPTH, json_depth, read_json


# --- files.read_json -------------------------------------------------------------------------
def test_read_json_reads_an_object_with_a_bom(tmp_path):
    f = tmp_path / "config.json"
    f.write_bytes(b"\xef\xbb\xbf" + json.dumps({"a": [1, {"b": 2}]}).encode())
    assert read_json(f) == {"a": [1, {"b": 2}]}
    assert read_json(f, kind=None) == {"a": [1, {"b": 2}]}
    assert read_json(tmp_path / "absent.json", missing={}) == {}
    assert json_depth({"a": [1, {"b": 2}]}) == 3 and json_depth(7) == 0


@pytest.mark.parametrize(
    "content, words",
    [
        (None, "does not exist"),
        ("dir", "is a directory"),
        (b"{" + b" " * 200 + b"}", "is 202 bytes; a JSON file here is at most 100"),
        (b'{"a": "caf\xe9"}', r"is not valid JSON: not UTF-8 text (byte b'\xe9' at offset 10)"),
        (b'{"a": 1,}', "is not valid JSON: Expecting property name"),
        (b'{"a": ' + b"9" * 5000 + b"}", "is not valid JSON: Exceeds the limit"),
        (b"[" * 100_000 + b"]" * 100_000, "nested deeper than Python can parse"),
        (b"[" * 70 + b"]" * 70, f"nested deeper than {MAX_JSON_DEPTH} levels"),
        (b"[1, 2]", "must hold the model settings, got list ([1, 2])"),
        (b"null", "must hold the model settings, got NoneType (None)"),
    ],
)
def test_read_json_refuses_with_one_line_naming_the_file(tmp_path, content, words):
    f = tmp_path / "config.json"
    if content == "dir":
        f.mkdir()
    elif content is not None:
        f.write_bytes(content)
    limit = 100 if isinstance(content, bytes) and content.startswith(b"{ ") else 2**20
    with pytest.raises(JSONFileError) as e:
        read_json(f, what="the model settings", max_bytes=limit)
    message = str(e.value)
    assert str(f) in message and words in message and "\n" not in message
    assert isinstance(e.value, ValueError) and isinstance(e.value, BertFamilyError)
    # the caller's own class, same message
    with pytest.raises(ModelDirectoryError, match="config.json"):
        read_json(f, error=ModelDirectoryError, max_bytes=100)


def test_read_json_permission_denied(tmp_path):
    import os

    if os.geteuid() == 0:
        pytest.skip("root reads any file")
    f = tmp_path / "meta.json"
    f.write_text("{}")
    f.chmod(0)
    with pytest.raises(JSONFileError, match="meta.json cannot be read: Permission denied"):
        read_json(f)


def test_every_metadata_reader_is_bounded(tmp_path):
    """The readers that used json.loads(path.read_text()) now refuse a too-deep file with their
    own class and a line naming the file (a RecursionError escaped some before)."""
    from bertfamily.checkpoints.io import read_hf_config
    from bertfamily.pipelines.embedding.sentence_modules import read_sentence_modules
    from bertfamily.pipelines.retrieval.base import read_index_meta
    from bertfamily.tokenization.hf_files import _read_json

    deep = "[" * 70 + "]" * 70
    for name in ("config.json", "modules.json", "meta.json", "tokenizer_config.json"):
        (tmp_path / name).write_text(deep)
    cases = [
        (read_hf_config, ModelDirectoryError, "config.json"),
        (read_sentence_modules, ModelDirectoryError, "modules.json"),
        (read_index_meta, VectorIndexError, "meta.json"),
    ]
    for reader, cls, name in cases:
        with pytest.raises(cls, match=f"{name}.*nested deeper than {MAX_JSON_DEPTH}"):
            reader(tmp_path)
    with pytest.raises(BertFamilyError, match="tokenizer_config.json.*nested deeper"):
        _read_json(tmp_path / "tokenizer_config.json")


# --- errors.as_user_error --------------------------------------------------------------------
def _raised(exc_factory):
    try:
        exc_factory()
    except BaseException as e:  # noqa: BLE001
        return e
    raise AssertionError("nothing raised")


def _fake_ray(name: str, cause: BaseException | None = None) -> Exception:
    cls = type(name, (Exception,), {"__module__": "ray.exceptions"})
    exc = cls(f"{name}: the first line\n  a traceback line\n  another")
    if cause is not None:
        exc.cause = cause
    return exc


def test_as_user_error_maps_each_kind_and_keeps_the_cause(tmp_path):
    import faiss

    enospc = OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "out.npy"))
    cases = [
        (enospc, FileAccessError, f"{tmp_path / 'out.npy'}: no space left on the device"),
        (_raised(lambda: open(tmp_path, "rb")), FileAccessError, "it is a directory"),
        (PermissionError(errno.EACCES, "Permission denied", "/x"), FileAccessError,
         "/x: permission denied"),
        (_raised(lambda: b"ok \xff".decode()), DataError, r"byte b'\xff' at offset 3"),
        (RecursionError("maximum recursion depth exceeded"), InputError, "nested too deeply"),
        (_raised(lambda: faiss.read_index(str(tmp_path / "none.faiss"))), VectorIndexError,
         "faiss: Error in"),
        (_fake_ray("RayTaskError", cause=DataError("rows.jsonl:3: not JSON")), DataError,
         "rows.jsonl:3: not JSON"),
        (_fake_ray("ObjectStoreFullError"), DataEngineError, "Ray: ObjectStoreFullError: the "
         "first line"),
    ]  # fmt: skip
    for exc, cls, words in cases:
        user = as_user_error(exc)
        assert isinstance(user, cls), (exc, user)
        assert words in str(user) and "\n" not in str(user), str(user)
        if not isinstance(exc.__dict__.get("cause"), BertFamilyError):
            assert user.__cause__ is exc  # kept for -v
    assert as_user_error(enospc).errno == errno.ENOSPC  # still an OSError with its errno
    mine = InputError("mine")
    assert as_user_error(mine) is mine
    for bug in (TypeError("x"), KeyError("k"), RuntimeError("not faiss"), AssertionError()):
        assert as_user_error(bug) is None
    assert as_user_error(_fake_ray("RayTaskError", cause=TypeError("a bug"))) is None


@pytest.mark.parametrize(
    "exc, words",
    [
        (OSError(errno.ENOSPC, "No space left on device", "/data/out.npy"),
         "/data/out.npy: no space left on the device"),
        (PermissionError(errno.EACCES, "Permission denied", "/data/in.txt"),
         "/data/in.txt: permission denied"),
        (IsADirectoryError(errno.EISDIR, "Is a directory", "/data"), "/data: it is a directory"),
        (UnicodeDecodeError("utf-8", b"a\xffb", 1, 2, "invalid start byte"), "not UTF-8 text"),
        (RecursionError("maximum recursion depth exceeded"), "nested too deeply"),
        ("faiss", "faiss: Error in"),
        ("ray", "Ray: RaySystemError: the first line"),
    ],
)  # fmt: skip
def test_the_command_line_prints_one_line_and_exit_2(cli, monkeypatch, tmp_path, exc, words):
    import bertfamily.inspect.compare as compare

    if exc == "faiss":
        import faiss

        exc = _raised(lambda: faiss.read_index(str(tmp_path / "none.faiss")))
    elif exc == "ray":
        exc = _fake_ray("RaySystemError")

    def fail(*args, **kwargs):
        raise exc

    monkeypatch.setattr(compare, "comparison_rows", fail)
    result = cli("models")
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], lines
    # -v: the traceback of the original exception first, then the same line
    import bertfamily.cli.common as common

    monkeypatch.setattr(common.err, "print_exception", lambda **kw: common.err.print("TRACEBACK"))
    monkeypatch.setattr("logging.basicConfig", lambda **kw: None)  # no session-wide INFO
    result = cli("-v", "models")
    assert result.exit_code == 2 and "TRACEBACK" in result.output and words in result.output


def test_a_bug_keeps_its_traceback(cli, monkeypatch):
    import bertfamily.inspect.compare as compare

    def fail(*args, **kwargs):
        raise TypeError("a bug")

    monkeypatch.setattr(compare, "comparison_rows", fail)
    result = cli("models")
    assert result.exit_code == 1 and isinstance(result.exception, TypeError)


# --- data.text_input: the one reader of text inputs --------------------------------------------
def test_read_text_lines_policies_and_line_ends(tmp_path):
    from bertfamily.data.text_input import read_text_lines

    f = tmp_path / "in.txt"
    f.write_bytes(b"\xef\xbb\xbf one \r\n\n  \t\na\rb\xe2\x80\xa8c\nlast")
    assert read_text_lines(f, blank="keep") == ["one", "", "", "a\rb\u2028c", "last"]
    assert read_text_lines(f) == ["one", "a\rb\u2028c", "last"]
    with pytest.raises(InputError, match="blank must be keep or skip"):
        read_text_lines(f, blank="drop")


@pytest.mark.parametrize(
    "content, words",
    [
        (None, "cannot read input file {f}: it does not exist"),
        ("dir", "cannot read input file {f}: it is a directory"),
        (b"ok\nbad \xff here\n", r"{f}:2: not UTF-8 (byte b'\xff' at column 5)"),
        (b" \n\t\n\n", "input file {f} is empty (no text on any line)"),
        (b"", "input file {f} is empty (no text on any line)"),
    ],
)
def test_read_text_lines_refusals_name_the_input(tmp_path, content, words):
    from bertfamily.data.text_input import iter_input_lines, read_text_lines

    f = tmp_path / "in.txt"
    if content == "dir":
        f.mkdir()
    elif content is not None:
        f.write_bytes(content)
    with pytest.raises(DataError) as e:
        read_text_lines(f)
    assert words.format(f=f) in str(e.value)
    if "empty" not in words:  # the streaming reader says the same
        with pytest.raises(DataError) as e:
            list(iter_input_lines(f))
        assert words.format(f=f) in str(e.value)


@pytest.mark.parametrize("name", ["-", "/dev/stdin"])
def test_standard_input_is_read_by_every_reader(monkeypatch, name):
    from bertfamily.data.corpora import read_documents
    from bertfamily.data.table_io import read_id_texts
    from bertfamily.data.text_input import read_text_lines

    def stdin(data: bytes):
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))

    stdin(b"one\n\ntwo\n")
    assert read_text_lines(name, blank="keep") == ["one", "", "two"]
    stdin(b"one\n\ntwo\n")
    assert read_id_texts(name) == ([1, 3], ["one", "two"])  # ids: line numbers
    stdin(b"a b.\nc d.\n\ne f.\n")
    assert read_documents(name) == [["a b.", "c d."], ["e f."]]
    stdin(b"x\n\xff\n")
    with pytest.raises(DataError, match=r"<stdin>:2: not UTF-8"):
        read_text_lines(name)


def test_pretraining_corpus_reader_names_a_bad_jsonl_line(tmp_path):
    from bertfamily.data.corpora import read_documents

    f = tmp_path / "c.jsonl"
    f.write_text('{"text": "fine"}\n{"text": \n')
    with pytest.raises(DataError, match=r"c.jsonl:2: not JSON"):
        read_documents(f)
    f.write_text('{"text": "fine"}\n' + "[" * 100_000 + "\n")
    with pytest.raises(DataError, match=r"c.jsonl:2: not JSON"):
        read_documents(f)
    with pytest.raises(DataError, match="cannot read corpus .*nope.txt: it does not exist"):
        read_documents(tmp_path / "nope.txt")


def test_commands_read_text_inputs_through_the_one_reader(cli, minilm_dir, tmp_path):
    """embed --input, search --corpus, rerank --input and mine-negatives --corpus refuse a
    non-UTF-8 file with the same line; embed reads standard input for ``-``."""
    from typer.testing import CliRunner

    from bertfamily.cli import app

    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine\n\xffbad\n")
    words = f"{bad}:2: not UTF-8"
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text('{"anchor": "a", "positive": "b"}\n')
    for args in (["embed", "--model", minilm_dir, "--input", bad],
                 ["search", "q", "--model", minilm_dir, "--corpus", bad],
                 ["rerank", "q", "--model", minilm_dir, "--input", bad],
                 ["mine-negatives", "-i", pairs, "--model", minilm_dir, "--corpus", bad,
                  "-o", tmp_path / "out.jsonl"]):  # fmt: skip
        result = cli(*args)
        assert result.exit_code == 2, (args, result.output)
        assert words in " ".join(result.output.split()), (args, result.output)
    result = CliRunner().invoke(
        app,
        ["embed", "--model", str(minilm_dir), "--input", "-", "--format", "jsonl"],
        input="first\n\nthird\n",
    )
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert [(r["line"], r["text"]) for r in rows] == [(1, "first"), (2, ""), (3, "third")]
