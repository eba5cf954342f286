"""Issue 32: what a new user meets. Output that pipes from every command, plain text in and
predictions out, one numbering, limits from the right source, the right gradient by default.

Every instance runs through the real entry point: ``python -m bertfamily`` as a subprocess
(stdout a pipe, ``COLUMNS`` small), the in-process `cli` runner, or the Python API.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

pytestmark = pytest.mark.usefixtures("one_thread")


def run(*args, columns: int = 20, env: dict | None = None) -> subprocess.CompletedProcess:
    """``python -m bertfamily ARGS`` with stdout a pipe and a narrow ``COLUMNS``."""
    environ = dict(os.environ, PYTHONPATH=str(SRC), COLUMNS=str(columns), **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "bertfamily", *map(str, args)],
        capture_output=True,
        text=True,
        encoding="utf-8",
        env=environ,
        timeout=600,
    )


@pytest.fixture(scope="module")
def tiny_dir(minilm_dir, tmp_path_factory):
    """A tiny random BERT (H=32, 64 positions) with the real WordPiece tokenizer."""
    import torch

    import bertfamily as bf

    torch.manual_seed(0)
    cfg = bf.EncoderConfig.from_preset("tiny-bert", vocab_size=30522, max_position_embeddings=64)
    path = tmp_path_factory.mktemp("tiny-base")
    bf.build_model(cfg).save_pretrained(path)
    bf.load_tokenizer(minilm_dir).save_pretrained(path)
    return path


LONG_TEXT = "a sentence long enough that a narrow terminal would wrap its json line " * 2


@pytest.fixture(scope="module")
def classifier(tiny_dir, tmp_path_factory):
    """A classify model fine-tuned for two steps (its predictions only need to exist)."""
    from bertfamily.data.task_data import TaskOptions
    from bertfamily.recipes.finetune import FinetuneConfig, finetune
    from bertfamily.train import TrainConfig

    tmp = tmp_path_factory.mktemp("clf")
    rows = [{"text": f"{w} film number {i}", "label": w} for i in range(4) for w in ("good", "bad")]
    train = tmp / "train.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    finetune(
        FinetuneConfig("classify", tiny_dir, train, None, TaskOptions(max_length=16), epochs=None),
        TrainConfig(output_dir=tmp / "run", batch_size=4, max_steps=2, log_every=0, progress=False),
    )
    return tmp / "run" / "model"


# -- 1. output that pipes, from every command ---------------------------------------------------
def test_predict_jsonl_pipes_at_any_width(classifier, tmp_path):
    data = tmp_path / "in.jsonl"
    texts = [LONG_TEXT, "short"]
    data.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    proc = run("predict", "--task", "classify", "--model", classifier, "-i", data)
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in proc.stdout.splitlines()]  # every line one JSON object
    assert [r["text"] for r in rows] == texts
    assert all(r["label"] in ("good", "bad") and 0.5 <= r["score"] <= 1 for r in rows)


def test_finetune_summary_is_the_only_stdout(tiny_dir, tmp_path):
    rows = ["text,label"] + [f"{'good' if i % 2 else 'bad'} movie {i},{i % 2}" for i in range(8)]
    (tmp_path / "train.csv").write_text("\n".join(rows) + "\n")
    out = tmp_path / "a-run-directory-with-a-long-name-that-would-wrap"
    proc = run(
        "finetune", "--task", "classify", "--model", tiny_dir, "--train", tmp_path / "train.csv",
        "-o", out, "--batch-size", 4, "--max-steps", 1, "--no-progress", "--threads", 1,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)  # the whole of stdout is one JSON document
    assert summary["labels"] == ["0", "1"]
    assert summary["model"] == str(out / "model")
    assert "new task head" in proc.stderr


def test_no_command_prints_json_through_a_rich_console():
    """Every JSON of the CLI goes through `cli.common.write_out` (plain stdout)."""
    offenders = []
    for path in sorted((SRC / "bertfamily" / "cli").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "print_json"
            ):
                offenders.append(f"{path.name}:{node.lineno}")
    assert offenders == []
