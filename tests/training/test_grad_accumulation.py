"""Gradient accumulation normalises every loss term over the whole optimizer step: an
accumulated step (and a data-parallel one) has the gradient of one merged batch, whatever the
number of units (masked tokens, sequences, labelled tokens, answer positions) each micro-batch
or rank holds.

Each case: micro-batch A holds 1 unit, B holds 8 (or several sequences). The reference is the
gradient of the objective's plain per-unit mean on the merged batch A+B; the trainer's step
gradient is read just before the optimizer step. Without ``count_fn`` (each micro-batch's mean
weighted equally) the difference is large; with it, below 1e-5 relative.
"""

from __future__ import annotations

import json
import os
import socket

import numpy as np
import pytest
import torch

from bertfamily import build_model
from bertfamily.build import build_span_boundary_head
from bertfamily.config import EncoderConfig
from bertfamily.heads.losses import task_counts, task_loss
from bertfamily.objectives.distillation import DistilBertObjective, TinyBertObjective
from bertfamily.objectives.pretraining import MLMCollator, PretrainingModel
from bertfamily.train import IndexedBatches, TrainConfig, Trainer
from bertfamily.train.distributed import DistInfo
from helpers import torchrun_env

V, T = 99, 8
TOL = 1e-5

pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py


# --- batches --------------------------------------------------------------------------------


def mlm_batch(masked: list[int], seed: int, lengths: list[int] | None = None, sbo=False):
    """Rows of length T (real tokens ``lengths``), row r with ``masked[r]`` predicted tokens
    (a contiguous span from position 1), pair labels, and the SBO fields."""
    rng = np.random.default_rng(seed)
    B = len(masked)
    lengths = lengths or [T] * B
    ids = rng.integers(5, V, (B, T))
    mask = (np.arange(T)[None] < np.asarray(lengths)[:, None]).astype(np.int64)
    ids = np.where(mask == 1, ids, 0)
    labels = np.full((B, T), -100, np.int64)
    for r, n in enumerate(masked):
        labels[r, 1 : 1 + n] = rng.integers(5, V, n)
    batch = {
        "input_ids": torch.as_tensor(ids),
        "attention_mask": torch.as_tensor(mask),
        "token_type_ids": torch.zeros(B, T, dtype=torch.int64),
        "labels": torch.as_tensor(labels),
        "pair_labels": torch.as_tensor(rng.integers(0, 2, B)),
    }
    if sbo:
        batch.update(MLMCollator._sbo_fields(labels))
    return batch


def merge(*batches):
    return {k: torch.cat([b[k] for b in batches]) for k in batches[0]}


# --- the trainer's step gradient and the reference -------------------------------------------


def step_gradient(model, loss_fn, micro, tmp_path, k, count_fn=None):
    """The gradient the trainer applies in its first step over ``micro`` (k per step) and the
    logged train values of that step."""
    cfg = TrainConfig(
        output_dir=tmp_path,
        max_steps=1,
        grad_accum_steps=k,
        learning_rate=1e-3,
        max_grad_norm=None,
        log_every=1,
        progress=False,
        device="cpu",
    )
    trainer = Trainer(model, loss_fn, list(micro), cfg, count_fn=count_fn)
    grads: dict[str, torch.Tensor] = {}

    def capture(optimizer, args, kwargs):
        for n, p in trainer.model.named_parameters():
            if p.grad is not None:
                grads[n] = p.grad.detach().clone()

    trainer.optimizer.register_step_pre_hook(capture)
    trainer.train()
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    return grads, [r for r in rows if r["split"] == "train"][-1]


def reference_gradient(model, loss):
    model.zero_grad(set_to_none=True)
    loss.backward()
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def rel_diff(got: dict, want: dict) -> float:
    names = sorted(set(got) | set(want))
    a = torch.cat([got.get(n, torch.zeros_like(want.get(n))).flatten() for n in names])
    b = torch.cat([want.get(n, torch.zeros_like(got.get(n))).flatten() for n in names])
    return float((a - b).norm() / b.norm())


def check(make, loss_fn, plain_loss, count_fn, micro, tmp_path, k=None):
    """Accumulated (count_fn) = merged within TOL; the old equal weighting is far off. Returns
    (new difference, old difference)."""
    k = k or len(micro)
    model = make()
    loss, parts = plain_loss(model, merge(*micro))
    want = reference_gradient(model, loss)
    got, logged = step_gradient(make(), loss_fn, micro, tmp_path / "new", k, count_fn)
    old, _ = step_gradient(  # count_fn=False: the model's own counts switched off
        make(), lambda m, b: plain_loss(m, b), micro, tmp_path / "old", k, count_fn=False
    )
    new_diff, old_diff = rel_diff(got, want), rel_diff(old, want)
    assert new_diff < TOL, new_diff
    assert old_diff > 0.1, old_diff  # the bug: each micro-batch's mean weighted equally
    assert logged["loss"] == pytest.approx(loss.item(), rel=1e-5)  # the per-unit mean
    for name, v in parts.items():
        assert logged[name] == pytest.approx(float(v), rel=1e-5, abs=1e-7), name
    return new_diff, old_diff


