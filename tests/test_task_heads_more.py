"""Task heads of ALBERT, DeBERTa and Longformer: parity with transformers' *For{Sequence
Classification, TokenClassification, QuestionAnswering, MultipleChoice} on tiny random weights
(both directions, with padding), and Longformer's default global attention per task."""

from __future__ import annotations

import pytest
import torch

import bertfamily as bf
from bertfamily import EncoderConfig, build_model
from bertfamily.checkpoints.convert import CheckpointError
from bertfamily.checkpoints.io import config_from_hf, config_to_hf

from helpers import hf_longformer, hf_tiny

ATOL = 1e-5
LABELS = {0: "neg", 1: "neu", 2: "pos"}
PREFIX = {"albert": "Albert", "deberta": "Deberta", "longformer": "Longformer"}
TASKS = {"classify": "ForSequenceClassification", "tokens": "ForTokenClassification",
         "qa": "ForQuestionAnswering", "choice": "ForMultipleChoice"}
SEP = 2  # separator id of the tiny Longformer (LongformerConfig's default sep_token_id)
CASES = [(f, t) for f in PREFIX for t in TASKS if (f, t) != ("deberta", "choice")]


def _hf(family: str, cls_name: str, tmp_path_factory, **overrides):
    if family == "longformer":
        return hf_longformer(cls_name, tmp_path_factory, **overrides)
    return hf_tiny(family, cls_name, tmp_path_factory, **overrides)


def _row(g: torch.Generator, T: int, length: int, question: int, pad_id: int) -> torch.Tensor:
    """<s> question </s></s> answer </s> padding: exactly three separators, as transformers'
    Longformer QA and multiple-choice defaults demand."""
    answer = length - question - 4
    ids = torch.cat([torch.tensor([0]), torch.randint(3, 99, (question,), generator=g),
                     torch.tensor([SEP, SEP]), torch.randint(3, 99, (answer,), generator=g),
                     torch.tensor([SEP]), torch.full((T - length,), pad_id)])
    return ids


def _inputs(family: str, choice: bool, pad_id: int):
    """(B, T) or (B, K, T) ids with right padding (rows of 11, 8 and 6 real tokens; T = 11 is
    not a multiple of the Longformer windows 4 and 6) and the family's extra inputs."""
    g = torch.Generator().manual_seed(3)
    T = 11
    lengths = [[11, 7], [8, 8], [6, 10]] if choice else [[11], [8], [6]]
    questions = [[3, 1], [2, 2], [1, 4]] if choice else [[3], [2], [1]]
    ids = torch.stack([torch.stack([_row(g, T, n, q, pad_id) for n, q in zip(ns, qs)])
                       for ns, qs in zip(lengths, questions)])
    mask = (torch.arange(T)[None, None, :] < torch.tensor(lengths)[..., None]).long()
    if not choice:
        ids, mask = ids[:, 0], mask[:, 0]
    kw = {"attention_mask": mask}
    if family == "albert":  # segments exercised
        kw["token_type_ids"] = (torch.arange(T) >= 4).long().expand_as(ids).contiguous()
    return ids, kw


def _compare(task: str, a, b, mask: torch.Tensor) -> None:
    real = mask.bool()
    if task == "qa":
        torch.testing.assert_close(a.start_logits[real], b.start_logits[real], atol=ATOL, rtol=0)
        torch.testing.assert_close(a.end_logits[real], b.end_logits[real], atol=ATOL, rtol=0)
    elif task == "tokens":
        torch.testing.assert_close(a.logits[real], b.logits[real], atol=ATOL, rtol=0)
    else:
        torch.testing.assert_close(a.logits, b.logits, atol=ATOL, rtol=0)


@pytest.mark.parametrize("family,task", CASES)
def test_task_logits_match_transformers(family, task, tmp_path_factory, tmp_path):
    """No global_attention_mask is passed: for Longformer both sides apply their task defaults
    (first token; question tokens; answer tokens; none for token classification)."""
    import transformers

    cls_name = PREFIX[family] + TASKS[task]
    labels = {0: "start", 1: "end"} if task == "qa" else LABELS
    path, ref = _hf(family, cls_name, tmp_path_factory, id2label=labels,
                    label2id={v: k for k, v in labels.items()})
    ours = bf.from_pretrained(path)
    assert ours.heads == (task,)
    assert ours.config.label_names == tuple(labels.values())
    ids, kw = _inputs(family, task == "choice", ours.config.pad_token_id)
    with torch.no_grad():
        a = ours(ids, **kw)
        b = ref(input_ids=ids, **kw)
    _compare(task, a, b, kw["attention_mask"])

    out = ours.save_pretrained(tmp_path / "saved")
    back = getattr(transformers, cls_name).from_pretrained(out).eval()
    assert back.config.architectures == [cls_name]
    assert back.config.id2label == labels
    with torch.no_grad():
        c = back(input_ids=ids, **kw)
    _compare(task, c, b, kw["attention_mask"])


