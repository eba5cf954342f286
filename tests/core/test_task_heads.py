"""Task heads as configured: head variants per family, regression loss, Longformer's separator
and DeBERTa's head settings. Parity of every family's task heads with transformers (both
directions, label names, regression, multiple choice) is in ``test_parity.py``."""

from __future__ import annotations

import pytest
import torch

import bertfamily as bf
from bertfamily import EncoderConfig, build_model
from bertfamily.checkpoints.convert import CheckpointError
from bertfamily.checkpoints.io import config_from_hf, config_to_hf
from bertfamily.checkpoints.keymaps import FAMILIES
from bertfamily.heads.losses import task_loss


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
    model = build_model(
        EncoderConfig.from_preset("tiny-bert", label_names=("score",)), ["classify"]
    ).eval()
    ids = torch.randint(3, 99, (4, 6))
    out = model(ids)
    assert out.logits.shape == (4, 1)
    target = torch.tensor([0.5, -1.0, 2.0, 0.0])
    expected = ((out.logits.squeeze(-1) - target) ** 2).mean()
    torch.testing.assert_close(task_loss("classify", out, {"labels": target}), expected)


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


def test_deberta_heads_from_config(tmp_path):
    """DeBERTa: ContextPooler activation from pooler_hidden_act (gelu when config.json does not
    say), cls_dropout; no multiple-choice class in transformers, so ours cannot be saved."""
    import transformers

    assert not hasattr(transformers, "DebertaForMultipleChoice")
    base = {
        "model_type": "deberta",
        "vocab_size": 99,
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 37,
    }
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
    albert = config_from_hf(
        {"model_type": "albert", "classifier_dropout_prob": 0.2, "vocab_size": 99}
    )
    assert albert.classifier_dropout == 0.2


TINY_FAMILIES = {
    "tiny-bert": "bert",
    "tiny-roberta": "roberta",
    "tiny-distilbert": "distilbert",
    "tiny-albert": "albert",
    "tiny-deberta": "deberta",
    "tiny-longformer": "longformer",
    "tiny-xlm-roberta": "xlm-roberta",
    "tiny-camembert": "camembert",
    "tiny-electra": "electra",
}
HEAD_SETS = [
    (preset, heads)
    for preset, family in TINY_FAMILIES.items()
    for heads in FAMILIES[family].architectures
    if heads
]


@pytest.mark.parametrize("preset,heads", HEAD_SETS)
def test_built_models_have_the_modules_of_transformers_class(preset, heads, tmp_path):
    """A model built from a preset has exactly the modules of transformers' class with the same
    heads: no unused pooler (BERT-base QA or token classification, RoBERTa MLM: +590,592
    parameters before), nothing missing; transformers loads it without a warning."""
    import transformers

    config = bf.EncoderConfig.from_preset(preset)
    model = bf.build_model(config, heads=heads.split("+"))
    assert (model.encoder.pooler is not None) == config.reads_pooler(heads.split("+"))
    path = model.save_pretrained(tmp_path / "m")
    cls = getattr(transformers, FAMILIES[TINY_FAMILIES[preset]].architectures[heads])
    ref, info = cls.from_pretrained(path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    extra = 0
    if model.mlm_decoder is not None:  # DeBERTa's enhanced mask decoder reads the absolute
        extra = config.max_position_embeddings * config.hidden_size  # table transformers lacks
    assert model.num_parameters(heads=True) == sum(p.numel() for p in ref.parameters()) + extra


def test_unused_pooler_in_a_checkpoint_is_dropped_with_a_report(tmp_path):
    """A masked-LM directory holding a pooler (as older saves did) still loads strictly; the
    pooler is reported as dropped."""
    config = bf.EncoderConfig.from_preset("tiny-bert")
    with_pooler = bf.build_model(config, heads=["mlm", "pair"])
    with_pooler.pair_head = None  # masked LM only, pooler kept: BertForMaskedLM + pooler keys
    with_pooler.save_pretrained(tmp_path / "m")
    model, report = bf.from_pretrained(tmp_path / "m", return_report=True)
    assert model.heads == ("mlm",) and model.encoder.pooler is None
    assert sorted(report.dropped) == ["bert.pooler.dense.bias", "bert.pooler.dense.weight"]