# --- pretraining --------------------------------------------------------------------------------


def tiny_config(**kw):
    return EncoderConfig.from_preset(
        "tiny-bert", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **kw
    )


def tiny_mlm(pair=False, sbo=False):
    torch.manual_seed(0)
    config = tiny_config(use_pooler=pair)
    model = build_model(config, heads=["mlm"] + (["pair"] if pair else []))
    sbo_head = build_span_boundary_head(config, model) if sbo else None
    return PretrainingModel(model, sbo_head, pair_objective=pair)


def test_mlm_one_token_and_eight_tokens_equal_the_merged_batch(tmp_path):
    a, b = mlm_batch([1], seed=1), mlm_batch([4, 4], seed=2)
    probe = tiny_mlm()
    assert probe.counts(a) == {"mlm": 1, "pair": 0, "sbo": 0}
    assert probe.counts(b)["mlm"] == 8
    new, old = check(
        tiny_mlm,
        lambda m, batch, d: m(batch, d),
        lambda m, batch: m(batch),
        probe.counts,
        [a, b],
        tmp_path,
    )
    print(f"MLM: accumulated vs merged {new:.2e} (equal weighting: {old:.2f})")


def test_mlm_nsp_sbo_each_term_by_its_own_units(tmp_path):
    # A: 1 sequence, 1 masked token; B: 3 sequences, 8 masked tokens (spans for SBO).
    a, b = mlm_batch([1], seed=3, sbo=True), mlm_batch([3, 3, 2], seed=4, sbo=True)

    def make():
        return tiny_mlm(pair=True, sbo=True)

    probe = make()
    assert probe.counts(merge(a, b)) == {"mlm": 9, "pair": 4, "sbo": 9}
    new, old = check(
        make,
        lambda m, batch, d: m(batch, d),
        lambda m, batch: m(batch),
        probe.counts,
        [a, b],
        tmp_path,
    )
    print(f"MLM+NSP+SBO: {new:.2e} (equal weighting: {old:.2f})")


def test_trainer_uses_the_objectives_counts_by_default(tmp_path):
    """Issue 32 item 8: `Trainer` given a `PretrainingModel` and grad_accum_steps=2 but no
    count_fn takes the step of the merged batch (as the recipes do), with a loss_fn of two
    arguments or of three."""
    a, b = mlm_batch([1], seed=3, sbo=True), mlm_batch([3, 3, 2], seed=4, sbo=True)

    def make():
        return tiny_mlm(pair=True, sbo=True)

    model = make()
    want = reference_gradient(model, model(merge(a, b))[0])
    diffs = {}
    for name, loss_fn, count_fn in (
        ("two", lambda m, batch: m(batch), None),
        ("three", lambda m, batch, d: m(batch, d), None),
        ("off", lambda m, batch: m(batch), False),
    ):
        got, logged = step_gradient(make(), loss_fn, [a, b], tmp_path / name, 2, count_fn)
        diffs[name] = rel_diff(got, want)
    print(f"default counts: {diffs}")
    assert diffs["two"] < TOL and diffs["three"] < TOL
    assert diffs["off"] > 0.5  # each micro-batch's mean weighted equally (issue: 1.28)
    # outside a Trainer step the objective is its batch's plain mean again
    loss, _ = model(a)
    assert loss.item() == pytest.approx(model(a, None)[0].item())


# --- distillation ------------------------------------------------------------------------------


def _teacher(heads):
    torch.manual_seed(0)
    teacher = build_model(tiny_config(num_hidden_layers=4), heads=list(heads)).eval()
    if "mlm" in heads:
        with torch.no_grad():  # peaked soft targets
            teacher.mlm_head.bias.normal_(0.0, 3.0)
    return teacher


def test_distilbert_terms_by_tokens_and_masked_tokens(tmp_path):
    teacher = _teacher(["mlm"])

    def make():
        torch.manual_seed(1)
        cfg = EncoderConfig.from_preset(
            "tiny-distilbert", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0
        )
        return DistilBertObjective(build_model(cfg, heads=["mlm"]), teacher)

    # A: 1 sequence of 3 real tokens, 1 masked; B: 2 full sequences, 8 masked.
    a = mlm_batch([1], seed=5, lengths=[3])
    b = mlm_batch([4, 4], seed=6)
    assert make().counts(a) == {"tokens": 3, "mlm": 1}
    new, old = check(
        make,
        lambda m, batch, d: m(batch, d),
        lambda m, batch: m(batch),
        make().counts,
        [a, b],
        tmp_path,
    )
    print(f"DistilBERT: {new:.2e} (equal weighting: {old:.2f})")


