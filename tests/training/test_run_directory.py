"""The training run directory trusts nothing on disk (issue 15): a doctored checkpoint runs no
code, unusable files give one clear error naming them, a torn metrics log is repaired on resume,
a kill at any moment leaves ``model/`` old or new (never a mix) and a resumable run, and every
file keeps the user's umask."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import signal
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from bertfamily import build_model
from bertfamily.config import EncoderConfig
from bertfamily.train import (
    IndexedBatches,
    RunDirectoryError,
    TrainConfig,
    Trainer,
    read_metrics,
)
from bertfamily.train.rundir import clean_run_directory, load_tensor_file

V, T = 99, 8

pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py


def tiny_model(heads=("mlm",), **overrides):
    torch.manual_seed(0)
    cfg = EncoderConfig.from_preset("tiny-bert", use_pooler=False, **overrides)
    return build_model(cfg, heads=list(heads))


def dataset(n: int = 16):
    rng = np.random.default_rng(0)
    return [{"input_ids": rng.integers(5, V, T), "labels": rng.integers(5, V, T)} for _ in range(n)]


def loss_fn(model, batch):
    out = model(batch["input_ids"])
    return F.cross_entropy(out.logits.reshape(-1, V), batch["labels"].reshape(-1)), {}


def config(run, **kw):
    base = dict(
        output_dir=run,
        max_steps=3,
        batch_size=4,
        learning_rate=1e-3,
        log_every=1,
        seed=3,
        progress=False,
        device="cpu",
    )
    return TrainConfig(**{**base, **kw})


def train(run, model=None, loss=loss_fn, **kw):
    model = model if model is not None else tiny_model()
    return Trainer(model, loss, IndexedBatches(dataset(), 4, seed=1), config(run, **kw)).train()


def stale_entries(run: Path) -> list[str]:
    found = []
    for d in (run, run / "model", run / "best"):
        try:
            found += [p.name for p in d.iterdir() if ".tmp-" in p.name or ".old-" in p.name]
        except (FileNotFoundError, NotADirectoryError):
            # absent, or renamed away by the saving child between two looks (the polling in
            # test_kill_while_saving_leaves_old_or_new runs while it saves)
            continue
    return found


# ---------------------------------------------------------------- code in pickles


class Marker:
    """Unpickling this object creates a marker file (what ``os.system`` would do, harmless)."""

    def __init__(self, path: Path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_malicious_checkpoint_runs_no_code(tmp_path):
    run, marker = tmp_path / "run", tmp_path / "PWNED"
    train(run, max_steps=1)
    payload = torch.load(run / "checkpoint.pt", weights_only=True)
    payload["state"] = Marker(marker)
    torch.save(payload, run / "checkpoint.pt")
    # the payload is live: an unsafe load would run it
    torch.load(run / "checkpoint.pt", weights_only=False)
    assert marker.exists()
    marker.unlink()

    model = tiny_model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(RunDirectoryError, match=r"checkpoint\.pt.*run code") as e:
        train(run, model=model, max_steps=2, resume=True)
    assert not marker.exists()
    assert isinstance(e.value, ValueError) and "refused" in str(e.value)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_malicious_best_model_state_runs_no_code(tmp_path):
    run, marker = tmp_path / "run", tmp_path / "PWNED"
    scores = iter([0.9, 0.1])

    def eval_fn(model):
        score = next(scores)
        if score < 0.5:  # not a new best: best/ stays, and is read back at the end
            torch.save({"w": Marker(marker)}, run / "best" / "model_state.pt")
        return {"score": score}

    trainer = Trainer(
        tiny_model(),
        loss_fn,
        IndexedBatches(dataset(), 4),
        config(
            run,
            max_steps=2,
            eval_every=1,
            metric_for_best="score",
            greater_is_better=True,
            load_best_at_end=True,
        ),
        eval_fn=eval_fn,
    )
    with pytest.raises(RunDirectoryError, match=r"best/model_state\.pt"):
        trainer.train()
    assert not marker.exists()


# ---------------------------------------------------------------- unusable checkpoints


def _empty(path: Path) -> None:
    path.write_bytes(b"")


def _truncated(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _garbage(path: Path) -> None:
    path.write_bytes(b"not a checkpoint at all\n" * 10)


def _directory(path: Path) -> None:
    path.unlink()
    path.mkdir()
    (path / "x").write_text("x")


def _plain_state_dict(path: Path) -> None:
    torch.save(tiny_model().state_dict(), path)


@pytest.mark.parametrize(
    "damage, problem",
    [
        (_empty, "empty"),
        (_truncated, "corrupt or truncated"),
        (_garbage, "corrupt or truncated"),
        (_directory, "directory"),
        (_plain_state_dict, "not a training checkpoint"),
    ],
)
def test_unusable_checkpoint_is_one_clear_error(tmp_path, damage, problem):
    run = tmp_path / "run"
    train(run, max_steps=1)
    damage(run / "checkpoint.pt")
    with pytest.raises(RunDirectoryError, match=problem) as e:
        train(run, max_steps=2, resume=True)
    assert str(run / "checkpoint.pt") in str(e.value)


@pytest.mark.parametrize(
    "other", [dict(heads=()), dict(hidden_size=64, intermediate_size=128, num_attention_heads=2)]
)
def test_checkpoint_of_another_model(tmp_path, other):
    run = tmp_path / "run"
    train(run, max_steps=1)
    model = tiny_model(**other)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(RunDirectoryError, match=r"checkpoint\.pt holds the weights of another"):
        train(run, model=model, max_steps=2, resume=True)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_checkpoint_weights_pass_the_same_check_as_model_directories(tmp_path):
    """A training checkpoint with a NaN weight is refused on resume with the message a model
    directory gets (one weight check: `checkpoints.io.check_stored_tensors`)."""
    run = tmp_path / "run"
    train(run, max_steps=1)
    payload = torch.load(run / "checkpoint.pt", weights_only=True)
    model_state = payload["model"]
    name = next(k for k, v in model_state.items() if v.is_floating_point() and v.dim() == 2)
    model_state[name][0, 1] = float("nan")
    torch.save(payload, run / "checkpoint.pt")
    with pytest.raises(RunDirectoryError, match=rf"{name}.*non-finite.*not loaded"):
        train(run, max_steps=2, resume=True)


def test_wrong_layout_is_refused_before_training(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoint.pt").mkdir(parents=True)
    with pytest.raises(RunDirectoryError, match=r"checkpoint\.pt is a directory"):
        train(run, max_steps=1)
    (run / "checkpoint.pt").rmdir()
    (run / "model").write_text("a file")
    with pytest.raises(RunDirectoryError, match=r"model is a file"):
        train(run, max_steps=1)


def test_load_tensor_file_missing(tmp_path):
    with pytest.raises(RunDirectoryError, match="does not exist"):
        load_tensor_file(tmp_path / "nope.pt", "checkpoint")


# ---------------------------------------------------------------- metrics.jsonl


def test_torn_metrics_line_then_resume(tmp_path, caplog):
    whole = tmp_path / "whole"
    train(whole, max_steps=6)

    run, calls = tmp_path / "run", {"n": 0}

    def crashing(model, batch):  # a crash (no interrupt checkpoint) during step 5
        calls["n"] += 1
        if calls["n"] == 5:
            raise RuntimeError("killed")
        return loss_fn(model, batch)

    with pytest.raises(RuntimeError, match="killed"):
        train(run, loss=crashing, max_steps=6, save_every=3)
    metrics = run / "metrics.jsonl"
    assert [r["step"] for r in read_metrics(metrics)] == [1, 2, 3, 4]  # checkpoint at 3
    torn = b'{"step": 5, "split": "train", "lo'
    with open(metrics, "ab") as f:
        f.write(torn)
    with caplog.at_level(logging.WARNING, logger="bertfamily.train"):
        assert read_metrics(metrics)[-1]["step"] == 4  # readers skip the torn line
        train(run, max_steps=6, resume=True)
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert f"{metrics}: dropped {len(torn)} bytes" in warned
    assert "dropped 1 records of steps after 3" in warned

    rows = [json.loads(line) for line in metrics.read_text().splitlines()]  # all parse
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6]
    expected = [r["loss"] for r in read_metrics(whole / "metrics.jsonl")]
    assert [r["loss"] for r in rows] == expected  # resume stays exact
    assert (run / "loss.png").stat().st_size > 1000


def test_fresh_run_starts_a_fresh_log(tmp_path):
    run = tmp_path / "run"
    train(run, max_steps=2)
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"step": 9, "spl')
    train(run, max_steps=3)  # no resume: steps 1..3 again, once each
    assert [r["step"] for r in read_metrics(run / "metrics.jsonl")] == [1, 2, 3]


# ---------------------------------------------------------------- stale temporaries, umask


def test_stale_temporaries_are_cleaned_and_swap_recovered(tmp_path):
    run = tmp_path / "run"
    train(run, max_steps=1)
    (run / ".checkpoint.pt.tmp-abc123xy").write_bytes(b"half")
    (run / ".loss.png.tmp-x0000000").write_bytes(b"half")
    (run / ".model.tmp-zz000000").mkdir()
    (run / ".model.tmp-zz000000" / "model_state.pt").write_bytes(b"half")
    os.replace(run / "model", run / ".model.old-12345678")  # killed between the two renames
    clean_run_directory(run, ("model", "best"))
    assert (run / "model" / "model_state.pt").is_file()  # the previous version is back
    assert stale_entries(run) == []
    (run / ".metrics.jsonl.tmp-q0000000").write_bytes(b"half")
    os.replace(run / "model", run / ".model.old-87654321")
    summary = train(run, max_steps=2, resume=True)
    assert summary["step"] == 2
    assert stale_entries(run) == []
    assert (run / "model" / "model_state.pt").is_file()


def test_files_keep_the_users_umask(tmp_path):
    run = tmp_path / "run"
    old = os.umask(0o027)
    try:
        Trainer(
            tiny_model(),
            loss_fn,
            IndexedBatches(dataset(), 4),
            config(run, max_steps=2, eval_every=1, metric_for_best="loss"),
            eval_fn=lambda m: {"loss": 1.0},
            save_fn=lambda m, d: m.save_pretrained(d),
        ).train()
        with open(run / "metrics.jsonl", "a") as f:
            f.write('{"torn')
        train(run, max_steps=3, resume=True)  # the log is rewritten
    finally:
        os.umask(old)
    for name in ("checkpoint.pt", "metrics.jsonl", "loss.png", "model/model_state.pt"):
        assert oct((run / name).stat().st_mode & 0o777) == oct(0o640), name
    for name in ("best/model_state.pt", "best/model.safetensors", "best/config.json"):
        assert oct((run / name).stat().st_mode & 0o777) == oct(0o640), name
    for name in ("model", "best"):
        assert oct((run / name).stat().st_mode & 0o777) == oct(0o750), name


# ---------------------------------------------------------------- kill -9 while saving


def _digest(state: dict) -> str:
    h = hashlib.sha1()
    for k in sorted(state):
        h.update(k.encode())
        h.update(state[k].detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def stamped_save(model, directory: Path) -> None:
    """A save in several files: a stamp, the weights, the HF layout, the stamp again."""
    stamp = _digest(model.state_dict())
    (directory / "first.txt").write_text(stamp)
    torch.save(model.state_dict(), directory / "weights.pt")
    model.save_pretrained(directory)
    (directory / "last.txt").write_text(stamp)


def assert_whole(directory: Path) -> None:
    """``directory`` is one save: every file present and from the same weights."""
    names = {p.name for p in directory.iterdir()}
    expected = {"model_state.pt", "first.txt", "weights.pt", "config.json"}
    assert expected | {"model.safetensors", "last.txt"} <= names, names
    stamp = (directory / "first.txt").read_text()
    assert (directory / "last.txt").read_text() == stamp
    assert _digest(load_tensor_file(directory / "model_state.pt")) == stamp
    assert _digest(load_tensor_file(directory / "weights.pt")) == stamp


def _kill_config(run, max_steps):
    return config(
        run,
        max_steps=max_steps,
        schedule="constant",
        save_every=1,
        eval_every=1,
        metric_for_best="clock",
        resume=True,
    )


def _run_once(run: Path, max_steps: int) -> dict:
    return Trainer(
        tiny_model(),
        loss_fn,
        IndexedBatches(dataset(), 4, seed=1),
        _kill_config(run, max_steps),
        eval_fn=lambda m: {"clock": -time.monotonic()},  # always a new best: best/ saved
        save_fn=stamped_save,
    ).train()


def _child(run: Path, start: int) -> None:
    logging.disable(logging.CRITICAL)
    k = start
    while True:  # one step per call: checkpoint, best/, model/, loss.png written each time
        k += 1
        _run_once(run, k)


@pytest.mark.slow  # about 7 s: 12 kills, each followed by a resume
def test_kill_while_saving_leaves_old_or_new(tmp_path, monkeypatch):
    # loss.png (atomic_write, tested above) is the slow part of a save: left out here
    monkeypatch.setattr("bertfamily.train.loop.plot_metrics", lambda *a: None)
    run = tmp_path / "run"
    step = _run_once(run, 1)["step"]
    rng = random.Random(0)
    landed = {"model": 0, "best": 0}
    for trial in range(12):
        pid = os.fork()
        if pid == 0:  # the child: train and save until killed
            try:
                _child(run, step)
            finally:
                os._exit(1)
        # kill at a random moment of a save of model/ or best/ (every third: at a random time)
        target = ("model", "best", None)[trial % 3]
        if target is None:
            time.sleep(rng.uniform(0.05, 0.6))
        else:
            deadline = time.monotonic() + 5.0
            while time.monotonic() < deadline:
                if any(f".{target}.tmp-" in n for n in stale_entries(run)):
                    time.sleep(rng.choice([0.0, rng.uniform(0.0, 0.01)]))
                    break
                time.sleep(0.0005)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        for name in landed:
            landed[name] += any(n.startswith(f".{name}.") for n in stale_entries(run))

        for name in ("model", "best"):  # old or new or (between two renames) absent
            if (run / name).exists():
                assert_whole(run / name)
        step = load_tensor_file(run / "checkpoint.pt")["state"]["step"]  # never torn
        summary = _run_once(run, step + 1)  # resume
        assert summary["step"] == step + 1
        step = summary["step"]
        assert stale_entries(run) == []
        assert_whole(run / "model")
        assert_whole(run / "best")
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        train_steps = [r["step"] for r in rows if r["split"] == "train"]
        assert train_steps == list(range(1, step + 1))
    assert landed["model"] >= 1 and landed["best"] >= 1, landed  # kills did land inside saves


def test_checkpoint_of_an_older_version_is_named(tmp_path):
    run = tmp_path / "run"
    train(run, max_steps=1)
    payload = torch.load(run / "checkpoint.pt", weights_only=True)
    payload["format"], payload["rng"] = 1, [{"numpy": np.random.get_state()}]
    torch.save(payload, run / "checkpoint.pt")
    with pytest.raises(RunDirectoryError, match=r"checkpoint\.pt.*older bertfamily"):
        train(run, max_steps=2, resume=True)


@pytest.mark.parametrize("damage", ["empty", "malicious"])
def test_cli_resume_reports_the_file(tmp_path, cli, damage):
    corpus = tmp_path / "toy.txt"
    corpus.write_text("\n\n".join(["the sky is blue .\nthe grass is green ."] * 8) + "\n")
    res = cli("tokenizer", "train", corpus, "-o", tmp_path / "tok", "--vocab-size", "60")
    assert res.exit_code == 0, res.output
    run = tmp_path / "run"
    args = ["pretrain", corpus, "-o", run, "--tokenizer", tmp_path / "tok", "--preset"]
    args += ["tiny-bert", "--objectives", "mlm", "--max-length", "16", "--batch-size", "2"]
    args += ["--eval-every", "0", "--no-progress", "--device", "cpu", "--max-steps", "1"]
    assert cli(*args).exit_code == 0
    marker = tmp_path / "PWNED"
    if damage == "empty":
        (run / "checkpoint.pt").write_bytes(b"")
    else:
        payload = torch.load(run / "checkpoint.pt", weights_only=True)
        torch.save({**payload, "state": Marker(marker)}, run / "checkpoint.pt")
    res = cli(*args, "--resume")
    assert res.exit_code == 2 and not marker.exists()
    assert "error:" in res.output and "checkpoint.pt" in res.output
    assert "Traceback" not in res.output
