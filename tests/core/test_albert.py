"""ALBERT: shared layers and their gradients, grouped key templates, the albert-base preset.
Parity with transformers (shared and grouped layouts, every head, both directions) is in
``test_parity.py``; albert-base's parameter count in ``test_presets.py``."""

from __future__ import annotations

import torch

from bertfamily import EncoderConfig, build_model
from bertfamily.checkpoints.convert import expand, layer_fields
from bertfamily.checkpoints.io import config_from_hf
from helpers import padded_batch

GROUPED = dict(num_hidden_layers=4, num_hidden_groups=2, inner_group_num=2)  # 4 unique layers


def _batch(seed: int = 1):
    ids, mask = padded_batch((7, 5, 2), seed=seed)
    tt = torch.zeros_like(ids)
    tt[:, 4:] = 1
    return ids, mask, tt


def test_state_dict_holds_each_unique_layer_once():
    for overrides, unique in (({}, 1), (GROUPED, 4)):
        model = build_model(
            EncoderConfig.from_preset("tiny-albert", **overrides), heads=["mlm", "pair"]
        )
        layers = {k.split(".")[2] for k in model.state_dict() if k.startswith("encoder.layers.")}
        assert layers == {str(i) for i in range(unique)}
    model = build_model(EncoderConfig.from_preset("tiny-albert"))
    assert model.encoder.schedule == [0, 0, 0]
    # E=16 lookups, E→H projection, one layer's worth of parameters for three steps
    assert model.encoder.embeddings.token.weight.shape == (99, 16)
    assert model.encoder.embeddings.projection.weight.shape == (32, 16)


def test_shared_layer_gradient_accumulates_from_every_use():
    """The grad of the shared layer equals the sum of the grads of unshared copies."""
    torch.manual_seed(0)
    shared = build_model(EncoderConfig.from_preset("tiny-albert"), heads=["mlm"]).train()
    unshared = build_model(
        EncoderConfig.from_preset("tiny-albert", num_hidden_groups=3), heads=["mlm"]
    ).train()
    state = shared.state_dict()
    for key, value in list(state.items()):
        if key.startswith("encoder.layers.0."):
            for i in (1, 2):
                state[key.replace("layers.0.", f"layers.{i}.")] = value
    unshared.load_state_dict(state)
    ids, mask, tt = _batch()
    for model in (shared, unshared):
        model(ids, mask, tt).logits[mask.bool()].logsumexp(-1).sum().backward()
    for name, p in shared.encoder.layers[0].named_parameters():
        total = sum(
            dict(unshared.encoder.layers[i].named_parameters())[name].grad for i in range(3)
        )
        torch.testing.assert_close(p.grad, total, atol=1e-5, rtol=1e-4)
        # and each use contributes: one step alone is not the whole gradient
        assert not torch.allclose(
            p.grad, dict(unshared.encoder.layers[0].named_parameters())[name].grad, atol=1e-7
        )


def test_layer_fields_for_grouped_templates():
    assert layer_fields(5, 2) == {"{i}": 5, "{g}": 2, "{j}": 1}
    assert layer_fields(3) == {"{i}": 3, "{g}": 3, "{j}": 0}
    table = {"groups.{g}.layers.{j}.w": "layers.{i}.w", "fixed": "fixed", "gone.{i}": None}
    assert expand(table, 4, inner_group_num=2) == {
        "groups.0.layers.0.w": "layers.0.w",
        "groups.0.layers.1.w": "layers.1.w",
        "groups.1.layers.0.w": "layers.2.w",
        "groups.1.layers.1.w": "layers.3.w",
        "fixed": "fixed",
        "gone.0": None,
        "gone.1": None,
        "gone.2": None,
        "gone.3": None,
    }


# albert/albert-base-v2 config.json (its published contents)
ALBERT_BASE_V2 = {
    "architectures": ["AlbertForMaskedLM"],
    "attention_probs_dropout_prob": 0,
    "bos_token_id": 2,
    "classifier_dropout_prob": 0.1,
    "down_scale_factor": 1,
    "embedding_size": 128,
    "eos_token_id": 3,
    "gap_size": 0,
    "hidden_act": "gelu_new",
    "hidden_dropout_prob": 0,
    "hidden_size": 768,
    "initializer_range": 0.02,
    "inner_group_num": 1,
    "intermediate_size": 3072,
    "layer_norm_eps": 1e-12,
    "max_position_embeddings": 512,
    "model_type": "albert",
    "net_structure_type": 0,
    "num_attention_heads": 12,
    "num_hidden_groups": 1,
    "num_hidden_layers": 12,
    "num_memory_blocks": 0,
    "pad_token_id": 0,
    "type_vocab_size": 2,
    "vocab_size": 30000,
}


def test_albert_base_preset_is_albert_base_v2():
    preset = EncoderConfig.from_preset("albert-base")
    assert config_from_hf(ALBERT_BASE_V2) == preset
    assert preset.layer_schedule == [0] * 12 and preset.num_unique_layers == 1