def test_tinybert_terms_by_tokens_and_token_pairs(tmp_path):
    teacher = _teacher([])

    def make():
        torch.manual_seed(1)
        return TinyBertObjective(build_model(tiny_config(hidden_size=16)), teacher)

    a = mlm_batch([0], seed=7, lengths=[2])
    b = mlm_batch([0, 0, 0], seed=8, lengths=[8, 6, 7])
    assert make().counts(a) == {"tokens": 2, "pairs": 4}
    assert make().counts(b) == {"tokens": 21, "pairs": 64 + 36 + 49}
    new, old = check(
        make,
        lambda m, batch, d: m(batch, d),
        lambda m, batch: m(batch),
        make().counts,
        [a, b],
        tmp_path,
    )
    print(f"TinyBERT: {new:.2e} (equal weighting: {old:.2f})")


# --- fine-tuning ----------------------------------------------------------------------------------

INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def _task_fns(head):
    def loss_fn(m, batch, d):
        return task_loss(head, m(**{k: batch[k] for k in INPUTS}), batch, denominators=d), {}

    def plain(m, batch):
        return task_loss(head, m(**{k: batch[k] for k in INPUTS}), batch), {}

    return loss_fn, plain, (lambda batch: task_counts(head, batch))


def _task_model(head, labels=("a", "b", "c")):
    def make():
        torch.manual_seed(0)
        return build_model(tiny_config(label_names=labels), heads=[head])

    return make


def test_token_classification_by_labelled_tokens(tmp_path):
    a, b = mlm_batch([1], seed=9), mlm_batch([4, 4], seed=10)
    for batch in (a, b):
        batch["labels"] = torch.where(batch["labels"] >= 0, batch["labels"] % 3, -100)
    loss_fn, plain, count = _task_fns("tokens")
    assert count(a) == {"tokens": 1} and count(b) == {"tokens": 8}
    new, old = check(_task_model("tokens"), loss_fn, plain, count, [a, b], tmp_path)
    print(f"token classification: {new:.2e} (equal weighting: {old:.2f})")


def test_sequence_task_with_unequal_sequence_counts(tmp_path):
    a, b = mlm_batch([0], seed=11, lengths=[4]), mlm_batch([0] * 8, seed=12)
    a["labels"], b["labels"] = torch.tensor([2]), torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])
    loss_fn, plain, count = _task_fns("classify")
    assert count(a) == {"sequences": 1} and count(b) == {"sequences": 8}
    new, old = check(_task_model("classify"), loss_fn, plain, count, [a, b], tmp_path)
    print(f"sequence classification: {new:.2e} (equal weighting: {old:.2f})")


def test_question_answering_by_answer_positions(tmp_path):
    a, b = mlm_batch([0], seed=13), mlm_batch([0] * 4, seed=14)
    a["start_positions"], a["end_positions"] = torch.tensor([2]), torch.tensor([3])
    # one answer cut off by truncation (position T: no loss, no unit)
    b["start_positions"], b["end_positions"] = (
        torch.tensor([1, 0, 5, T]),
        torch.tensor([2, 0, 6, T]),
    )
    for batch in (a, b):
        del batch["labels"]
    loss_fn, plain, count = _task_fns("qa")
    assert count(b) == {"start": 3, "end": 3}
    new, old = check(_task_model("qa"), loss_fn, plain, count, [a, b], tmp_path)
    print(f"QA: {new:.2e} (equal weighting: {old:.2f})")


# --- the trainer ---------------------------------------------------------------------------------


def test_count_fn_must_give_the_same_terms(tmp_path):
    a, b = mlm_batch([1], seed=1), mlm_batch([4, 4], seed=2)
    keys = iter([{"mlm": 1}, {"mlm": 8, "pair": 2}])
    with pytest.raises(ValueError, match="terms"):
        step_gradient(
            tiny_mlm(), lambda m, batch, d: m(batch, d), [a, b], tmp_path, 2, lambda _: next(keys)
        )


