"""The command line, through typer's runner (real MiniLM checkpoint)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from bertfamily.cli import app
from bertfamily.cli.options import TrainOptions

runner = CliRunner()


def test_embed_prints_similarity_matrix(minilm_dir):
    result = runner.invoke(
        app, ["embed", "A man is eating food.", "A man eats bread.", "--model", str(minilm_dir)]
    )
    assert result.exit_code == 0, result.output
    assert "cosine similarity" in result.output and "1.000" in result.output


def test_embed_writes_npy_and_jsonl(minilm_dir, tmp_path):
    inp = tmp_path / "in.txt"
    inp.write_text("one\n\ntwo three\nfour\n")
    out = tmp_path / "e.npy"
    result = runner.invoke(
        app, ["embed", "--input", str(inp), "--output", str(out), "--model", str(minilm_dir)]
    )
    assert result.exit_code == 0, result.output
    assert np.load(out).shape == (4, 384)  # one row per line, the empty line included
    out = tmp_path / "e.jsonl"
    runner.invoke(
        app, ["embed", "--input", str(inp), "--output", str(out), "--model", str(minilm_dir)]
    )
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["text"] for r in rows] == ["one", "", "two three", "four"]
    assert [r["line"] for r in rows] == [1, 2, 3, 4]
    assert len(rows[0]["embedding"]) == 384


def test_search(minilm_dir, tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text(
        "The cat sat on the mat.\nStock markets fell sharply today.\n"
        "A kitten is sleeping on a rug.\n"
    )
    result = runner.invoke(
        app,
        ["search", "a cat resting", "--corpus", str(corpus), "-k", "2", "--model", str(minilm_dir)],
    )
    assert result.exit_code == 0, result.output
    assert "Stock" not in result.output


def test_clear_errors(tmp_path):
    result = runner.invoke(app, ["embed", "x", "--model", str(tmp_path / "missing")])
    assert result.exit_code == 2
    assert "neither an existing directory" in " ".join(result.output.split())
    result = runner.invoke(app, ["embed", "--input", str(tmp_path / "nope.txt")])
    assert result.exit_code == 2 and "cannot read" in result.output


# --- the command tree, its entry points and its import cost ------------------------------------

COMMANDS = (
    "fetch",
    "data",
    "embed",
    "search",
    "rerank",
    "serve",
    "index",
    "fill-mask",
    "tokenizer",
    "pretrain",
    "distill",
    "finetune",
    "predict",
    "evaluate",
    "mine-negatives",
    "params",
    "dataflow",
    "models",
    "explore",
    "attention",
    "export",
    "convert",
)


def _listed(help_text: str) -> set[str]:
    return {name for name in COMMANDS if re.search(rf"(?m)^\W*{re.escape(name)}\s", help_text)}


def _run(*args: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "COLUMNS": "120",
        "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )


SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.mark.parametrize("module", ["bertfamily", "bertfamily.cli"])
def test_python_m_help_lists_every_command(module):
    result = _run("-m", module, "--help")
    assert result.returncode == 0, result.stderr
    assert _listed(result.stdout) == set(COMMANDS), result.stdout
    assert "Usage: bertfamily" in result.stdout


def test_help_does_not_import_torch():
    script = (
        "import runpy, sys\n"
        "sys.argv = ['bertfamily', '--help']\n"
        "try:\n"
        "    runpy.run_module('bertfamily', run_name='__main__')\n"
        "except SystemExit as e:\n"
        "    assert e.code in (0, None), e.code\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'numpy') if m in sys.modules)\n"
        "print('HEAVY', heavy)\n"
    )
    result = _run("-c", script)
    assert result.returncode == 0, result.stderr
    assert "HEAVY []" in result.stdout, result.stdout
    assert _listed(result.stdout) == set(COMMANDS)


def test_import_bertfamily_is_lazy():
    result = _run(
        "-c",
        "import sys, bertfamily; assert 'torch' not in sys.modules; "
        "print(sorted(bertfamily.__all__) == sorted(set(dir(bertfamily)) "
        "& set(bertfamily.__all__))); bertfamily.Model; "
        "print('torch' in sys.modules)",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "True"]


def test_public_names():
    import bertfamily
    from bertfamily.checkpoints.convert import CheckpointError
    from bertfamily.pretrained import from_pretrained

    assert bertfamily.from_pretrained is from_pretrained
    assert bertfamily.CheckpointError is CheckpointError
    for name in bertfamily.__all__:
        assert getattr(bertfamily, name) is not None
    with pytest.raises(AttributeError):
        bertfamily.not_a_name  # noqa: B018


def _command_paths(group, prefix: tuple[str, ...] = ()):
    for name, cmd in group.commands.items():
        yield prefix + (name,)
        if hasattr(cmd, "commands"):
            yield from _command_paths(cmd, prefix + (name,))


def test_every_command_help_exits_0():
    paths = list(_command_paths(typer.main.get_command(app)))
    assert {p[0] for p in paths} == set(COMMANDS)
    assert ("distill", "init") in paths and ("tokenizer", "train") in paths
    assert ("convert", "to-longformer") in paths
    for path in paths:
        result = runner.invoke(app, [*path, "--help"])
        assert result.exit_code == 0, (path, result.output)
        assert "Usage:" in result.output


def test_cli_modules_do_not_import_the_package_init():
    """Area modules import only `common` / `options` from the CLI (no cycles); `search
    --index` (embed.py) opens indexes with the `index` command's helpers (index.py imports no
    other area)."""
    import ast

    for path in (SRC / "bertfamily" / "cli").glob("*.py"):
        if path.name in ("__init__.py", "__main__.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                allowed = ("common", "options") + (("index",) if path.name == "embed.py" else ())
                assert node.module in allowed, (path.name, node.module)
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                assert not node.module.startswith("bertfamily"), (path.name, node.module)


# --- the shared training options -----------------------------------------------------------------


def _defaults(*path: str) -> dict:
    cmd = typer.main.get_command(app)
    for name in path:
        cmd = cmd.commands[name]
    return {p.name: p.default for p in cmd.params}


def test_training_options_are_shared_with_per_command_defaults():
    shared = {f.name for f in dataclasses.fields(TrainOptions)}
    pre, dis, fin = _defaults("pretrain"), _defaults("distill"), _defaults("finetune")
    for d in (pre, dis, fin):
        assert shared <= set(d)
    assert (pre["learning_rate"], dis["learning_rate"], fin["learning_rate"]) == (1e-3, 5e-4, 5e-5)
    assert (pre["max_steps"], dis["max_steps"], fin["max_steps"]) == (10000, 10000, None)
    assert (pre["warmup_ratio"], fin["warmup_ratio"]) == (0.05, 0.1)
    assert (pre["save_every"], fin["save_every"]) == (500, 0)
    assert fin["eval_every"] is None and fin["log_every"] is None
    params = typer.main.get_command(app).commands["finetune"].params
    lr = next(p for p in params if p.name == "learning_rate")
    assert set(lr.opts) == {"--lr", "--learning-rate"}


def test_training_options_to_train_config_fields():
    fields = TrainOptions(max_steps=None, learning_rate=0.1, progress=False).train_config_fields()
    assert "max_steps" not in fields and "max_time_s" not in fields
    assert fields["learning_rate"] == 0.1 and fields["progress"] is False
    assert fields["grad_accum_steps"] == 1 and fields["warmup_ratio"] == 0.05
    from bertfamily.train.loop import TrainConfig

    TrainConfig(output_dir="x", **fields)  # every key is a TrainConfig field


def test_finetune_takes_shared_options(monkeypatch, tmp_path):
    import bertfamily.cli.common
    import bertfamily.recipes.finetune
    from bertfamily.train.loop import TrainConfig

    seen = {}

    def fake_finetune(cfg, train=None, *, on_labels=None, **fields):  # finetune's signature
        from bertfamily.recipes.common import train_config

        assert callable(on_labels)  # the command line prints the label set before training
        seen.update(cfg=cfg, train=train_config("finetune", train, **fields))
        return {"eval": None, "labels": ["a"], "seconds": 0.0, "train": {}}

    monkeypatch.setattr(bertfamily.cli.common, "model_path", lambda m: m)
    monkeypatch.setattr(bertfamily.recipes.finetune, "finetune", fake_finetune)
    base = [
        "finetune",
        "--task",
        "classify",
        "--model",
        "m",
        "--train",
        "t.csv",
        "-o",
        str(tmp_path),
    ]
    result = runner.invoke(app, base)
    assert result.exit_code == 0, result.output
    # the defaults fine-tuning always had; log_every 0 = a tenth of the run
    assert seen["train"] == TrainConfig(
        output_dir=tmp_path,
        batch_size=32,
        learning_rate=5e-5,
        warmup_ratio=0.1,
        save_every=0,
        log_every=0,
    )
    assert seen["cfg"].epochs == 3.0 and seen["cfg"].task == "classify"
    result = runner.invoke(
        app,
        base
        + [
            "--learning-rate",
            "1e-4",
            "--seed",
            "3",
            "--precision",
            "bf16",
            "--checkpoint-activations",
            "--parallel",
            "fsdp",
            "--device",
            "cpu",
            "--batch-size",
            "8",
            "--patience",
            "2",
            "--max-steps",
            "7",
        ],
    )
    assert result.exit_code == 0, result.output
    tc = seen["train"]
    assert (tc.learning_rate, tc.seed, tc.precision, tc.device) == (1e-4, 3, "bf16", "cpu")
    assert tc.checkpoint_activations and tc.parallel == "fsdp"
    assert (seen["cfg"].patience, tc.max_steps, tc.batch_size) == (2, 7, 8)
    assert seen["cfg"].epochs is None  # --max-steps wins over --epochs
    result = runner.invoke(app, base + ["--lr", "2e-4"])
    assert seen["train"].learning_rate == 2e-4


# --- the one error handler ------------------------------------------------------------------------


def test_error_handler():
    from bertfamily import errors
    from bertfamily.cli.common import handle_errors

    mini = typer.Typer()

    @mini.command()
    @handle_errors
    def boom(kind: str):
        if kind == "exit":
            raise typer.Exit(code=3)
        raise {
            "input": errors.InputError,
            "data": errors.DataError,
            "unknown": errors.UnknownNameError,
            "fetch": errors.FetchError,
            "os": OSError,
            # not ours: a bug, shown with its traceback
            "value": ValueError,
            "key": KeyError,
            "runtime": RuntimeError,
        }[kind]("bad [MASK] input")

    for kind in ("input", "data", "unknown", "fetch", "os"):
        result = runner.invoke(mini, [kind])
        assert result.exit_code == 2, result.output
        assert "error: bad [MASK] input" in result.output  # one line, unquoted, markup kept
        assert "Traceback" not in result.output
    for kind in ("value", "key", "runtime"):
        result = runner.invoke(mini, [kind])
        assert result.exit_code == 1
        assert "error:" not in result.output
        expected = {"value": ValueError, "key": KeyError, "runtime": RuntimeError}[kind]
        assert isinstance(result.exception, expected)
    assert runner.invoke(mini, ["exit"]).exit_code == 3


def test_an_internal_bug_in_a_command_shows_its_traceback(tmp_path, monkeypatch):
    """A KeyError inside a real command is a bug: the traceback is printed, not "error: …"."""
    import subprocess
    import sys

    code = (
        "import bertfamily.inspect.compare as c\n"
        "def broken(*a, **k):\n"
        "    raise KeyError('internal')\n"
        "c.comparison_rows = broken\n"
        "from bertfamily.cli import app\n"
        "app(['models'], prog_name='bertfamily')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 1
    assert "Traceback" in proc.stderr and "KeyError: 'internal'" in proc.stderr
    assert "error:" not in proc.stderr


def test_verbose_shows_the_traceback_of_a_library_error(tmp_path):
    result = runner.invoke(app, ["-v", "params", str(tmp_path / "missing")])
    assert result.exit_code == 2
    assert "Traceback" in result.output and "error:" in result.output
    quiet = runner.invoke(app, ["params", str(tmp_path / "missing")])
    assert quiet.exit_code == 2 and "Traceback" not in quiet.output
