"""Issue 32 item 5: the README's commands run as written, under a fresh cache.

The fenced shell commands of the README's sections are extracted and run in order in an empty
directory with ``BERTFAMILY_CACHE`` set to an empty temporary directory. Only the downloads are
faked (`readme_walk`: tiny wheels in the real archives' formats), so every command, its options
and each ``$(bertfamily fetch …)`` are the README's. `bertfamily serve` (it runs until stopped)
is the one line left out; the server has its own tests. In the default run the commands run in
process (the `cli` runner); the `long` test runs the same lines with bash, ``bertfamily`` a real
program.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import readme_walk as walk

pytestmark = pytest.mark.usefixtures("one_thread")

SRC = Path(__file__).resolve().parents[2] / "src"
TESTS = Path(__file__).resolve().parents[1]
LEFT_OUT = ("bertfamily serve ",)
# traced on full-size models (seconds each), and run as written by test_new_user's item-9 test
# (python -m bertfamily dataflow albert-base) and the long bash walk: not again in process
SECTIONS = ("A short tour", "Fine-tune on real data", "Run an exported model with ONNX Runtime")
TRACED = ("bertfamily params ", "bertfamily dataflow ")


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> dict:
    return walk.build_wheels(tmp_path_factory.mktemp("wheels"))


@pytest.fixture
def fresh(wheels, tmp_path):
    """An empty working directory and an empty cache (``BERTFAMILY_CACHE``), the fakes
    installed; yields (work, cache)."""
    work, cache = tmp_path / "work", tmp_path / "cache"
    work.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BERTFAMILY_CACHE", str(cache))
        mp.setenv("OMP_NUM_THREADS", "1")  # training keeps the one thread of `one_thread`
        mp.chdir(work)
        walk.install(wheels, mp.setitem, mp.setattr)
        yield work, cache


def _lines(heading: str) -> list[str]:
    lines = walk.commands(walk.section(heading))
    assert lines, heading
    return [c for c in lines if not c.startswith(LEFT_OUT)]


def _ok(result):
    code = getattr(result, "exit_code", getattr(result, "returncode", None))
    assert code == 0, getattr(result, "output", result)
    return result


def test_the_tour_runs_as_written(cli, fresh):
    work, cache = fresh
    lines = [c for c in _lines("A short tour") if not c.startswith(TRACED)]
    assert lines[0].startswith('bertfamily embed "first sentence"')
    out = {}
    for line in lines:
        t = time.perf_counter()
        out[line] = _ok(walk.run_in_process(cli, line, work))
        print(f"{time.perf_counter() - t:.1f}s {line[:70]}")
    # the default model was fetched into the fresh cache, on first use, and said so
    assert (cache / "all-MiniLM-L6-v2" / ".complete").is_file()
    embed = out[lines[0]]
    assert "fetching all-MiniLM-L6-v2" in embed.stderr and "done in" in embed.stderr
    # the two searches name the same documents by the same line numbers
    texts = (work / "docs.txt").read_text(encoding="utf-8").splitlines()
    assert texts == [
        "A cat sleeps on the sofa.", "Stock markets fell today.", "The train was late.",
    ]  # fmt: skip
    searches = [x for x in lines if x.startswith("bertfamily search")]
    assert len(searches) == 2

    def hits(line):
        rows = [r.replace("│", " ").split() for r in out[line].stdout.splitlines() if "│" in r]
        return [(r[0], r[1], r[2]) for r in rows if r and r[0].isdigit()]  # rank, score, line

    assert len(hits(searches[0])) == 3 and hits(searches[0]) == hits(searches[1])
    assert sorted(int(h[2]) for h in hits(searches[0])) == [1, 2, 3]
    # the section's Python block, as written
    (code,) = walk.blocks(walk.section("A short tour"), "python")
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)
    batch, _, hidden = scope["out"].last_hidden_state.shape
    assert (batch, hidden) == (2, 32)  # the tiny stand-in's H (the real model's is 384)


def test_fine_tuning_on_real_data_runs_as_written(cli, fresh):
    work, cache = fresh
    lines = _lines("Fine-tune on real data")
    out = []
    for line in lines:
        t = time.perf_counter()
        out.append((line, _ok(walk.run_in_process(cli, line, work))))
        print(f"{time.perf_counter() - t:.1f}s {line[:70]}")
    fetched = out[0][1].stdout.splitlines()
    assert fetched == [
        str(cache / "tweet-sentiment" / "tweets.csv"),
        str(cache / "wnut16-ner" / "train.conll"),
    ]
    # the ready files: UTF-8 text,label (the é of a latin-1 byte kept; the \r inside a quoted
    # text kept inside its row), and CoNLL with empty separator lines
    tweets = (cache / "tweet-sentiment" / "tweets.csv").read_bytes().decode().split("\n")
    assert tweets[:2] == ["text,label", "I hate the café car 0,negative"]
    assert '"I hate it.\rreally, car 3","negative"' in tweets  # a row with a \r: all quoted
    conll = (cache / "wnut16-ner" / "train.conll").read_text(encoding="utf-8")
    assert "\t\n" not in conll and conll.count("\n\n") == 30
    # stratified splits: 60 tweets, 20 a label -> 2 of each label to dev and to test
    from bertfamily.data.tables import read_table

    for split, n in (("train", 48), ("dev", 6), ("test", 6)):
        rows = read_table(work / "data" / "tweets" / f"{split}.csv")
        assert len(rows) == n
        assert sorted(r.label for r in rows).count("positive") == n // 3
    # finetune printed its summary; predict wrote one prediction per test row, metrics on stdout
    summaries = [json.loads(r.stdout) for line, r in out if line.startswith("bertfamily finetune")]
    assert [s["model"] for s in summaries] == ["runs/sent/best", "runs/ner/best"]
    metrics = json.loads(
        next(r.stdout for line, r in out if "--task classify" in line and "predict" in line)
    )
    assert set(metrics) >= {"accuracy", "macro_f1"}
    preds = [json.loads(x) for x in (work / "preds.jsonl").read_text().splitlines()]
    test_lines = [r.line for r in read_table(work / "data" / "tweets" / "test.csv")]
    assert [p["line"] for p in preds] == test_lines
    ner = next(r for line, r in out if line.startswith("bertfamily predict --task ner"))
    (row,) = [json.loads(x) for x in ner.stdout.splitlines()]
    assert (row["line"], row["text"]) == (1, "Flying to Paris with Emma Watson tomorrow")
    assert all(row["text"][e["start"] : e["end"]] == e["text"] for e in row["entities"])


def test_the_onnx_snippet_runs_and_gives_the_embedders_vectors(cli, fresh):
    """The README's export command and Python block, run as written: the vectors equal
    `SentenceEmbedder`'s (fp32) on the same sentences; docs/using.md holds the same block."""
    pytest.importorskip("onnxruntime")
    work, _ = fresh
    text = walk.section("Run an exported model with ONNX Runtime")
    (export,) = walk.commands(text)
    _ok(walk.run_in_process(cli, export, work))
    (code,) = walk.blocks(text, "python")
    using = (Path(__file__).resolve().parents[2] / "docs" / "using.md").read_text(encoding="utf-8")
    assert code in walk.blocks(using, "python")
    scope: dict = {"print": lambda *a: None}
    exec(compile(code, "README.md", "exec"), scope)
    from bertfamily.pipelines.embedding.embed import SentenceEmbedder

    ref = SentenceEmbedder("all-MiniLM-L6-v2", dtype="fp32").encode(
        ["A cat sat.", "Stock markets fell."]
    )
    assert scope["vectors"].dtype == np.float32
    np.testing.assert_allclose(scope["vectors"], ref, atol=1e-5)