@pytest.mark.parametrize("family", list(PREFIX))
def test_regression_head_matches_transformers(family, tmp_path_factory, tmp_path):
    """One label = regression: (B, 1) scores equal transformers', both directions."""
    import transformers

    cls_name = PREFIX[family] + TASKS["classify"]
    path, ref = _hf(family, cls_name, tmp_path_factory, num_labels=1)
    ours = bf.from_pretrained(path)
    assert ours.config.num_labels == 1
    ids, kw = _inputs(family, False, ours.config.pad_token_id)
    with torch.no_grad():
        a, b = ours(ids, **kw), ref(input_ids=ids, **kw)
        assert a.logits.shape == (3, 1)
        torch.testing.assert_close(a.logits, b.logits, atol=ATOL, rtol=0)
        back = transformers.AutoModelForSequenceClassification.from_pretrained(
            ours.save_pretrained(tmp_path / "saved")).eval()
        torch.testing.assert_close(back(input_ids=ids, **kw).logits, b.logits, atol=ATOL, rtol=0)


@pytest.mark.parametrize("task", ["classify", "qa", "choice"])
def test_longformer_explicit_global_mask_overrides_default(task, tmp_path_factory):
    """An explicit global_attention_mask is used as given (here: none global, and a mask other
    than the default); the default differs from it, so the default really is applied."""
    path, ref = hf_longformer(PREFIX["longformer"] + TASKS[task], tmp_path_factory)
    ours = bf.from_pretrained(path)
    ids, kw = _inputs("longformer", task == "choice", ours.config.pad_token_id)
    mask = kw["attention_mask"]
    other = torch.zeros_like(mask)
    other[..., 4] = 1  # one global token at column 4 in every row
    key = "start_logits" if task == "qa" else "logits"
    real = mask.bool()
    with torch.no_grad():
        default = ours(ids, **kw).last_hidden_state.view(*mask.shape, -1)[real]
        for g in (torch.zeros_like(mask), other):
            a = ours(ids, **kw, global_attention_mask=g)
            b = ref(input_ids=ids, **kw, global_attention_mask=g)
            sel = real if task == "qa" else slice(None)
            torch.testing.assert_close(getattr(a, key)[sel], getattr(b, key)[sel], atol=ATOL,
                                       rtol=0)
            hidden = a.last_hidden_state.view(*mask.shape, -1)[real]
            assert (hidden - default).abs().max() > 1e-2  # the default was really applied


def test_longformer_qa_needs_a_separator():
    model = build_model(EncoderConfig.from_preset("tiny-longformer"), ["qa"]).eval()
    assert model.config.sep_token_id == 2
    with pytest.raises(ValueError, match="hold no separator"):
        model(torch.tensor([[0, 5, 6, 7]]))
    model(torch.tensor([[0, 5, 6, 7]]), global_attention_mask=torch.tensor([[1, 0, 0, 0]]))
    no_sep = build_model(EncoderConfig.from_preset("tiny-longformer", sep_token_id=None), ["qa"])
    with pytest.raises(ValueError, match="needs sep_token_id"):
        no_sep(torch.tensor([[0, 5, 2, 7]]))
    with pytest.raises(ValueError, match="sep_token_id must be"):
        EncoderConfig.from_preset("tiny-longformer", sep_token_id=99)


@pytest.mark.parametrize("family", list(PREFIX))
def test_new_head_on_base_checkpoint(family, tmp_path_factory):
    """A base checkpoint + a fresh classification head: the trunk equals the checkpoint's."""
    path, ref = _hf(family, PREFIX[family] + "Model", tmp_path_factory)
    with pytest.raises(CheckpointError):
        bf.from_pretrained(path, heads=["classify"])  # strict: the head is missing
    model = bf.from_pretrained(path, heads=["classify"], new_heads=True,
                               label_names=("a", "b", "c", "d"))
    ids, kw = _inputs(family, False, model.config.pad_token_id)
    with torch.no_grad():
        h = model.encoder(ids, **kw).last_hidden_state
        r = ref(input_ids=ids, **kw).last_hidden_state
        assert model(ids, **kw).logits.shape == (3, 4)
    real = kw["attention_mask"].bool()
    torch.testing.assert_close(h[real], r[real], atol=ATOL, rtol=0)


def test_deberta_heads_from_config(tmp_path):
    """DeBERTa: ContextPooler activation from pooler_hidden_act (gelu when config.json does not
    say), cls_dropout; no multiple-choice class in transformers, so ours cannot be saved."""
    import transformers

    assert not hasattr(transformers, "DebertaForMultipleChoice")
    base = {"model_type": "deberta", "vocab_size": 99, "hidden_size": 32,
            "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 37}
    assert config_from_hf(base).classifier_activation == "gelu"
    cfg = config_from_hf({**base, "pooler_hidden_act": "gelu_new", "cls_dropout": 0.3})
    assert cfg.classifier_activation == "gelu_tanh" and cfg.classifier_dropout == 0.3
    written = config_to_hf(cfg, "DebertaForSequenceClassification")
    assert written["pooler_hidden_act"] == "gelu_new" and written["cls_dropout"] == 0.3
    assert config_from_hf({**base, "pooler_hidden_act": "tanh"}).classifier_activation == "tanh"
    model = build_model(EncoderConfig.from_preset("tiny-deberta"), ["choice"]).eval()
    ids = torch.randint(3, 99, (2, 3, 5))
    assert model(ids).logits.shape == (2, 3)
    with pytest.raises(CheckpointError, match="no Hugging Face class"):
        model.save_pretrained(tmp_path / "choice")
    albert = config_from_hf({"model_type": "albert", "classifier_dropout_prob": 0.2,
                             "vocab_size": 99})
    assert albert.classifier_dropout == 0.2
