"""Inputs get a clear error or are accepted as transformers accepts them (issue 34, item 3):
input_ids as lists, NumPy arrays or integer tensors of any width; a bare string is one text;
index builds refuse JSONL rows whose text is null, a list or empty; the truncation warning names
the cut rows without tokenising them again."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import bertfamily as bf


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    return bf.build_model(bf.EncoderConfig.from_preset("tiny-bert")).eval()


IDS = [[2, 17, 40, 3], [2, 9, 3, 0]]
MASK = [[1, 1, 1, 1], [1, 1, 1, 0]]


@pytest.mark.parametrize(
    "ids",
    [
        IDS,
        np.array(IDS),
        np.array(IDS, dtype=np.uint8),
        np.array(IDS, dtype=np.int16),
        torch.tensor(IDS, dtype=torch.uint8),
        torch.tensor(IDS, dtype=torch.int32),
        tuple(map(tuple, IDS)),
    ],
    ids=["list", "numpy", "np-uint8", "np-int16", "uint8", "int32", "tuple"],
)
def test_input_ids_in_every_form_transformers_takes(tiny, ids):
    ref = tiny(torch.tensor(IDS), attention_mask=torch.tensor(MASK)).last_hidden_state
    for mask in (MASK, np.array(MASK), torch.tensor(MASK, dtype=torch.bool)):
        out = tiny(ids, attention_mask=mask).last_hidden_state
        assert torch.equal(out, ref)
    assert torch.equal(tiny.encoder(ids, MASK).last_hidden_state, ref)


@pytest.mark.parametrize(
    "ids, message",
    [
        ([[2, 3], [4]], r"input_ids is a ragged list"),
        ([[1.5, 2.0]], r"input_ids must hold integers, got NumPy dtype float64"),
        (np.array([[True, False]]), r"input_ids must hold integers, got NumPy dtype bool"),
        ("hello", r"input_ids must be a torch tensor, a NumPy array or a list of ints, got str"),
        (torch.tensor([[1.0, 2.0]]), r"input_ids must be an integer tensor"),
        ([2, 3, 4], r"input_ids must be \(B, T\), got shape \(3,\)"),
        ([[2, 300]], r"input_ids contain 300, outside \[0, vocab_size=99\)"),
    ],
)
def test_bad_input_ids_get_one_line(tiny, ids, message):
    with pytest.raises(ValueError, match=message) as e:
        tiny(ids)
    assert "\n" not in str(e.value)


@pytest.fixture(scope="module")
def embedder(minilm_dir):
    from bertfamily.pipelines.embedding.embed import SentenceEmbedder

    return SentenceEmbedder(minilm_dir, dtype="fp32")


def test_a_bare_string_is_one_text(embedder):
    one = embedder.encode("hello")
    assert one.shape == (384,)
    assert np.array_equal(one, embedder.encode(["hello"])[0])
    with pytest.raises(ValueError, match=r"texts\[1\] is NoneType"):
        embedder.encode(["a", None])
    with pytest.raises(ValueError, match=r"texts\[0\] is list"):
        embedder.encode([["a", "b"]])


def test_index_build_refuses_null_list_and_empty_texts(cli, minilm_dir, tmp_path):
    from bertfamily.cli.index import read_corpus

    rows = [
        {"id": 1, "text": "a good row"},
        {"id": 2, "text": None},
        {"id": 3, "text": ["a", "list"]},
        {"id": 4, "text": "   "},
        {"id": 5, "text": ""},
        {"id": 6, "text": 42},
    ]
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    with pytest.raises(ValueError) as e:
        read_corpus(path)
    msg = str(e.value)
    assert "4 rows cannot be embedded or indexed" in msg and "'text' is null" in msg
    assert "line 2" in msg
    assert "line 3: 'text' is a list" in msg and "line 4: 'text' is empty" in msg
    assert "(and 1 more)" in msg and "\n" not in msg
    r = cli("index", "build", "--corpus", path, "-o", tmp_path / "idx", "--model", minilm_dir)
    assert r.exit_code == 2 and "cannot be embedded or indexed" in r.output, r.output
    assert not (tmp_path / "idx").exists()
    ok = tmp_path / "ok.jsonl"
    ok.write_text(json.dumps(rows[0]) + "\n" + json.dumps(rows[5]) + "\n", encoding="utf-8")
    assert read_corpus(ok) == (["a good row", "42"], [1, 6])


def test_truncation_warning_names_rows_without_retokenising(cli, minilm_dir, tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("short\n" + "word " * 2000 + "\nother\n", encoding="utf-8")
    r = cli("embed", "-i", src, "-o", tmp_path / "o.npy", "--model", minilm_dir, "--dtype", "fp32")
    assert r.exit_code == 0, r.output
    assert "1 of 3 inputs were longer" in r.output
    from bertfamily.pipelines.embedding.embed import SentenceEmbedder

    emb = SentenceEmbedder(minilm_dir, dtype="fp32")
    emb.encode(["short", "word " * 2000, "other", "word " * 300])
    assert emb.last_truncated == 2 and emb.last_truncated_rows == [1, 3]
