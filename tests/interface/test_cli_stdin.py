"""``--version``, and ``-`` / ``/dev/stdin`` as the text input of every command that reads texts
(issue 44, item 5): the answer equals the one for the same lines in a file."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

import bertfamily
from bertfamily.cli import app
from retrieval_dirs import SIZES, classic_cross_encoder

LINES = "the cat sat on the mat\n\nMoby-Dick was written by Herman Melville\na whale\n"


def run(*args, input: str | None = None):
    before = torch.get_num_threads()
    try:
        return CliRunner().invoke(app, [str(a) for a in args], input=input)
    finally:
        torch.set_num_threads(before)


def test_version():
    result = run("--version")
    assert result.exit_code == 0
    assert result.stdout == f"bertfamily {bertfamily.__version__}\n"
    assert bertfamily.__version__.count(".") == 2


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("stdin") / "lines.txt"
    path.write_text(LINES)
    return path


@pytest.fixture(scope="module")
def mlm_dir(tmp_path_factory, minilm_dir):
    import transformers

    path = tmp_path_factory.mktemp("mlm")
    torch.manual_seed(0)
    transformers.BertForMaskedLM(transformers.BertConfig(**SIZES)).eval().save_pretrained(path)
    transformers.AutoTokenizer.from_pretrained(minilm_dir).save_pretrained(path)
    return path


def _same_from_stdin(args_with_file, args_with_stdin, corpus):
    want = run(*args_with_file)
    assert want.exit_code == 0, want.output
    for name in ("-", "/dev/stdin"):
        got = run(*[name if a == "STDIN" else a for a in args_with_stdin], input=LINES)
        assert got.exit_code == 0, got.output
        assert got.stdout == want.stdout and got.stdout.strip()
    return want.stdout


def test_embed_search_rerank_fill_mask_read_stdin(corpus, minilm_dir, mlm_dir, tmp_path):
    m = ("--model", minilm_dir)
    out = _same_from_stdin(
        ("embed", "--input", corpus, *m, "--format", "jsonl"),
        ("embed", "--input", "STDIN", *m, "--format", "jsonl"),
        corpus,
    )
    assert len(out.splitlines()) == 4  # one row a line, the blank one too
    out = _same_from_stdin(
        ("search", "whale", "--corpus", corpus, *m, "--format", "jsonl"),
        ("search", "whale", "--corpus", "STDIN", *m, "--format", "jsonl"),
        corpus,
    )
    assert json.loads(out.splitlines()[0])["line"] == 4
    ce = classic_cross_encoder(tmp_path / "ce", minilm_dir)
    out = _same_from_stdin(
        ("rerank", "whale", "--input", corpus, "--model", ce, "--format", "jsonl"),
        ("rerank", "whale", "--input", "STDIN", "--model", ce, "--format", "jsonl"),
        corpus,
    )
    assert len(out.splitlines()) == 3  # blank lines are no documents
    masked = "the [MASK] sat on the mat\n"
    (tmp_path / "masked.txt").write_text(masked)
    want = run("fill-mask", "--input", tmp_path / "masked.txt", "--model", mlm_dir, "-k", "2")
    got = run("fill-mask", "--input", "-", "--model", mlm_dir, "-k", "2", input=masked)
    assert want.exit_code == got.exit_code == 0, want.output + got.output
    assert got.stdout == want.stdout and "rank" in got.stdout
    assert run("fill-mask", "--model", mlm_dir).exit_code == 2  # no texts at all


def test_index_build_and_bulk_embed_read_stdin(corpus, minilm_dir, tmp_path):
    import faiss

    m = ("--model", minilm_dir)
    assert run("index", "build", "--corpus", corpus, *m, "-o", tmp_path / "a").exit_code == 0
    got = run("index", "build", "--corpus", "-", *m, "-o", tmp_path / "b", input=LINES)
    assert got.exit_code == 0, got.output
    assert f"FAISS file: {tmp_path / 'b' / 'index.faiss'}" in " ".join(got.stderr.split())
    a, b = (faiss.read_index(str(tmp_path / d / "index.faiss")) for d in "ab")
    assert a.ntotal == b.ntotal == 3
    np.testing.assert_array_equal(a.reconstruct_n(0, 3), b.reconstruct_n(0, 3))
    got = run("embed", "--input", "-", *m, "--output", tmp_path / "bulk", input=LINES)
    assert got.exit_code == 0, got.output
    from bertfamily.pipelines.embedding.bulk import load_shards

    vectors = load_shards(tmp_path / "bulk")
    assert vectors.shape == (4, 384)
    np.testing.assert_allclose(vectors[3], a.reconstruct(2), atol=1e-6)
    again = run("embed", "--input", "-", *m, "--output", tmp_path / "bulk", input=LINES)
    assert again.exit_code == 0 and "already finished" in again.stderr  # the same input resumes


def test_tables_read_stdin(monkeypatch):
    """predict --input - --format csv (the table readers share `data.tables.read_text`)."""
    import io
    import sys

    from bertfamily.data.tables import read_table

    body = b"text,label\nhello,a\nbye,b\n"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(body)))
    rows = read_table("-", format="csv")
    assert [(r.text, r.label, r.line) for r in rows] == [("hello", "a", 2), ("bye", "b", 3)]
