"""Issue 43, kind 4: every weight source passes the one check of stored weights
(`modules.stored.check_stored_tensors`): model directories, ``checkpoint.pt`` on ``--resume``
and the early-exit students."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file, save_file

from bertfamily.errors import ModelDirectoryError, RunDirectoryError
from bertfamily.heads.early_exit import (
    STUDENTS_WEIGHTS,
    StudentClassifiers,
    load_students,
    save_students,
)
from test_run_directory import train

pytestmark = pytest.mark.usefixtures("one_thread")


def _edit_checkpoint(run, edit):
    payload = torch.load(run / "checkpoint.pt", weights_only=True)
    state = payload["model"]
    name = next(k for k, v in state.items() if v.is_floating_point() and v.dim() == 2)
    edit(state, name)
    torch.save(payload, run / "checkpoint.pt")
    return name


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda s, k: s[k].__setitem__((0, 1), float("nan")), r"holds 1 non-finite values"),
        (lambda s, k: s.__setitem__(k, s[k].long()), r"is stored as int64.*refused, not cast"),
        (lambda s, k: s.__setitem__(k, s[k].double() + 1e-12), r"float64 with values float32"),
        (lambda s, k: s.__setitem__(k, "weights"), r"is a str, not a tensor"),
    ],
    ids=["nan", "int64", "float64-inexact", "not-a-tensor"],
)
def test_resume_refuses_a_weight_a_model_directory_would_refuse(tmp_path, edit, message):
    run = tmp_path / "run"
    train(run, max_steps=1)
    name = _edit_checkpoint(run, edit)
    with pytest.raises(RunDirectoryError, match=message) as info:
        train(run, max_steps=2, resume=True)
    assert name in str(info.value) and "\n" not in str(info.value)


def test_resume_accepts_a_half_precision_copy_of_the_weights(tmp_path):
    run = tmp_path / "run"
    train(run, max_steps=1)
    _edit_checkpoint(run, lambda s, k: s.__setitem__(k, s[k].bfloat16()))
    train(run, max_steps=2, resume=True)  # exact in float32: accepted, as in a model directory


def test_early_exit_students_pass_the_same_check(tmp_path):
    torch.manual_seed(0)
    save_students(StudentClassifiers(2, 16, 3, width=8), tmp_path)
    assert load_students(tmp_path).config["hidden_size"] == 16
    state = load_file(tmp_path / STUDENTS_WEIGHTS)
    name = sorted(k for k, v in state.items() if v.dim() == 2)[0]
    state[name][0, 0] = float("inf")
    save_file(state, tmp_path / STUDENTS_WEIGHTS)
    with pytest.raises(ModelDirectoryError, match=rf"{name}.*non-finite"):
        load_students(tmp_path)
