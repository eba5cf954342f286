"""The command line, through typer's runner (real MiniLM checkpoint)."""

from __future__ import annotations

import json

import numpy as np
from typer.testing import CliRunner

from bertfamily.cli import app

runner = CliRunner()


def test_embed_prints_similarity_matrix(minilm_dir):
    result = runner.invoke(app, ["embed", "A man is eating food.", "A man eats bread.",
                                 "--model", str(minilm_dir)])
    assert result.exit_code == 0, result.output
    assert "cosine similarity" in result.output and "1.000" in result.output


def test_embed_writes_npy_and_jsonl(minilm_dir, tmp_path):
    inp = tmp_path / "in.txt"
    inp.write_text("one\n\ntwo three\nfour\n")
    out = tmp_path / "e.npy"
    result = runner.invoke(app, ["embed", "--input", str(inp), "--output", str(out),
                                 "--model", str(minilm_dir)])
    assert result.exit_code == 0, result.output
    assert np.load(out).shape == (3, 384)
    out = tmp_path / "e.jsonl"
    runner.invoke(app, ["embed", "--input", str(inp), "--output", str(out),
                        "--model", str(minilm_dir)])
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["text"] for r in rows] == ["one", "two three", "four"]
    assert len(rows[0]["embedding"]) == 384


def test_search(minilm_dir, tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("The cat sat on the mat.\nStock markets fell sharply today.\n"
                      "A kitten is sleeping on a rug.\n")
    result = runner.invoke(app, ["search", "a cat resting", "--corpus", str(corpus), "-k", "2",
                                 "--model", str(minilm_dir)])
    assert result.exit_code == 0, result.output
    assert "Stock" not in result.output


def test_clear_errors(tmp_path):
    result = runner.invoke(app, ["embed", "x", "--model", str(tmp_path / "missing")])
    assert result.exit_code == 2 and "neither an existing directory" in " ".join(result.output.split())
    result = runner.invoke(app, ["embed", "--input", str(tmp_path / "nope.txt")])
    assert result.exit_code == 2 and "cannot read" in result.output
