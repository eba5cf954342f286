"""Fuzzing `load_tokenizer` and the task data readers with hypothesis: whatever the files hold,
reading either succeeds or raises a documented error (a ValueError subclass or OSError), never
anything else. Bounded to a few seconds."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bertfamily.data.squad import read_squad
from bertfamily.data.tables import read_conll, read_table
from bertfamily.tokenization import load_tokenizer

SETTINGS = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.text(max_size=6),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=3),
    max_leaves=8,
)
VOCAB = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\ncat\n##s\n"
DOCUMENTED = (ValueError, OSError)


def _only_documented(fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except DOCUMENTED:
        pass  # KeyError, TypeError, UnicodeDecodeError... must never escape


@SETTINGS
@given(
    config=JSON,
    special=JSON,
    vocab=st.one_of(st.binary(max_size=64), st.just(VOCAB.encode())),
)
def test_load_tokenizer_raises_only_documented_errors(tmp_path_factory, config, special, vocab):
    d = tmp_path_factory.mktemp("tok")
    (d / "vocab.txt").write_bytes(vocab)
    (d / "tokenizer_config.json").write_text(json.dumps(config))
    (d / "special_tokens_map.json").write_text(json.dumps(special))
    _only_documented(load_tokenizer, d)


@SETTINGS
@given(
    data=st.one_of(st.binary(max_size=200), st.text(max_size=200).map(str.encode)),
    suffix=st.sampled_from([".csv", ".tsv", ".jsonl"]),
)
def test_read_table_raises_only_documented_errors(tmp_path_factory, data, suffix):
    path = tmp_path_factory.mktemp("table") / f"data{suffix}"
    path.write_bytes(data)
    _only_documented(read_table, path)


@SETTINGS
@given(data=st.one_of(st.binary(max_size=200), st.text(max_size=200).map(str.encode)))
def test_read_conll_raises_only_documented_errors(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("conll") / "data.conll"
    path.write_bytes(data)
    _only_documented(read_conll, path)


@SETTINGS
@given(doc=st.one_of(JSON, st.fixed_dictionaries({"data": JSON})))
def test_read_squad_raises_only_documented_errors(tmp_path_factory, doc):
    path = tmp_path_factory.mktemp("squad") / "data.json"
    path.write_text(json.dumps(doc))
    _only_documented(read_squad, path)


def test_squad_layout_error_names_the_place(tmp_path):
    import pytest

    from bertfamily.data.tables import DataError

    path = tmp_path / "s.json"
    path.write_text(json.dumps({"data": [{"paragraphs": [{"context": "abc"}]}]}))
    with pytest.raises(DataError, match=r"data\[0\]\.paragraphs\[0\].*no 'qas'"):
        read_squad(path)
