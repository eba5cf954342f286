"""The mistakes an attack on the #48 features found, kept as tests of their mechanisms: every
index kind records the size and SHA-256 of its texts.jsonl (a reordered row would show another
document's id and text), BM25 refuses a corpus with no indexable word, and undecodable
command-line bytes (lone surrogates) are one clear error wherever text is tokenized."""

from __future__ import annotations

import pytest

from bertfamily.errors import InputError, VectorIndexError
from bertfamily.pipelines.retrieval import KIND_CLASSES, open_index
from bertfamily.pipelines.retrieval.base import TEXTS_FILE
from bertfamily.tokenization.cutting import unreadable_input

BAD = "caf\udce9"  # b"caf\xe9" from a command line, as Python decodes argv


def test_every_index_kind_records_its_texts():
    for kind, cls in KIND_CLASSES.items():
        assert TEXTS_FILE in cls.recorded_files, kind


def test_a_reordered_texts_file_is_refused(tmp_path):
    pytest.importorskip("bm25s")
    from bertfamily.pipelines.retrieval.bm25_index import BM25Index

    index = BM25Index.build(["cats sleep all day", "dogs bark loudly", "rain in london"])
    index.save(tmp_path / "i")
    assert open_index(tmp_path / "i").search_texts(["cats"], top_k=1)[0][0].id == 0
    rows = (tmp_path / "i" / TEXTS_FILE).read_text().splitlines(keepends=True)
    (tmp_path / "i" / TEXTS_FILE).write_text("".join([rows[1], rows[0], rows[2]]))
    with pytest.raises(VectorIndexError, match=TEXTS_FILE):
        open_index(tmp_path / "i")


def test_bm25_of_no_indexable_word_and_unreadable_text(tmp_path, cli):
    pytest.importorskip("bm25s")
    from bertfamily.pipelines.retrieval.bm25_index import BM25Index

    with pytest.raises(InputError, match="none of the 2 texts holds an indexable word"):
        BM25Index.build(["the a an", "of the"])
    (tmp_path / "stop.txt").write_text("the a an\nof the\n")
    res = cli("index", "build", "--corpus", tmp_path / "stop.txt", "-o", tmp_path / "s",
              "--kind", "bm25")  # fmt: skip
    assert res.exit_code == 2 and "indexable word" in res.output
    index = BM25Index.build(["cats sleep", "dogs bark"])
    with pytest.raises(InputError, match=r"query 0 is not valid Unicode: b'\\xe9'"):
        index.search_texts([BAD])
    with pytest.raises(InputError, match="text 1 is not valid Unicode"):
        index.add(["fine", BAD])


def test_unreadable_input_names_the_input():
    assert unreadable_input(["fine", ("a", "b")]) is None
    assert unreadable_input(["fine", BAD]).startswith("input 1 is not valid Unicode: b'\\xe9'")
    assert unreadable_input([("a", BAD)]).startswith("input 0 is not valid Unicode")
    assert unreadable_input(["a", 3]) == "input 1 is a int, not a str"


def test_the_tokenizer_refuses_undecodable_text_with_one_line(minilm_tokenizer, minilm_dir, cli):
    with pytest.raises(InputError, match="input 1 is not valid Unicode"):
        minilm_tokenizer(["fine", BAD])
    with pytest.raises(InputError, match="input 0 is not valid Unicode"):
        minilm_tokenizer([("fine", BAD)], truncation=True, max_length=16)
    res = cli("embed", BAD, "--model", minilm_dir)
    assert res.exit_code == 2 and "not valid Unicode" in res.output
    assert "Traceback" not in res.output


def test_a_dense_and_a_colbert_index_are_refused_before_any_model_loads(tmp_path, cli):
    """Both read --model, so they cannot be fused in one search: one line, up front."""
    from bertfamily.pipelines.retrieval.base import META_FILE

    for name, kind in (("d", "flat"), ("c", "colbert")):
        (tmp_path / name).mkdir()
        meta = {"format_version": 1, "kind": kind, "count": 0, "model": None}
        (tmp_path / name / META_FILE).write_text(__import__("json").dumps(meta))
    res = cli("search", "q", "--index", tmp_path / "d", "--index", tmp_path / "c")
    assert res.exit_code == 2
    assert "a dense and a ColBERT index both take their model from --model" in res.output
