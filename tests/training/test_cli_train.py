"""Issue 17 (training and convert commands): help on every option, honest progress (threads,
ETA under a time budget, loss plot), the partial last batch (said), the fresh task head, `.onnx`."""

from __future__ import annotations

import json

import pytest
import typer

from bertfamily.cli import app

pytestmark = pytest.mark.usefixtures("one_thread")


def _walk(cmd, path: tuple[str, ...] = ()):
    """Every command under ``cmd`` (typer vendors click: duck-typed)."""
    yield path, cmd
    if hasattr(cmd, "commands"):
        for name, sub in cmd.commands.items():
            yield from _walk(sub, (*path, name))


def _problems(path, cmd) -> list[str]:
    out = []
    ctx = cmd.context_class(cmd, info_name=path[-1] if path else "bertfamily")
    for p in cmd.params:
        where = f"{' '.join(path)} {p.opts[0]}"
        if not (p.help or "").strip():
            out.append(f"{where}: no help")
        record = p.get_help_record(ctx)
        metavar = record[0] if record else p.make_metavar(ctx)
        if "list[" in str(metavar) or "list[" in str(p.metavar or ""):
            out.append(f"{where}: metavar {metavar}")
        if any(o.startswith("--no-no-") for o in p.opts + p.secondary_opts):
            out.append(f"{where}: double negative {p.secondary_opts}")
    return out


def test_every_option_of_every_command_has_help(cli):
    """Help on every option of every command; no ``list[...]`` type label, no double negative,
    in the parameter records and in the rendered ``--help`` page."""
    root = typer.main.get_command(app)
    problems = []
    for path, cmd in _walk(root):
        if not path:
            continue
        problems += _problems(path, cmd)
        text = " ".join(cli(*path, "--help").output.split())
        if "list[" in text:
            problems.append(f"{' '.join(path)} --help shows a list[...] type label")
    assert not problems, "\n".join(problems)


def test_progress_flag_reads_both_ways(cli):
    result = cli("pretrain", "--help")
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    assert "--no-no-progress" not in text and "--progress" in text and "--no-progress" in text
    assert "list[" not in text
    pretrain = typer.main.get_command(app).commands["pretrain"]
    schedule = next(p for p in pretrain.params if p.name == "schedule")
    assert "linear | inverse_sqrt | constant" in schedule.help


# --- through the real entry point -------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_dir(minilm_dir, tmp_path_factory):
    """A tiny random BERT (H=32) with the real WordPiece vocabulary and tokenizer."""
    import torch

    import bertfamily as bf

    torch.manual_seed(0)
    cfg = bf.EncoderConfig.from_preset("tiny-bert", vocab_size=30522, max_position_embeddings=64)
    path = tmp_path_factory.mktemp("tiny-base")
    bf.build_model(cfg).save_pretrained(path)
    bf.load_tokenizer(minilm_dir).save_pretrained(path)
    return path