@pytest.mark.long
def test_the_readme_runs_in_bash(wheels, tmp_path):
    """Every README line of the three sections, with bash and ``bertfamily`` a program."""
    work, cache, bin_dir = tmp_path / "work", tmp_path / "cache", tmp_path / "bin"
    for d in (work, bin_dir):
        d.mkdir()
    plan = walk.write_plan(wheels, tmp_path / "wheels.json")
    program = bin_dir / "bertfamily"
    program.write_text(
        f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -c "
        "'import readme_walk; readme_walk.main()' \"$@\"\n"
    )
    program.chmod(0o755)
    lines = []
    for heading in SECTIONS:
        lines += _lines(heading)
    script = "set -euo pipefail\n" + "\n".join(lines) + "\n"
    env = dict(
        os.environ,
        PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        PYTHONPATH=os.pathsep.join([str(SRC), str(TESTS)]),
        BERTFAMILY_CACHE=str(cache),
        READMEWALK_WHEELS=str(plan),
    )
    proc = subprocess.run(
        ["bash", "-c", script], cwd=work, env=env, capture_output=True, text=True, timeout=1800
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (work / "model.onnx").is_file() and (work / "preds.jsonl").is_file()
    assert (cache / "tweet-sentiment" / "tweets.csv").is_file()
