"""Fuzzing the shared readers (issue 43): text files, table files (CSV, TSV, JSONL), pair files
(through the training-data validator) and Parquet embedding tables. Whatever the bytes, each
reader gives a correct result or a one-line `BertFamilyError`: never another exception, never a
NaN or infinite vector accepted. Fixed seed (derandomized), a few seconds in all."""

from __future__ import annotations

import io
import json
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bertfamily.data.pairs import read_pairs
from bertfamily.data.table_io import (
    iter_embedding_table,
    read_id_texts,
    table_identity,
    table_metadata,
)
from bertfamily.data.text_input import read_text_lines
from bertfamily.data.validate import check_training_table
from bertfamily.errors import BertFamilyError
from bertfamily.objectives.contrastive import build_loss
from bertfamily.objectives.ranking import build_rerank_loss

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,  # the fixed seed: the same examples on every run
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
# text that stresses decoders and splitters: separators, quotes, line ends of every kind
ALPHABET = st.sampled_from(list("ab ,\t\"'\\{}[]:\n\r\x00\x85\u2028é\ufeff0-.e"))
TEXTS = st.text(ALPHABET, max_size=120)
BYTES = st.one_of(st.binary(max_size=160), TEXTS.map(lambda t: t.encode("utf-8")))
CELL = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 5),
    st.floats(allow_nan=True),
    st.text(ALPHABET, max_size=6),
)


def _one_line_error(fn, *args, **kwargs):
    """``fn``'s result, or None when it raised a one-line BertFamilyError; anything else fails."""
    try:
        return fn(*args, **kwargs)
    except BertFamilyError as e:
        message = str(e)
        assert message and "\n" not in message.strip(), repr(message)
        assert "Traceback" not in message
        return None


# --- text files -------------------------------------------------------------------------------
@SETTINGS
@given(data=BYTES, blank=st.sampled_from(["keep", "skip"]))
def test_text_files(tmp_path_factory, data, blank):
    path = tmp_path_factory.mktemp("text") / "in.txt"
    path.write_bytes(data)
    lines = _one_line_error(read_text_lines, path, blank=blank)
    if lines is None:
        return
    text = data.decode("utf-8-sig")  # read: it was UTF-8
    assert any(lines) and all(line == line.strip() and line in text for line in lines)
    if blank == "skip":
        assert all(lines)


