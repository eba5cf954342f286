"""Issue 17 (training and convert commands): help on every option, honest progress (threads,
ETA under a time budget, loss plot), the partial last batch, the fresh task head, `.onnx`."""

from __future__ import annotations

import pytest
import typer

from bertfamily.cli import app

pytestmark = pytest.mark.usefixtures("one_thread")

MINE = ("pretrain", "distill", "finetune", "predict", "export", "convert")
# TODO(issue 17, other owners): fetch, embed, search, fill-mask, tokenizer, params, dataflow,
# models, explore, attention — walked by `test_every_option_has_help` once they are done.


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


def test_every_option_of_my_commands_has_help():
    root = typer.main.get_command(app)
    problems = []
    for path, cmd in _walk(root):
        if path and path[0] in MINE:
            problems += _problems(path, cmd)
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
