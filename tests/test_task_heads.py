"""Task heads: parity with transformers' *For{SequenceClassification, TokenClassification,
QuestionAnswering, MultipleChoice} on tiny random weights, both directions, labels kept."""

from __future__ import annotations

import pytest
import torch

import bertfamily as bf
from bertfamily import EncoderConfig, build_model
from bertfamily.checkpoints.convert import CheckpointError
from bertfamily.objectives.tasks import task_loss

from helpers import hf_tiny

ATOL = 1e-5
LABELS = {0: "neg", 1: "neu", 2: "pos"}
PREFIX = {"bert": "Bert", "roberta": "Roberta", "distilbert": "DistilBert"}
TASKS = {"classify": "ForSequenceClassification", "tokens": "ForTokenClassification",
         "qa": "ForQuestionAnswering", "choice": "ForMultipleChoice"}


def _inputs(family: str, choice: bool, pad_id: int):
    g = torch.Generator().manual_seed(3)
    shape = (3, 2, 7) if choice else (3, 7)
    ids = torch.randint(3, 99, shape, generator=g)
    mask = torch.ones(shape, dtype=torch.long)
    mask[..., 1, 5:] = 0 if not choice else 1  # padded second row (non-choice)
    if choice:
        mask[1, :, 4:] = 0
    ids[mask == 0] = pad_id
    kw = {"attention_mask": mask}
    if family == "bert":
        tt = torch.zeros_like(ids)
        tt[..., 4:] = 1
        kw["token_type_ids"] = tt
    return ids, kw


@pytest.mark.parametrize("task", list(TASKS))
@pytest.mark.parametrize("family", list(PREFIX))
def test_task_logits_match_transformers(family, task, tmp_path_factory, tmp_path):
    import transformers

    cls_name = PREFIX[family] + TASKS[task]
    # transformers' QA heads are Linear(H, num_labels) with num_labels = 2 (start, end)
    labels = {0: "start", 1: "end"} if task == "qa" else LABELS
    path, ref = hf_tiny(family, cls_name, tmp_path_factory, id2label=labels,
                        label2id={v: k for k, v in labels.items()})
    ours = bf.from_pretrained(path)
    assert ours.heads == (task,)
    assert ours.config.label_names == tuple(labels.values())
    ids, kw = _inputs(family, task == "choice", ours.config.pad_token_id)
    with torch.no_grad():
        a = ours(ids, **kw)
        b = ref(input_ids=ids, **kw)
    if task == "qa":
        real = kw["attention_mask"].bool()
        torch.testing.assert_close(a.start_logits[real], b.start_logits[real], atol=ATOL, rtol=0)
        torch.testing.assert_close(a.end_logits[real], b.end_logits[real], atol=ATOL, rtol=0)
    elif task == "tokens":
        real = kw["attention_mask"].bool()
        torch.testing.assert_close(a.logits[real], b.logits[real], atol=ATOL, rtol=0)
    else:
        torch.testing.assert_close(a.logits, b.logits, atol=ATOL, rtol=0)

    # ours → transformers: same class, same logits, same label names
    out = ours.save_pretrained(tmp_path / "saved")
    back = getattr(transformers, cls_name).from_pretrained(out).eval()
    assert back.config.architectures == [cls_name]
    assert back.config.id2label == labels
    with torch.no_grad():
        c = back(input_ids=ids, **kw)
    if task == "qa":
        torch.testing.assert_close(c.start_logits, b.start_logits, atol=ATOL, rtol=0)
    else:
        torch.testing.assert_close(c.logits, b.logits, atol=ATOL, rtol=0)


@pytest.mark.parametrize("family", ["bert", "roberta", "distilbert"])
def test_new_head_on_base_checkpoint(family, tmp_path_factory):
    """A base checkpoint + a fresh head: the trunk equals the checkpoint's, the head is new."""
    path, ref = hf_tiny(family, PREFIX[family] + "Model", tmp_path_factory)
    with pytest.raises(CheckpointError):
        bf.from_pretrained(path, heads=["classify"])  # strict: the head is missing
    model = bf.from_pretrained(path, heads=["classify"], new_heads=True,
                               label_names=("a", "b", "c", "d"))
    assert model.config.num_labels == 4
    ids, kw = _inputs(family, False, model.config.pad_token_id)
    with torch.no_grad():
        h = model.encoder(ids, **kw).last_hidden_state
        r = ref(input_ids=ids, **kw).last_hidden_state
        assert model(ids, **kw).logits.shape == (3, 4)
    real = kw["attention_mask"].bool()
    torch.testing.assert_close(h[real], r[real], atol=ATOL, rtol=0)


def test_head_variants_come_from_config():
    roberta = build_model(EncoderConfig.from_preset("tiny-roberta"), ["classify"])
    assert isinstance(roberta.task_head.act, torch.nn.Tanh) and hasattr(roberta.task_head, "dense")
    distil = build_model(EncoderConfig.from_preset("tiny-distilbert"), ["choice"])
    assert isinstance(distil.task_head.act, torch.nn.ReLU)
    bert = build_model(EncoderConfig.from_preset("tiny-bert"), ["classify"])
    assert not hasattr(bert.task_head, "dense")
    # exact head parameter counts: H·C + C, and (RoBERTa) + H·H + H
    assert sum(p.numel() for p in bert.task_head.parameters()) == 32 * 2 + 2
    assert sum(p.numel() for p in roberta.task_head.parameters()) == 32 * 32 + 32 + 32 * 2 + 2
    with pytest.raises(ValueError, match="pooled output"):
        build_model(EncoderConfig.from_preset("tiny-bert", use_pooler=False), ["classify"])
    with pytest.raises(ValueError, match="at most one task head"):
        build_model(EncoderConfig.from_preset("tiny-bert"), ["classify", "qa"])
    with pytest.raises(ValueError, match="classifier_pooling"):
        EncoderConfig.from_preset("tiny-bert", classifier_pooling="mean")


def test_regression_with_one_label_uses_mse():
    model = build_model(EncoderConfig.from_preset("tiny-bert", label_names=("score",)),
                        ["classify"]).eval()
    ids = torch.randint(3, 99, (4, 6))
    out = model(ids)
    assert out.logits.shape == (4, 1)
    target = torch.tensor([0.5, -1.0, 2.0, 0.0])
    expected = ((out.logits.squeeze(-1) - target) ** 2).mean()
    torch.testing.assert_close(task_loss("classify", out, {"labels": target}), expected)
