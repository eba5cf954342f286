"""Fine-tuning runs resume exactly and never mix (issue 34, item 8): two fresh runs with one
seed give bit-identical weights (the task head is built after the seed is applied), a run
killed with SIGKILL at a random moment and resumed with ``resume`` ends with the weights of the
uninterrupted run, a run directory is locked while a run writes it, and a checkpoint with
impossible counters is refused naming the file."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import bertfamily as bf
from bertfamily.errors import RunDirectoryError
from bertfamily.train.rundir import LOCK_FILE, run_lock

pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py

STEPS = 10
# Fast trials in every run of the suite; the 20 under -m slow.
TRIALS, SLOW_TRIALS = 6, 20


@pytest.fixture(scope="module")
def tiny_dir(minilm_dir, tmp_path_factory):
    """A tiny random BERT (H=32, 64 positions) with the real WordPiece tokenizer."""
    torch.manual_seed(0)
    cfg = bf.EncoderConfig.from_preset("tiny-bert", vocab_size=30522, max_position_embeddings=64)
    path = tmp_path_factory.mktemp("tiny-base")
    bf.build_model(cfg).save_pretrained(path)
    bf.load_tokenizer(minilm_dir).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    words = {"pos": ["excellent", "great", "superb"], "neg": ["awful", "dreadful", "bad"]}
    rows = [
        {"text": f"the film was {w} {s}", "label": lab}
        for lab, ws in words.items()
        for w in ws
        for s in ("", "today", "again", "indeed")
    ]
    path = tmp_path_factory.mktemp("data") / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def run_finetune(tiny_dir, table, out: Path, seed: int = 5, resume: bool = False, **kw):
    from bertfamily.data.task_data import TaskOptions
    from bertfamily.recipes.finetune import FinetuneConfig, finetune
    from bertfamily.train import TrainConfig

    cfg = FinetuneConfig("classify", tiny_dir, table, table, TaskOptions(max_length=16))
    cfg.epochs = None
    train = TrainConfig(
        output_dir=out,
        batch_size=4,
        max_steps=STEPS,
        learning_rate=2e-3,
        warmup_ratio=0.1,
        save_every=1,  # a kill lands anywhere between checkpoints
        eval_every=4,
        log_every=1,
        seed=seed,
        resume=resume,
        progress=False,
        device="cpu",
        **kw,
    )
    return finetune(cfg, train)


def weights(run: Path, sub: str = "model") -> dict[str, torch.Tensor]:
    return torch.load(run / sub / "model_state.pt", weights_only=True)


def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def losses(run: Path) -> list[tuple[int, float]]:
    recs = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["loss"]) for r in recs if r.get("split") == "train"]


@pytest.fixture(scope="module")
def reference(tiny_dir, table, tmp_path_factory):
    """One uninterrupted run: (directory, seconds a warm run takes)."""
    root = tmp_path_factory.mktemp("reference")
    run_finetune(tiny_dir, table, root / "warm-up")
    t0 = time.monotonic()
    run_finetune(tiny_dir, table, root / "run")
    return root / "run", time.monotonic() - t0


def test_two_fresh_runs_with_one_seed_are_bit_identical(tiny_dir, table, reference, tmp_path):
    ref, _ = reference
    run_finetune(tiny_dir, table, tmp_path / "again")
    assert same(weights(ref), weights(tmp_path / "again"))
    assert same(weights(ref, "best"), weights(tmp_path / "again", "best"))
    assert losses(ref) == losses(tmp_path / "again")
    assert len(losses(ref)) == STEPS
    run_finetune(tiny_dir, table, tmp_path / "other", seed=6)
    assert not same(weights(ref), weights(tmp_path / "other"))  # the seed matters


def _train_lines(run: Path) -> list[bytes]:
    try:
        return [x for x in (run / "metrics.jsonl").read_bytes().splitlines() if b'"train"' in x]
    except FileNotFoundError:
        return []


def _kill_and_resume(tiny_dir, table, reference, root: Path, trials: int) -> list[int]:
    ref, seconds = reference
    rng = np.random.default_rng(34)
    killed_at: list[int] = []
    for trial in range(trials):
        out = root / f"trial{trial}"
        pid = os.fork()
        if pid == 0:  # the child: the run that gets killed
            code = 0
            try:
                run_finetune(tiny_dir, table, out)
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        # kill after a random number of logged steps, at a random moment within the next
        # step (its forward, backward, checkpoint write, evaluation or best/ save)
        target = int(rng.integers(0, STEPS))
        deadline = time.monotonic() + 60
        while len(_train_lines(out)) < target and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(float(rng.uniform(0.0, 1.5)) * seconds / STEPS)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        step = 0
        if (out / "checkpoint.pt").exists():
            step = torch.load(out / "checkpoint.pt", weights_only=True)["state"]["step"]
        killed_at.append(step)
        run_finetune(tiny_dir, table, out, resume=True)
        assert same(weights(out), weights(ref)), f"trial {trial}: killed after step {step}"
        assert same(weights(out, "best"), weights(ref, "best")), trial
        assert losses(out) == losses(ref), trial  # the log holds every step once
    return killed_at


def test_sigkill_then_resume_is_bit_identical(tiny_dir, table, reference, tmp_path):
    killed_at = _kill_and_resume(tiny_dir, table, reference, tmp_path, TRIALS)
    assert len(killed_at) == TRIALS and any(0 < s < STEPS for s in killed_at), killed_at


@pytest.mark.slow
@pytest.mark.long
def test_sigkill_then_resume_is_bit_identical_20_trials(tiny_dir, table, reference, tmp_path):
    killed_at = _kill_and_resume(tiny_dir, table, reference, tmp_path, SLOW_TRIALS)
    assert len(set(killed_at)) >= 5, killed_at  # the kills landed at many points


def _hold_lock(directory: Path) -> int:
    """A child process holding ``directory``'s run lock until it is killed."""
    directory.mkdir(parents=True, exist_ok=True)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read)
            with run_lock(directory):
                os.write(write, b"x")
                time.sleep(60)
        finally:
            os._exit(0)
    os.close(write)
    assert os.read(read, 1) == b"x"
    os.close(read)
    return pid