def _examples(n=24, seed=0):
    """Rows with 0 to 5 predicted tokens each, so micro-batches hold unequal counts."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        labels = np.full(T, -100, np.int64)
        k = int(rng.integers(0, 6))
        labels[1 : 1 + k] = rng.integers(5, V, k)
        rows.append(
            {
                "input_ids": rng.integers(5, V, T),
                "attention_mask": np.ones(T, np.int64),
                "token_type_ids": np.zeros(T, np.int64),
                "labels": labels,
            }
        )
    return rows


def test_resume_with_count_fn_is_exact(tmp_path):
    data = _examples()

    def make():
        torch.manual_seed(0)
        return PretrainingModel(
            build_model(EncoderConfig.from_preset("tiny-bert", use_pooler=False), heads=["mlm"]),
            pair_objective=False,
        )

    def cfg(out, **kw):
        return TrainConfig(
            output_dir=out,
            max_steps=7,
            grad_accum_steps=2,
            learning_rate=1e-3,
            log_every=1,
            seed=3,
            progress=False,
            device="cpu",
            **kw,
        )

    def loss_fn(m, batch, d):
        return m(batch, d)

    m1 = make()
    Trainer(
        m1, loss_fn, IndexedBatches(data, 4, seed=1), cfg(tmp_path / "one"), count_fn=m1.counts
    ).train()
    calls = {"n": 0}

    def interrupting(m, batch, d):
        calls["n"] += 1
        if calls["n"] == 8:  # second micro-batch of step 4
            raise KeyboardInterrupt
        return loss_fn(m, batch, d)

    m2 = make()
    s = Trainer(
        m2, interrupting, IndexedBatches(data, 4, seed=1), cfg(tmp_path / "two"), count_fn=m2.counts
    ).train()
    assert s["stopped"] == "interrupted" and s["step"] == 3
    m3 = make()
    torch.manual_seed(123)
    s = Trainer(
        m3,
        loss_fn,
        IndexedBatches(data, 4, seed=1),
        cfg(tmp_path / "two", resume=True),
        count_fn=m3.counts,
    ).train()
    assert s["step"] == 7

    def losses(p):
        rows = [json.loads(x) for x in (p / "metrics.jsonl").read_text().splitlines()]
        return {r["step"]: r["loss"] for r in rows if r["split"] == "train"}

    assert losses(tmp_path / "one") == losses(tmp_path / "two")
    for (k, a), b in zip(m1.state_dict().items(), m3.state_dict().values()):
        assert torch.equal(a, b), k


# --- two processes --------------------------------------------------------------------------------

DDP_MICRO = {  # rank -> micro-batches: rank 0 holds 1 predicted token, rank 1 holds 8
    1: [[mlm_batch([1], seed=1)], [mlm_batch([4, 4], seed=2)]],
    2: [
        [mlm_batch([1], seed=1), mlm_batch([2], seed=3)],
        [mlm_batch([4, 4], seed=2), mlm_batch([5, 0, 1], seed=4)],
    ],
}


def _ddp_worker(rank, world, port, out_dir):
    torchrun_env(rank, world, port)
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    for k, per_rank in DDP_MICRO.items():
        model = tiny_mlm()
        cfg = TrainConfig(
            output_dir=os.path.join(out_dir, f"k{k}"),
            max_steps=1,
            grad_accum_steps=k,
            learning_rate=1e-3,
            max_grad_norm=None,
            log_every=1,
            progress=False,
            device="cpu",
        )
        trainer = Trainer(
            model,
            lambda m, b, d: m(b, d),
            per_rank[rank],
            cfg,
            dist=DistInfo(rank, world, rank),
            count_fn=model.counts,
        )
        grads = {}

        def capture(optimizer, args, kwargs, trainer=trainer, grads=grads):
            for n, p in trainer.model.named_parameters():
                if p.grad is not None:
                    grads[n] = p.grad.detach().clone()

        trainer.optimizer.register_step_pre_hook(capture)
        trainer.train()
        torch.save(grads, os.path.join(out_dir, f"grads_k{k}_rank{rank}.pt"))
    torch.distributed.destroy_process_group()


@pytest.mark.slow
def test_two_process_unequal_ranks_equal_the_merged_batch(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    torch.multiprocessing.spawn(_ddp_worker, args=(2, port, str(tmp_path)), nprocs=2, join=True)
    for k, per_rank in DDP_MICRO.items():
        model = tiny_mlm()
        loss, _ = model(merge(*per_rank[0], *per_rank[1]))
        want = reference_gradient(model, loss)
        for rank in (0, 1):
            got = torch.load(tmp_path / f"grads_k{k}_rank{rank}.pt")
            diff = rel_diff(got, want)
            assert diff < TOL, (k, rank, diff)
        rows = [
            json.loads(x) for x in (tmp_path / f"k{k}" / "metrics.jsonl").read_text().splitlines()
        ]
        logged = [r for r in rows if r["split"] == "train"][-1]
        assert logged["loss"] == pytest.approx(loss.item(), rel=1e-5)
