"""Fuzzing `load_tokenizer`, the task data readers and the server's request bodies with
hypothesis: whatever the files (or bodies) hold, reading either succeeds or raises a documented
error (a ValueError subclass or OSError; for HTTP a 400/413/422 JSON error), never anything else;
rows written in the standard CSV dialect read back as written. Bounded to a few seconds."""

from __future__ import annotations

import json

import pytest
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


# --- rows: what the standard writers write reads back as written (#34 items 3 and 6) -------------

FIELD = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12
)
LABEL = st.sampled_from(["pos", "neg", "neu"]).flatmap(
    lambda name: st.tuples(
        st.sampled_from(["", " ", "\t", "  "]), st.just(name), st.sampled_from(["", " ", "\t"])
    ).map("".join)  # fmt: skip
)


@SETTINGS
@given(
    rows=st.lists(st.tuples(FIELD.filter(lambda t: t.strip()), LABEL), min_size=1, max_size=8),
    fmt=st.sampled_from(["csv", "tsv"]),
)
def test_csv_rows_written_in_the_standard_dialect_read_back_as_written(tmp_path_factory, rows, fmt):
    """Texts holding the delimiter, quotes, line breaks; labels with surrounding whitespace:
    read back exactly (labels stripped), never an extra class."""
    import csv
    import io

    buf = io.StringIO(newline="")
    # the standard dialect: CRLF rows (with "\n" rows csv.writer leaves a lone "\r" unquoted)
    writer = csv.writer(buf, delimiter="," if fmt == "csv" else "\t")
    writer.writerow(["text", "label"])
    for text, label in rows:
        writer.writerow([text, label])
    path = tmp_path_factory.mktemp("rows") / f"data.{fmt}"
    path.write_bytes(buf.getvalue().encode("utf-8"))
    try:
        got = read_table(path)
    except ValueError as e:  # only a space before a quoted field may be refused
        assert "a space before a quote" in str(e), e
        return
    assert [(e.text, e.label) for e in got] == [(t, lab.strip()) for t, lab in rows]
    assert {e.label for e in got} <= {"pos", "neg", "neu"}


@SETTINGS
@given(rows=st.lists(st.dictionaries(st.sampled_from(["text", "label", "id"]), JSON, max_size=3),
                     min_size=1, max_size=5))  # fmt: skip
def test_jsonl_rows_give_strings_or_a_documented_error(tmp_path_factory, rows):
    from bertfamily.data.table_io import iter_id_texts

    path = tmp_path_factory.mktemp("jsonl") / "data.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    try:
        examples = read_table(path)
    except DOCUMENTED:
        pass
    else:
        assert all(isinstance(e.text, str) for e in examples)
    try:
        for ids, texts in iter_id_texts(path):
            assert all(isinstance(t, str) and t.strip() for t in texts) and len(ids) == len(texts)
    except DOCUMENTED:
        pass


# --- HTTP bodies: 400/413/422 with the JSON error shape, never a 500 (#34 item 7) ----------------


@pytest.fixture(scope="module")
def client(minilm_dir, tmp_path_factory):
    from fastapi.testclient import TestClient

    from bertfamily.pipelines.embedding.embed import SentenceEmbedder
    from bertfamily.serve.app import ServeSettings, create_app
    from helpers import save_tiny

    model = SentenceEmbedder(save_tiny(tmp_path_factory.mktemp("fuzz-serve") / "m", minilm_dir))
    app = create_app(model, ServeSettings(max_body_bytes=4096, max_client_batch_size=4))
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


BODY_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(
        st.sampled_from(["inputs", "input", "truncate", "normalize", "dimensions", "model",
                         "encoding_format", "add_special_tokens", "x"]), c, max_size=4),
    max_leaves=12,
)  # fmt: skip


@SETTINGS
@given(
    route=st.sampled_from(["/embed", "/v1/embeddings", "/tokenize", "/similarity", "/embed_all"]),
    body=st.one_of(
        BODY_JSON.map(lambda v: json.dumps(v).encode()),
        st.binary(max_size=64),
        st.text(max_size=64).map(lambda t: t.encode("utf-8", "surrogatepass")),
        st.integers(4000, 6000).map(lambda n: b'{"inputs": "' + b"a" * n + b'"}'),
    ),
)
def test_fuzzed_http_bodies_never_get_a_500(client, route, body):
    r = client.post(route, content=body, headers={"content-type": "application/json"})
    assert r.status_code in (200, 400, 404, 413, 422), (r.status_code, r.text[:200])
    assert r.headers["content-type"].startswith("application/json"), r.text[:200]
    if r.status_code >= 400 and route.startswith("/v1/"):  # OpenAI's error object
        assert set(r.json()) == {"error"}, r.text[:200]
        assert set(r.json()["error"]) == {"message", "type", "param", "code"}, r.text[:200]
    elif r.status_code >= 400:  # TEI's error shape
        assert set(r.json()) == {"error", "error_type"}, r.text[:200]
