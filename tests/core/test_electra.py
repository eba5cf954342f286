"""ELECTRA beyond the parity sweep (tests/core/test_parity.py): the replaced-token-detection loss
by hand, the generator's and the discriminator's structure, the config fields we refuse, and
XLM-RoBERTa / CamemBERT class names on save. Tiny sizes: E = 16, H = 32, V = 99."""

from __future__ import annotations

import json

import pytest
import torch
from torch.nn import functional as F

import bertfamily as bf
from bertfamily.checkpoints.io import ModelDirectoryError, config_from_hf, config_to_hf
from bertfamily.config import ConfigError
from bertfamily.heads.pretraining import rtd_loss
from helpers import ATOL, hf_config, padded_batch


def _tiny(heads=(), **overrides):
    torch.manual_seed(0)
    config = bf.EncoderConfig.from_preset("tiny-electra", **overrides)
    return bf.build_model(config, heads=list(heads)).eval()


# --- replaced-token detection -----------------------------------------------------------------
def test_rtd_loss_by_hand():
    """Mean over real tokens of -[y·log σ(z) + (1-y)·log(1-σ(z))]; padding carries nothing."""
    logits = torch.tensor([[2.0, -1.0, 0.5], [0.0, 3.0, -4.0]])
    labels = torch.tensor([[1, 0, 0], [1, 1, 0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    real = [(2.0, 1), (-1.0, 0), (0.0, 1), (3.0, 1), (-4.0, 0)]
    terms = [
        -(y * torch.log(torch.sigmoid(torch.tensor(z))))
        - (1 - y) * torch.log(1 - torch.sigmoid(torch.tensor(z)))
        for z, y in real
    ]
    expected = torch.stack(terms).mean()
    torch.testing.assert_close(rtd_loss(logits, labels, mask), expected)
    # softplus(-2) + softplus(-1) + ln 2 + softplus(-3) + softplus(-4) = 1.20008, over 5 tokens
    assert abs(float(expected) - 0.24002) < 1e-4
    # without a mask every position counts; the padded logit (0.5, label 0) now adds a term
    all_terms = torch.stack(terms + [F.softplus(torch.tensor(0.5))]).mean()
    torch.testing.assert_close(rtd_loss(logits, labels), all_terms)


def test_rtd_loss_refuses_bad_labels():
    logits = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="0 \\(original\\) or 1"):
        rtd_loss(logits, torch.tensor([[0, 2, 1], [0, 0, 1]]))
    with pytest.raises(ValueError, match="\\(B, T\\)"):
        rtd_loss(logits, torch.zeros(2, 4))
    with pytest.raises(ValueError, match="attention_mask"):
        rtd_loss(logits, torch.zeros(2, 3), torch.ones(2, 4))
    with pytest.raises(ValueError, match="no real token"):
        rtd_loss(logits, torch.zeros(2, 3), torch.zeros(2, 3, dtype=torch.long))


@pytest.mark.parametrize("padding", ["right", "left"])
def test_rtd_loss_matches_transformers_on_padded_batches(padding, hf_checkpoint):
    """ElectraForPreTraining's loss (BCE over attention_mask == 1) for right and left padding;
    the logits at real tokens too."""
    path, ref = hf_checkpoint("electra", "ElectraForPreTraining")
    ours = bf.from_pretrained(path)
    ids, mask = padded_batch((7, 5, 2), left=padding == "left")
    labels = (torch.arange(ids.numel()).view(ids.shape) % 3 == 0).long()
    with torch.no_grad():
        a = ours(ids, mask, labels=labels)
        b = ref(input_ids=ids, attention_mask=mask, labels=labels)
    assert a.logits.shape == (3, 7)
    torch.testing.assert_close(a.logits[mask.bool()], b.logits[mask.bool()], atol=ATOL, rtol=0)
    torch.testing.assert_close(a.loss, b.loss, atol=ATOL, rtol=0)
    assert 0.3 < float(a.loss) < 2.0  # a real BCE value, not 0 or a sum


def test_rtd_head_trains_and_its_labels_are_checked():
    model = _tiny(["rtd"])
    assert model.heads == ("rtd",)
    ids, mask = padded_batch((6, 4))
    labels = (ids % 2).long()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    model.train()
    before = model(ids, mask, labels=labels).loss
    before.backward()
    opt.step()
    assert model(ids, mask, labels=labels).loss < before
    with pytest.raises(ValueError, match="0 \\(original\\) or 1"):
        model(ids, mask, labels=labels + 1)
    with pytest.raises(ValueError, match="two models"):
        _tiny(["rtd", "mlm"])


def test_rtd_head_on_a_base_checkpoint_with_new_heads(hf_checkpoint):
    """A discriminator trunk (ElectraModel) + a fresh RTD head: strict loading refuses it,
    new_heads initialises it and keeps the trunk."""
    from bertfamily.checkpoints.convert import CheckpointError

    path, ref = hf_checkpoint("electra", "ElectraModel")
    with pytest.raises(CheckpointError, match="rtd_head"):
        bf.from_pretrained(path, heads=["rtd"])
    model = bf.from_pretrained(path, heads=["rtd"], new_heads=True)
    ids, mask = padded_batch((7, 5, 2))
    with torch.no_grad():
        assert model(ids, mask).logits.shape == (3, 7)
        h = model(ids, mask).last_hidden_state
        r = ref(input_ids=ids, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(h[mask.bool()], r[mask.bool()], atol=ATOL, rtol=0)


# --- generator and discriminator structure ----------------------------------------------------
def test_generator_keeps_gelu_and_ties_its_decoder(hf_checkpoint, tmp_path):
    """ElectraForMaskedLM: dense H→E, exact GELU even with hidden_act gelu_new, LayerNorm(E),
    decoder tied to the (V, E) token embedding with its own bias; the saved file holds no
    separate decoder weight and transformers re-ties it."""
    import copy

    import transformers
    from safetensors.torch import load_file

    _, ref = hf_checkpoint("electra", "ElectraForMaskedLM", hidden_act="gelu_new")
    ref = copy.deepcopy(ref)
    with torch.no_grad():  # pre-activations of order 1, where GELU and its tanh form differ
        ref.generator_predictions.dense.weight.mul_(30.0)
    ref.save_pretrained(tmp_path / "ref")
    ours = bf.from_pretrained(tmp_path / "ref")
    ids, mask = padded_batch((7, 5, 2))
    with torch.no_grad():
        a, b = ours(ids, mask).logits, ref(input_ids=ids, attention_mask=mask).logits
    torch.testing.assert_close(a[mask.bool()], b[mask.bool()], atol=ATOL, rtol=0)
    assert ours.config.hidden_act == "gelu_tanh" and ours.config.mlm_activation == "gelu"
    x = torch.linspace(-3, 3, 13)
    torch.testing.assert_close(ours.mlm_head.act(x), F.gelu(x))  # exact erf form
    assert not torch.allclose(ours.mlm_head.act(x), F.gelu(x, approximate="tanh"))
    assert ours.mlm_head.dense.weight.shape == (16, 32)  # H → E
    assert ours.mlm_head.decoder_weight is ours.encoder.embeddings.token.weight  # (V, E)
    assert ours.mlm_head.bias.shape == (99,)
    ours.save_pretrained(tmp_path / "g")
    keys = set(load_file(tmp_path / "g" / "model.safetensors"))
    assert "generator_lm_head.bias" in keys and "generator_lm_head.weight" not in keys
    again = transformers.ElectraForMaskedLM.from_pretrained(tmp_path / "g").eval()
    assert again.config.hidden_act == "gelu_new"
    torch.testing.assert_close(
        again.generator_lm_head.weight, again.electra.embeddings.word_embeddings.weight
    )


@pytest.mark.parametrize("embedding_size", [16, 32])
def test_discriminator_parameters_equal_transformers(embedding_size, hf_checkpoint):
    """ElectraModel: lookups and LayerNorm in E, `embeddings_project` E→H only when E ≠ H, no
    pooler; the same parameter count as transformers, for every ELECTRA class."""
    import transformers

    path, ref = hf_checkpoint("electra", "ElectraModel", embedding_size=embedding_size)
    ours = bf.from_pretrained(path)
    proj = ours.encoder.embeddings.projection
    assert (proj is None) == (embedding_size == 32)
    if proj is not None:
        assert proj.weight.shape == (32, 16)
    assert ours.encoder.pooler is None and ours.config.use_pooler is False
    assert ours.num_parameters() == sum(p.numel() for p in ref.parameters())
    config = hf_config("electra", embedding_size=embedding_size)
    for head, cls in (
        ("mlm", "ElectraForMaskedLM"),
        ("rtd", "ElectraForPreTraining"),
        ("choice", "ElectraForMultipleChoice"),
    ):
        model = bf.build_model(ours.config, heads=[head])
        n_ref = sum(p.numel() for p in getattr(transformers, cls)(config).parameters())
        assert model.num_parameters(heads=True) == n_ref, head


# --- config.json ↔ EncoderConfig --------------------------------------------------------------
def test_config_round_trip():
    hf = {"model_type": "electra", "embedding_size": 16, "hidden_size": 32, "vocab_size": 99}
    hf.update(num_attention_heads=4, intermediate_size=37, summary_last_dropout=0.2)
    config = config_from_hf(hf)
    assert (config.embedding_size, config.hidden_size) == (16, 32)
    assert (config.use_pooler, config.pair_head, config.classifier_activation) == (
        False,
        None,
        "gelu",
    )
    written = config_to_hf(config, "ElectraForPreTraining")
    assert written["embedding_size"] == 16 and written["model_type"] == "electra"
    assert written["summary_type"] == "first" and written["summary_use_proj"] is True
    assert written["summary_activation"] == "gelu"
    assert config_from_hf(written) == config


@pytest.mark.parametrize(
    "field,value",
    [
        ("summary_type", "last"),
        ("summary_type", "mean"),
        ("summary_use_proj", False),
        ("summary_activation", "tanh"),
        ("summary_activation", None),
        ("summary_proj_to_labels", True),
        ("position_embedding_type", "relative_key"),
    ],
)
def test_config_we_cannot_run_is_refused(field, value):
    """A multiple-choice summary other than first token → Linear H→H → GELU, or relative
    position embeddings: a clear error naming the field, never a silently different model."""
    with pytest.raises(ModelDirectoryError, match=field):
        config_from_hf({"model_type": "electra", "vocab_size": 99, field: value})


def test_mlm_activation_is_validated():
    with pytest.raises(ConfigError, match="mlm_activation"):
        bf.EncoderConfig(mlm_activation="tanh")
    assert bf.EncoderConfig().mlm_activation is None  # other families: the hidden_act


# --- XLM-RoBERTa and CamemBERT --------------------------------------------------------------
@pytest.mark.parametrize(
    "preset,model_type,cls",
    [
        ("tiny-xlm-roberta", "xlm-roberta", "XLMRobertaForMaskedLM"),
        ("tiny-camembert", "camembert", "CamembertForMaskedLM"),
    ],
)
def test_roberta_layout_families_save_under_their_own_class(preset, model_type, cls, tmp_path):
    """Saved as the family's own class; transformers' AutoModelForMaskedLM picks that class
    and gives our logits; positions start at pad_token_id + 1 = 2."""
    import transformers

    torch.manual_seed(0)
    model = bf.build_model(bf.EncoderConfig.from_preset(preset), heads=["mlm"]).eval()
    assert model.config.position_offset == 2
    model.save_pretrained(tmp_path / "m")
    written = json.loads((tmp_path / "m" / "config.json").read_text())
    assert (written["model_type"], written["architectures"]) == (model_type, [cls])
    ref = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "m").eval()
    assert type(ref).__name__ == cls
    ids, mask = padded_batch((7, 5, 2), pad_id=1, left=True)
    with torch.no_grad():
        a = model(ids, mask).logits
        b = ref(input_ids=ids, attention_mask=mask).logits
    torch.testing.assert_close(a[mask.bool()], b[mask.bool()], atol=ATOL, rtol=0)
