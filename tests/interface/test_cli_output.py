"""Issue 17: the command line never gives silent wrong results, and its output pipes.

Everything runs through the real entry points: the `cli` fixture (the typer app in process) or
``python -m bertfamily`` as a subprocess, which is not a terminal.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import typer

SRC = str(Path(__file__).resolve().parents[2] / "src")


def run(*args: str, columns: int = 80) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=SRC, COLUMNS=str(columns))
    return subprocess.run(
        [sys.executable, "-m", "bertfamily", *args],
        capture_output=True,
        text=True,
        encoding="utf-8",
        env=env,
        timeout=600,
    )


# -- silent wrong results ---------------------------------------------------------------------
def test_tokenizer_train_mistyped_path_is_an_error(cli, tmp_path):
    out = tmp_path / "tok"
    result = cli("tokenizer", "train", tmp_path / "nope.txt", "-o", out)
    assert result.exit_code == 2, result.output
    message = " ".join(result.output.split())
    assert f"{tmp_path / 'nope.txt'}: it does not exist" in message
    assert not out.exists()


def test_tokenizer_train_empty_corpus_is_an_error(cli, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n")
    result = cli("tokenizer", "train", empty, "-o", tmp_path / "tok")
    assert result.exit_code == 2, result.output
    assert "empty.txt" in result.output and "empty" in result.output


def test_train_tokenizer_recipe_never_learns_from_a_path_string(tmp_path):
    from bertfamily.tokenization.training import train_tokenizer

    with pytest.raises(ValueError, match="nope.txt"):
        train_tokenizer(tmp_path / "nope.txt", "wordpiece", 100)


@pytest.mark.parametrize("content", [None, "", "\n\n"])
def test_embed_missing_or_empty_input_is_an_error(cli, tmp_path, content):
    path = tmp_path / "in.txt"
    if content is not None:
        path.write_text(content)
    result = cli("embed", "--input", path, "--model", tmp_path)
    assert result.exit_code == 2, result.output
    assert "in.txt" in result.output and ("does not exist" if content is None else "empty") in (
        " ".join(result.output.split())
    )


def test_search_missing_corpus_is_an_error(cli, tmp_path):
    result = cli("search", "q", "--corpus", tmp_path / "corpus.txt", "--model", tmp_path)
    assert result.exit_code == 2, result.output
    assert "corpus.txt" in result.output


def test_embed_one_row_per_input_line(cli, minilm_dir, tmp_path):
    inp = tmp_path / "in.txt"
    inp.write_text("one\n\ntwo three\n\n")
    out = tmp_path / "e.npy"
    result = cli("embed", "--input", inp, "--output", out, "--model", minilm_dir)
    assert result.exit_code == 0, result.output
    vectors = np.load(out)
    assert vectors.shape == (4, 384)
    # an empty line is the embedding of the empty string
    empty = tmp_path / "empty.npy"
    cli("embed", "", "--output", empty, "--model", minilm_dir)
    np.testing.assert_allclose(vectors[1], np.load(empty)[0], atol=1e-5)
    np.testing.assert_allclose(vectors[3], vectors[1], atol=1e-5)
    from bertfamily.cli import app

    params = {p.name: p for p in typer.main.get_command(app).commands["embed"].params}
    assert "empty line gives the embedding of the empty string" in params["input"].help


def test_embed_reports_truncation_and_shortens_long_text(cli, minilm_dir):
    long = " ".join(["word"] * 2000)
    result = cli("embed", long, "short text", "--model", minilm_dir)
    assert result.exit_code == 0, result.output
    assert "1 of 2 inputs" in result.output and "truncated" in result.output
    # no re-tokenising of the long text to report it: its length in characters and its number
    assert "longest: 9,999 characters, number 1" in result.output
    assert long not in result.output
    assert "word word" in result.output and "…" in result.output


def test_search_reports_truncated_corpus_lines_and_queries(cli, minilm_dir, tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("short line\n" + " ".join(["cat"] * 1000) + "\n")
    result = cli("search", " ".join(["dog"] * 1000), "--corpus", corpus, "--model", minilm_dir)
    assert result.exit_code == 0, result.output
    message = " ".join(result.output.split())
    assert "1 of 2 inputs were longer" in message and "1 of 1 queries were longer" in message
    assert "cat cat" in result.output and " ".join(["cat"] * 100) not in result.output


# -- output that pipes ------------------------------------------------------------------------
def test_embed_and_search_jsonl_on_stdout_are_unwrapped_with_text_and_index(minilm_dir, tmp_path):
    text = "a rather long sentence " * 10
    proc = run("embed", "short", text.strip(), "--format", "jsonl", "--model", str(minilm_dir))
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [(r["line"], r["text"]) for r in rows] == [(1, "short"), (2, text.strip())]
    assert len(rows[1]["embedding"]) == 384

    corpus = tmp_path / "c.txt"
    corpus.write_text("The cat sat on the mat.\n\nStock markets fell sharply today.\n")
    proc = run(
        "search", "a cat", "--corpus", str(corpus), "-k", "3", "--format", "jsonl",
        "--model", str(minilm_dir),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(rows) == 2  # the blank line is never a hit
    assert rows[0]["text"] == "The cat sat on the mat." and "index" not in rows[0]
    assert rows[0]["line"] == 1 and rows[0]["query"] == "a cat" and rows[0]["rank"] == 1
    # line numbers count the empty line
    assert {r["line"]: r["text"] for r in rows}[3] == "Stock markets fell sharply today."


def test_scores_never_print_negative_zero():
    from bertfamily.cli.common import fmt_score

    assert fmt_score(-0.0001) == "0.000"
    assert fmt_score(-0.0) == "0.000"
    assert fmt_score(0.0004) == "0.000"
    assert fmt_score(-0.25) == "-0.250"
    assert fmt_score(-0.00004, 4) == "0.0000"


def test_models_in_a_pipe_is_readable():
    proc = run("models")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert max(len(x) for x in lines) <= 80
    from bertfamily.inspect.compare import comparison_rows

    # 20: the 13, and RoFormer, ERNIE, MPNet, ModernBERT base/large, GTE, NomicBERT
    n = len(comparison_rows())
    assert n == 20
    assert len(lines) < 10 * n  # about 9 lines each
    assert "bert-base: 109,482,240 parameters" in proc.stdout
    assert "albert-base" in proc.stdout and "│" not in proc.stdout


def test_models_machine_formats_are_unwrapped():
    csv = run("models", "--format", "csv", columns=40)
    assert csv.returncode == 0, csv.stderr
    from bertfamily.inspect.compare import comparison_rows

    n = len(comparison_rows())
    assert len(csv.stdout.splitlines()) == 1 + n  # header + every model, however narrow
    js = run("models", "--format", "json", columns=40)
    assert len(json.loads(js.stdout)) == n


@pytest.mark.parametrize("command", ["params", "dataflow"])
def test_params_and_dataflow_fit_80_columns(command):
    proc = run(command, "albert-base")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert max(len(x) for x in lines) <= 80, max(lines, key=len)
    assert "(B, T, H)" in proc.stdout
    assert "embeddings.projection" in proc.stdout  # step names are not cut
    if command == "params":
        assert "11,683,584" in proc.stdout


@pytest.mark.parametrize("command", ["params", "dataflow"])
@pytest.mark.parametrize("model", ["deberta-base"])  # the widest names (longformer: test_inspect)
def test_nothing_is_cut_at_80_columns(command, model):
    proc = run(command, model, "--head", "mlm")
    assert proc.returncode == 0, proc.stderr
    assert max(len(x) for x in proc.stdout.splitlines()) <= 80
    assert "…" not in proc.stdout


@pytest.mark.parametrize("command", ["params", "dataflow"])
def test_params_and_dataflow_json_pipes(command):
    proc = run(command, "bert-base", "--json", columns=40)
    assert proc.returncode == 0, proc.stderr
    assert isinstance(json.loads(proc.stdout), dict)


def test_fill_mask_gives_the_true_reason(cli, minilm_dir):
    result = cli("fill-mask", "a [MASK] cat", "--model", "all-MiniLM-L6-v2")
    assert result.exit_code == 2, result.output
    assert "masked-LM head" in result.output
    assert "no tokenizer" not in result.output.lower()


def test_explore_says_what_it_waits_for(cli, monkeypatch, tmp_path):
    """stderr is not a terminal here: one line when the wait starts, one when it ends (a
    download's are tested in test_fetch.py, the spinner in test_notices.py)."""
    from bertfamily.inspect import explore

    monkeypatch.setattr(explore, "write_page", lambda path, *a, **kw: Path(path))
    result = cli("explore", "-o", tmp_path / "x.html")
    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    assert lines[0] == "building the explorer page (tracing every model; may take minutes)…"
    assert lines[1].startswith("building the explorer page (tracing every model; may take ")
    assert " done in " in lines[1] and lines[1].endswith(" s")
    assert result.stdout == ""


MY_COMMANDS = [
    ("fetch",), ("embed",), ("search",), ("fill-mask",), ("params",), ("dataflow",),
    ("models",), ("explore",), ("attention",), ("tokenizer", "train"),
]  # fmt: skip


@pytest.mark.parametrize("path", MY_COMMANDS, ids=" ".join)
def test_every_option_has_help_and_no_raw_list_type(path):
    import click

    from bertfamily.cli import app

    cmd = typer.main.get_command(app)
    for name in path:
        cmd = cmd.commands[name]
    for p in cmd.params:
        if isinstance(p, click.Option):
            assert p.help, f"{' '.join(path)} {p.opts} has no help"
            assert "list[" not in (p.metavar or "")
    proc = run(*path, "--help", columns=100)
    options_panel = proc.stdout.split("Options")[-1]
    assert "<list[" not in options_panel