def test_finetune_says_partial_batch_and_new_head_once(cli, tiny_dir, tmp_path, monkeypatch):
    monkeypatch.delenv("TOKENIZERS_PARALLELISM", raising=False)
    rows = ["text,label"] + [f"{'good' if i % 2 else 'bad'} movie {i},{i % 2}" for i in range(56)]
    (tmp_path / "train.csv").write_text("\n".join(rows) + "\n")
    out = tmp_path / "run"
    result = cli(
        "finetune", "--task", "classify", "--model", tiny_dir, "--train", tmp_path / "train.csv",
        "-o", out, "--batch-size", 16, "--epochs", 1, "--no-progress", "--threads", 1,
        "--log-every", 1,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    text = result.output
    assert text.count("new task head: initialised") == 1
    assert "WARNING" not in text and "missing" not in text.lower()
    assert "threads: 1 torch intra-op (--threads)" in text
    steps = [
        json.loads(line)["step"]
        for line in (out / "metrics.jsonl").read_text().splitlines()
        if json.loads(line).get("split") == "train"
    ]
    assert max(steps) == 3  # 56 // 16: every step a full batch ...
    assert "left out the last partial batch (8 examples" in text  # ... and it says so
    assert (out / "loss.png").stat().st_size > 0


def test_export_requires_onnx_suffix(cli, tiny_dir, tmp_path):
    result = cli("export", tiny_dir, tmp_path / "out.txt")
    assert result.exit_code == 2
    assert ".onnx" in result.output
    assert not (tmp_path / "out.txt").exists()


def test_budget_total_respects_time():
    from bertfamily.train.loop import budget_total

    # 62 steps in 60 s of a 180 s budget: ~186 steps, not 10000 (the old 109-hour ETA)
    assert budget_total(62, 10000, 60.0, 180.0) == 186
    assert budget_total(62, 100, 60.0, 180.0) == 100  # the step budget comes first
    assert budget_total(62, 10000, 60.0, None) == 10000
    assert budget_total(0, 10000, 0.0, 180.0) == 10000  # no speed yet


def test_plot_skipped_with_note_when_nothing_logged(tmp_path, caplog):
    from bertfamily.train.plot import plot_metrics

    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "split": "eval", "eval_loss": 1.0}\n')
    assert plot_metrics(tmp_path / "metrics.jsonl", tmp_path / "loss.png") is None
    assert not (tmp_path / "loss.png").exists()
    assert "not written" in caplog.text
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "split": "train", "loss": 2.0}\n')
    assert plot_metrics(tmp_path / "metrics.jsonl", tmp_path / "loss.png").stat().st_size > 0


def test_training_options_carry_trainconfig_names(cli):
    """`--learning-rate` etc. are `TrainConfig`'s field names; the short forms still work."""
    import dataclasses

    from bertfamily.cli.options import TrainOptions
    from bertfamily.train.config import TrainConfig

    config_fields = {f.name for f in dataclasses.fields(TrainConfig)}
    cli_only = {"threads"}  # a process setting, not part of the run's TrainConfig
    for field in dataclasses.fields(TrainOptions):
        assert field.name in config_fields | cli_only, field.name
    for command in ("pretrain", "distill", "finetune"):
        text = cli(command, "--help").output
        for option in ("--learning-rate", "--grad-accum-steps", "--warmup-ratio", "--max-time-s"):
            assert option in text, (command, option)


def test_finetune_shows_every_phase_when_stderr_is_not_a_terminal(cli, tiny_dir, tmp_path,
                                                                 monkeypatch):  # fmt: skip
    """Issue 46: finetune was silent for minutes before its first metrics line and while it
    evaluated and saved. In a pipe each phase says so, and a line comes every
    `notices.PROGRESS_EVERY_S` seconds while one runs (0 here: every step)."""
    from bertfamily import notices

    monkeypatch.setattr(notices, "PROGRESS_EVERY_S", 0.0)
    rows = ["text,label"] + [f"{'good' if i % 2 else 'bad'} movie {i},{i % 2}" for i in range(40)]
    (tmp_path / "train.csv").write_text("\n".join(rows) + "\n")
    result = cli(
        "finetune", "--task", "classify", "--model", tiny_dir, "--train", tmp_path / "train.csv",
        "--eval", tmp_path / "train.csv", "-o", tmp_path / "run", "--batch-size", 8,
        "--max-steps", 4, "--eval-every", 2, "--threads", 1,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    text = result.output
    for phase in ("reading and tokenizing train.csv…", f"loading {tiny_dir.name}…",
                  "evaluating at step 2…", "evaluating at step 4…",
                  "saving the checkpoint and the model to"):  # fmt: skip
        assert phase in text, phase
    assert "training: step 1/4 (25%), loss " in text and "training: step 4/4 (100%)" in text
    assert text.index("reading and tokenizing") < text.index("training: step 1/4")


def test_a_wait_says_it_is_alive_every_few_seconds_in_a_pipe(monkeypatch, capsys):
    import time

    from bertfamily import notices

    monkeypatch.setattr(notices, "PROGRESS_EVERY_S", 0.05)
    monkeypatch.setattr(notices, "_display", True)
    with notices.waiting("crunching"):
        time.sleep(0.3)
    err = capsys.readouterr().err
    assert err.startswith("crunching…\n") and err.rstrip().endswith("s")
    assert 3 <= err.count("crunching… still running") <= 7
    assert "crunching: done in 0.3 s" in err
