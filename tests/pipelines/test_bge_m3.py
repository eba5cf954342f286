"""BGE-M3's three outputs (`pipelines.embedding.bge_m3`) against FlagEmbedding's ``BGEM3FlagModel``
on a tiny random checkpoint saved in its layout: an XLM-RoBERTa directory written by
transformers' ``save_pretrained`` (model and an XLM-R Unigram tokenizer built here), with
``colbert_linear.pt`` (D = 24 ≠ H = 32) and ``sparse_linear.pt`` saved as FlagEmbedding saves
them (``torch.save`` of each ``nn.Linear``'s state dict)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from bertfamily.errors import InputError, ModelDirectoryError
from bertfamily.pipelines.embedding.bge_m3 import (
    BGEM3Encoder,
    is_bge_m3,
    lexical_matching_score,
    m3_json_rows,
)
from helpers import save_tiny_bge_m3

transformers = pytest.importorskip("transformers")
pytest.importorskip("FlagEmbedding")

TRAIN = [
    "The cat sat on the mat.",
    "A dog barked at the mailman.",
    "Paris is the capital of France.",
    "Berlin is a city in Germany.",
    "Le chat dort sur le canapé.",
    "Numbers like 1999 and 2024 appear.",
    "Retrieval with dense, sparse and multi-vector outputs.",
] * 3
TEXTS = [
    "The cat sat on the mat, and the cat slept.",  # repeated ids: the largest weight counts
    "Paris",
    "dog dog dog",
    "A capital city with 2024 numbers in it, longer than the others by far.",
    "",  # only <s> </s>: no lexical weight, one multi-vector
    "Berlin ? <unk> zzz",  # characters outside the vocabulary: <unk> is left out
]
COLBERT_DIM = 24


@pytest.fixture(scope="module")
def m3_dir(tmp_path_factory) -> Path:
    """A tiny BGE-M3 directory: tokenizer (the words of TRAIN), XLM-R trunk and the two heads."""
    return save_tiny_bge_m3(tmp_path_factory.mktemp("bge-m3"), TRAIN, COLBERT_DIM)


@pytest.fixture(scope="module")
def reference(m3_dir):
    from FlagEmbedding import BGEM3FlagModel

    return BGEM3FlagModel(str(m3_dir), use_fp16=False, devices="cpu", colbert_dim=COLBERT_DIM)


@pytest.fixture(scope="module")
def ours(m3_dir) -> BGEM3Encoder:
    return BGEM3Encoder(m3_dir)


def test_three_outputs_equal_flagembedding(ours, reference):
    theirs = reference.encode(
        TEXTS, batch_size=4, return_dense=True, return_sparse=True, return_colbert_vecs=True
    )
    mine = ours.encode(TEXTS, batch_size=3)
    assert mine.dense.shape == (len(TEXTS), 32) and mine.dense.dtype == np.float32
    np.testing.assert_allclose(mine.dense, theirs["dense_vecs"], atol=1e-5, rtol=0)
    assert np.allclose(np.linalg.norm(mine.dense, axis=1), 1, atol=1e-5)
    n_weights = 0
    for i, (vec, lw) in enumerate(zip(mine.sparse, theirs["lexical_weights"])):
        got = {str(k): w for k, w in vec.as_dict().items()}
        assert set(got) == set(lw), TEXTS[i]
        for k in got:
            assert got[k] == pytest.approx(float(lw[k]), abs=1e-5)
        n_weights += len(got)
    assert n_weights > 20 and mine.sparse[4].indices.size == 0  # the empty text has none
    ids = ours.tokenizer("The cat sat on the mat, and the cat slept.", return_tensors=None)
    assert len(set(ids["input_ids"][0])) < len(ids["input_ids"][0])  # a repeated id was merged
    unk = ours.tokenizer.unk_token_id
    assert unk in ours.tokenize([TEXTS[5]]).rows["input_ids"][0]
    assert unk not in mine.sparse[5].indices and unk in ours.dropped_ids
    for i, (vecs, ref) in enumerate(zip(mine.colbert, theirs["colbert_vecs"])):
        n_tokens = len(ours.tokenize([TEXTS[i]]).rows["input_ids"][0])
        assert vecs.shape == ref.shape == (n_tokens - 1, COLBERT_DIM)
        np.testing.assert_allclose(vecs, ref, atol=1e-5, rtol=0)
    # the lexical matching score and the dense / multi-vector scores of the reference
    for a, b in ((0, 3), (0, 0), (1, 3), (5, 3), (2, 3)):
        want = reference.compute_lexical_matching_score(
            theirs["lexical_weights"][a], theirs["lexical_weights"][b]
        )
        # a sum of products of weights each ≤ 2e-6 apart: 1e-5 relative (5.16 here)
        assert lexical_matching_score(mine.sparse[a], mine.sparse[b]) == pytest.approx(
            float(want), rel=1e-5, abs=1e-5
        )
        assert lexical_matching_score(mine.sparse[a], theirs["lexical_weights"][b]) == (
            pytest.approx(float(want), rel=1e-5, abs=1e-5)
        )
    for i in (0, 3):  # weights by token text, as convert_id_to_token decodes them
        want = reference.convert_id_to_token(theirs["lexical_weights"][i])
        assert ours.tokens_of(mine.sparse[i]) == pytest.approx(
            {k: float(v) for k, v in want.items()}, abs=1e-5
        )
    matrix = ours.score_matrix(mine, mine)
    for a, b in ((0, 1), (3, 2), (5, 0)):
        want = reference.colbert_score(theirs["colbert_vecs"][a], theirs["colbert_vecs"][b])
        assert matrix["colbert"][a, b] == pytest.approx(float(want), abs=1e-5)


def test_compute_score_equals_flagembedding(ours, reference):
    pairs = [(TEXTS[i], TEXTS[j]) for i, j in ((0, 3), (1, 3), (5, 3), (1, 1), (2, 3), (4, 0))]
    for weights in (None, [0.4, 0.2, 0.4]):
        # batch_size=1: FlagEmbedding's padded batches let zero vectors of padding into MaxSim
        want = reference.compute_score(pairs, batch_size=1, weights_for_different_modes=weights)
        got = ours.compute_score(pairs, **({"weights": weights} if weights else {}))
        assert set(got) == set(want)
        for mode in want:
            np.testing.assert_allclose(got[mode], want[mode], atol=1e-5, rtol=0, err_msg=mode)
    assert len(set(np.round(got["colbert+sparse+dense"], 4))) == len(pairs)  # not constant
    assert sum(x > 1e-3 for x in got["sparse"]) >= 3 and got["sparse"][4] == 0
    # the score matrix holds the same numbers for every pair
    q, d = ours.encode([p[0] for p in pairs]), ours.encode([p[1] for p in pairs])
    matrix = ours.score_matrix(q, d, weights=[0.4, 0.2, 0.4])
    for mode in want:
        np.testing.assert_allclose(np.diag(matrix[mode]), got[mode], atol=1e-6, err_msg=mode)


def test_outputs_subsets_and_json(ours):
    alone = ours.encode(TEXTS[:3], outputs="sparse")
    assert alone.dense is None and alone.colbert is None and len(alone) == 3
    full = ours.encode(TEXTS[:3])
    assert [v.as_dict() for v in alone.sparse] == [v.as_dict() for v in full.sparse]
    rows = m3_json_rows(full, TEXTS[:3])
    assert rows[1]["text"] == "Paris" and len(rows[1]["dense"]) == 32
    assert np.allclose(rows[0]["colbert"], full.colbert[0])
    assert {int(k): v for k, v in rows[2]["sparse"].items()} == pytest.approx(
        full.sparse[2].as_dict()
    )
    assert json.loads(json.dumps(rows)) == rows
    tokens = ours.tokens_of(full.sparse[1])
    assert tokens and all(isinstance(t, str) for t in tokens)


def test_bad_input_errors(ours, m3_dir, tmp_path):
    with pytest.raises(InputError, match="outputs"):
        ours.encode(["a"], outputs=["dense", "lexical"])
    with pytest.raises(InputError, match="not a string"):
        ours.encode(["a", 3])
    with pytest.raises(InputError, match="max_length"):
        ours.encode(["a"], max_length=10_000)
    with pytest.raises(InputError, match="weights"):
        ours.compute_score([("a", "b")], weights=[1, 1])
    with pytest.raises(InputError, match="wrap one pair"):
        ours.compute_score(("a", "b"))
    with pytest.raises(InputError, match="pair"):
        ours.compute_score([("a", "b", "c")])
    with pytest.raises(InputError, match="all three"):
        ours.score_matrix(ours.encode(["a"], outputs="dense"), ours.encode(["b"]))
    with pytest.raises(TypeError):
        ours.encode(["a"], return_dense=True)  # unknown keyword
    # a plain XLM-R directory, and a head of the wrong shape
    plain = tmp_path / "plain"
    plain.mkdir()
    for f in m3_dir.iterdir():
        if f.name != "sparse_linear.pt":
            (plain / f.name).write_bytes(f.read_bytes())
    assert is_bge_m3(m3_dir) and not is_bge_m3(plain)
    with pytest.raises(ModelDirectoryError, match="lacks sparse_linear.pt"):
        BGEM3Encoder(plain)
    torch.save(torch.nn.Linear(16, 1).state_dict(), plain / "sparse_linear.pt")
    with pytest.raises(ModelDirectoryError, match=r"H = 32"):
        BGEM3Encoder(plain)
    (plain / "sparse_linear.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ModelDirectoryError, match="sparse_linear.pt"):
        BGEM3Encoder(plain)


def test_cli_output_value(cli, m3_dir, ours, tmp_path):
    res = cli("embed", "--model", str(m3_dir), "--output-value", "all", *TEXTS[:2])
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in res.stdout.splitlines()]
    want = m3_json_rows(ours.encode(TEXTS[:2]), TEXTS[:2])
    assert [r["line"] for r in rows] == [1, 2]
    for row, expected in zip(rows, want):
        assert row["text"] == expected["text"] and row["sparse"] == expected["sparse"]
        np.testing.assert_allclose(row["dense"], expected["dense"], atol=1e-6)
        np.testing.assert_allclose(row["colbert"], expected["colbert"], atol=1e-6)
    out = tmp_path / "m3.jsonl"
    res = cli("embed", "--model", str(m3_dir), "--output-value", "sparse", "-o", str(out), "dog")
    assert res.exit_code == 0, res.output
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert set(row) == {"line", "text", "sparse"}
    for bad, message in (
        (["--output-value", "lexical"], "must be dense, sparse, colbert or all"),
        (["--output-value", "dense", "--dimensions", "8"], "drop --dimensions"),
        (["--output-value", "dense", "-o", str(tmp_path / "x.npy")], "FILE.jsonl"),
    ):
        res = cli("embed", "--model", str(m3_dir), *bad, "a text")
        assert res.exit_code == 2 and message in res.output, res.output