# --- table files --------------------------------------------------------------------------------
def _jsonl(rows: list[dict]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def _csv(rows: list[dict], sep: str) -> bytes:
    import csv

    out = io.StringIO()
    writer = csv.DictWriter(out, ["id", "text"], delimiter=sep)
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue().encode()


ROWS = st.lists(st.fixed_dictionaries({"id": CELL, "text": CELL}), max_size=6)


@SETTINGS
@given(
    rows=ROWS,
    raw=st.one_of(st.none(), BYTES),
    suffix=st.sampled_from([".csv", ".tsv", ".jsonl"]),
)
def test_table_files(tmp_path_factory, rows, raw, suffix):
    """Rows written properly read back as written (texts non-empty strings), or are refused in
    one line; raw bytes are refused or read."""
    path = tmp_path_factory.mktemp("table") / f"in{suffix}"
    if raw is not None:
        path.write_bytes(raw)
    elif suffix == ".jsonl":
        path.write_bytes(_jsonl(rows))
    else:
        path.write_bytes(_csv(rows, "," if suffix == ".csv" else "\t"))
    got = _one_line_error(read_id_texts, path)
    if got is None:
        return
    ids, texts = got
    assert len(ids) == len(texts) and texts
    assert all(isinstance(t, str) and t.strip() for t in texts)
    if raw is None and suffix == ".jsonl":  # JSON keeps types: exactly the good rows
        good = [r for r in rows if isinstance(r["text"], str) and r["text"].strip()]
        assert texts == [r["text"] for r in good]


# --- pair files ---------------------------------------------------------------------------------
RULES = {
    "mnrl": build_loss("mnrl").data_rules,
    "cosine": build_loss("cosine").data_rules,
    "cosent": build_loss("cosent").data_rules,
    "listnet": build_rerank_loss("listnet").data_rules,
    "bce": build_rerank_loss("bce").data_rules,
}
PAIR_ROWS = st.lists(
    st.fixed_dictionaries(
        {"sentence1": st.text(ALPHABET, max_size=5), "sentence2": st.text(ALPHABET, max_size=5),
         "score": st.one_of(st.floats(-10, 10), st.sampled_from([0.0, 1.0, "x", None]))}
    ),
    max_size=6,
)  # fmt: skip


@SETTINGS
@given(rows=PAIR_ROWS, raw=st.one_of(st.none(), BYTES), loss=st.sampled_from(sorted(RULES)))
def test_pair_files_through_the_validator(tmp_path_factory, rows, raw, loss):
    """Accepted training data has at least two rows, no blank text, every label finite and in
    the loss's range; anything else is refused in one line."""
    path = tmp_path_factory.mktemp("pairs") / "train.jsonl"
    path.write_bytes(raw if raw is not None else _jsonl(rows))
    table = _one_line_error(read_pairs, path)
    if table is None:
        return
    rules = RULES[loss]
    if _one_line_error(check_training_table, table, path, rules) is None:
        return
    assert len(table) >= 2 and all(t.strip() for row in table.rows for t in row)
    if table.labels is not None:
        assert all(math.isfinite(y) for y in table.labels)
        if rules.label_range is not None:
            assert all(rules.label_range[0] <= y <= rules.label_range[1] for y in table.labels)
        if rules.ordered_labels:
            assert len(set(table.labels)) > 1


# --- Parquet embedding tables ------------------------------------------------------------------
VALUES = st.one_of(st.floats(-2, 2, width=32), st.sampled_from([math.nan, math.inf, -math.inf]))
VECTOR = st.one_of(st.none(), st.lists(st.one_of(st.none(), VALUES), min_size=2, max_size=4))


def _write_parquet(path, ids, vectors, texts, identity) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table(
        {"id": ids, "vector": pa.array(vectors, pa.list_(pa.float32())), "text": texts}
    )
    meta = {b"bertfamily": json.dumps({"model": identity}).encode()}
    pq.write_table(table.replace_schema_metadata(meta), path)


IDENTITY = st.one_of(
    st.just({"digest": "d" * 64, "dimension": 3, "pooling": "mean"}),
    st.fixed_dictionaries({"digest": CELL, "dimension": CELL, "pooling": CELL}),
)


@SETTINGS
@given(
    rows=st.lists(st.tuples(st.integers(0, 3), VECTOR, st.one_of(st.none(), st.text(max_size=4))),
                  min_size=1, max_size=5),
    identity=IDENTITY,
    damage=st.one_of(st.none(), st.just("cut"),
                     st.tuples(st.integers(0, 4000), st.integers(0, 255))),
)  # fmt: skip
def test_parquet_tables_into_an_index(tmp_path_factory, rows, identity, damage):
    """A Parquet table read for `index build --embeddings`: its metadata, its identity and its
    vectors; a NaN or infinite vector never reaches the index (refused with its row)."""
    pytest.importorskip("pyarrow")
    pytest.importorskip("faiss")
    from bertfamily.pipelines.retrieval.base import ModelIdentity
    from bertfamily.pipelines.retrieval.dense import VectorIndex

    path = tmp_path_factory.mktemp("parquet") / "emb.parquet"
    ids, vectors, texts = (list(c) for c in zip(*rows))
    _write_parquet(path, ids, vectors, texts, identity)
    if damage == "cut":
        path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])
    elif damage is not None:
        data = bytearray(path.read_bytes())
        data[damage[0] % len(data)] = damage[1]
        path.write_bytes(bytes(data))
    texts = _one_line_error(read_id_texts, path)  # the Parquet input of `embed`, `index build`
    if texts is not None:
        assert all(isinstance(t, str) and t.strip() for t in texts[1])
    if _one_line_error(table_metadata, path) is None:
        return
    found = _one_line_error(table_identity, path)
    if found is None:
        return
    index = VectorIndex.create(ModelIdentity(**found)) if found else None
    batches = _one_line_error(lambda: list(iter_embedding_table(path)))
    if batches is None or index is None:
        return
    for batch_ids, batch_vectors, batch_texts in batches:
        if batch_vectors.shape[1:] != (index.identity.dimension,):
            continue  # `from_embeddings` refuses another dimension (its own test)
        added = _one_line_error(index.add_vectors, batch_vectors, batch_texts, batch_ids)
        if added is None:
            continue
        assert np.isfinite(batch_vectors).all()  # accepted only when every value is finite