def test_a_second_run_into_one_directory_is_refused(tiny_dir, table, tmp_path, cli):
    out = tmp_path / "run"
    pid = _hold_lock(out)
    try:
        with pytest.raises(RunDirectoryError, match=rf"being written by another run \(pid {pid}\)"):
            run_finetune(tiny_dir, table, out)
        args = ["finetune", "--task", "classify", "--model", tiny_dir, "--train", table]
        r = cli(*args, "-o", out, "--max-steps", "1", "--no-progress")
        assert r.exit_code == 2 and f"another run (pid {pid})" in r.output, r.output
        assert not (out / "metrics.jsonl").exists()  # nothing was written into the run
    finally:
        os.kill(pid, signal.SIGKILL)  # the kernel drops a killed holder's lock
        os.waitpid(pid, 0)
    with run_lock(out):  # free again, and re-entrant within one process
        with run_lock(out):
            pass
    assert (out / LOCK_FILE).is_file()


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda p: p["state"].update(step=-5), r"state\.step is -5"),
        (lambda p: p["state"].update(epoch=1.5), r"state\.epoch is 1\.5"),
        (lambda p: p["state"].update(best_step=99), r"best_step is 99"),
        (lambda p: p["state"].update(best_metric=float("nan")), r"best_metric is nan"),
        (lambda p: p["state"].update(step=7), r"schedule is at step 10 but the counters at step 7"),
        (lambda p: p["state"].update(surprise=1), r"unknown counters \['surprise'\]"),
        (
            lambda p: next(iter(p["optimizer"]["state"].values())).update(step=torch.tensor(99.0)),
            r"optimizer step of 'encoder\.embeddings\.token\.weight'",
        ),
        (
            lambda p: next(iter(p["optimizer"]["state"].values())).update(
                exp_avg=torch.zeros(3, 2)
            ),
            r"exp_avg of 'encoder\.embeddings\.token\.weight' has shape \(3, 2\)",
        ),
        (
            lambda p: next(iter(p["optimizer"]["state"].values()))["exp_avg_sq"].fill_(
                float("inf")
            ),
            r"exp_avg_sq of 'encoder\.embeddings\.token\.weight' is not finite",
        ),
    ],
)
def test_checkpoint_with_wrong_counters_names_the_file(
    tiny_dir, table, reference, tmp_path, edit, message
):
    import shutil

    out = tmp_path / "run"
    shutil.copytree(reference[0], out)
    payload = torch.load(out / "checkpoint.pt", weights_only=True)
    edit(payload)
    torch.save(payload, out / "checkpoint.pt")
    with pytest.raises(RunDirectoryError, match=message) as e:
        run_finetune(tiny_dir, table, out, resume=True)
    assert str(out / "checkpoint.pt") in str(e.value) and "\n" not in str(e.value)
