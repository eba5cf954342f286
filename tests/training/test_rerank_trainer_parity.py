"""`train_reranker` (the recipe behind ``finetune --task rerank``, with its defaults) against
sentence-transformers 6's ``CrossEncoderTrainer``: from the same tiny random cross-encoder
(dropout off), the same rows in the same order and the same settings, every step's loss and the
trained weights agree within 1e-5 — the learning-rate schedule included (transformers' warm-up:
the first update at rate 0, ``warmup_ratio`` rounded up; `TrainConfig.transformers_warmup`,
the reranker's default). With ``transformers_warmup=False`` (our schedule for the other
recipes) the second step differs, so the test can fail."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from bertfamily.recipes.rerank import RerankConfig, train_reranker
from bertfamily.train.schedules import lr_factor
from retrieval_dirs import classic_cross_encoder

pytest.importorskip("sentence_transformers")
pytest.importorskip("datasets")
pytest.importorskip("accelerate")  # transformers' Trainer, under CrossEncoderTrainer

WORDS = "the cat sat on a mat dog ran far away red blue car fast slow big small tree".split()
ROWS, BATCH, LR = 24, 4, 1e-3  # 6 steps, warm-up ceil(0.1 * 6) = 1 step (ours would floor: 0)


@pytest.fixture(scope="module")
def data(tmp_path_factory, minilm_dir):
    root = tmp_path_factory.mktemp("rerank-parity")
    no_dropout = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    start = classic_cross_encoder(root / "ce", minilm_dir, **no_dropout)
    rng = np.random.default_rng(0)
    text = lambda: " ".join(rng.choice(WORDS, size=int(rng.integers(2, 9))))  # noqa: E731
    rows = [(text(), text(), round(float(rng.random()), 3)) for _ in range(ROWS)]
    path = root / "train.jsonl"
    path.write_text("".join(json.dumps(dict(zip(("q", "p", "score"), r))) + "\n" for r in rows))
    return start, rows, path


def ours(start, path, out, **fields):
    cfg = RerankConfig(start, path, "bce", max_length=32, shuffle=False)
    train_reranker(cfg, output_dir=out, batch_size=BATCH, learning_rate=LR, log_every=1,
                   device="cpu", progress=False, **fields)  # fmt: skip
    lines = (out / "metrics.jsonl").read_text().splitlines()
    losses = [r["loss"] for r in map(json.loads, lines) if r.get("split") == "train"]
    return losses, load_file(str(out / "model" / "model.safetensors"))


def theirs(start, rows, out):
    from datasets import Dataset
    from sentence_transformers.base.sampler import DefaultBatchSampler
    from sentence_transformers.cross_encoder import (
        CrossEncoder,
        CrossEncoderTrainer,
        CrossEncoderTrainingArguments,
    )
    from sentence_transformers.cross_encoder.losses import BinaryCrossEntropyLoss
    from torch.utils.data import SequentialSampler

    def sequential(dataset, batch_size, drop_last, valid_label_columns=None, **_):
        return DefaultBatchSampler(
            SequentialSampler(dataset),
            batch_size=batch_size,
            drop_last=drop_last,
            valid_label_columns=valid_label_columns,
        )

    model = CrossEncoder(str(start), num_labels=1, max_length=32, device="cpu")
    args = CrossEncoderTrainingArguments(
        output_dir=str(out), num_train_epochs=1, per_device_train_batch_size=BATCH,
        learning_rate=LR, weight_decay=0.0, adam_epsilon=1e-8, warmup_steps=0.1,
        lr_scheduler_type="linear", max_grad_norm=1.0, seed=0, save_strategy="no",
        report_to="none", logging_steps=1, use_cpu=True, disable_tqdm=True,
        batch_sampler=sequential,
    )  # fmt: skip
    data = Dataset.from_dict({k: [r[i] for r in rows] for i, k in enumerate(("q", "p", "score"))})
    trainer = CrossEncoderTrainer(model=model, args=args, train_dataset=data,
                                  loss=BinaryCrossEntropyLoss(model))  # fmt: skip
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return losses, {k: v.detach() for k, v in model.model.state_dict().items()}


def test_reranker_training_equals_sentence_transformers(data, tmp_path):
    start, rows, path = data
    mine, mine_w = ours(start, path, tmp_path / "ours")
    ref, ref_w = theirs(start, rows, tmp_path / "theirs")
    assert len(mine) == len(ref) == ROWS // BATCH
    np.testing.assert_allclose(mine, ref, atol=1e-5)
    assert ref[0] != pytest.approx(ref[-1], abs=1e-3)  # the model did train
    assert set(mine_w) == set(ref_w)
    for k, v in ref_w.items():
        if k.endswith("attention.self.key.bias"):  # no gradient (softmax is shift-invariant):
            continue  # AdamW turns each library's float noise into a step of ~lr
        torch.testing.assert_close(mine_w[k], v, atol=1e-5, rtol=0, msg=k)
    # our other recipes' schedule (the first update at the warm-up's first rate) differs
    other, _ = ours(start, path, tmp_path / "other", transformers_warmup=False, warmup_steps=1)
    assert other[0] == pytest.approx(ref[0], abs=1e-6)
    assert abs(other[1] - ref[1]) > 1e-4


def test_transformers_warmup_factor():
    f = lr_factor("linear", warmup_steps=4, total_steps=10, from_zero=True)
    assert [round(f(s), 4) for s in range(10)] == [
        0.0, 0.25, 0.5, 0.75, 1.0, 0.8333, 0.6667, 0.5, 0.3333, 0.1667,
    ]  # fmt: skip
    # transformers' own schedule, step for step
    from transformers import get_linear_schedule_with_warmup

    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = get_linear_schedule_with_warmup(opt, 4, 10)
    theirs_ = []
    for _ in range(10):
        theirs_.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert [f(s) for s in range(10)] == pytest.approx(theirs_, abs=1e-12)
