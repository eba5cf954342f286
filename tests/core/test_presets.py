"""Registry sweep: every preset in `bertfamily.presets.PRESETS` builds, runs forward and backward
on a padded batch with finite values, survives ``save_pretrained`` → ``from_pretrained`` with
identical outputs, and (at full size, on the meta device) has exactly transformers' and the
published parameter count. Full-size presets run numerically with their sizes shrunk
(H = 32, two layer steps, V = 99), keeping every structural choice of the preset."""

from __future__ import annotations

import pytest
import torch

import bertfamily as bf
from bertfamily import EncoderConfig, build_model
from bertfamily.heads.task_heads import TASK_HEADS
from bertfamily.inspect.explore import default_heads
from bertfamily.inspect.models import meta_model, shrink_layers
from bertfamily.presets import FAMILY, PRESETS, PUBLISHED_PARAMETERS
from helpers import padded_batch

FULL_SIZE = [n for n in PRESETS if not n.startswith("tiny-")]
# the presets of issue 30's families (RoFormer, ERNIE, MPNet, ModernBERT, GTE, NomicBERT)
NEW_FAMILIES = [
    "roformer-chinese-base",
    "ernie-3.0-base-zh",
    "mpnet-base",
    "modernbert-base",
    "modernbert-large",
    "gte-base",
    "nomic-bert",
]


def test_registry():
    """The models of the family (the ten, plus DeBERTa-v3, Chinese BERT and RoBERTa-large), each
    with a published count, plus one tiny preset per checkpoint family."""
    from bertfamily.checkpoints.keymaps import FAMILIES

    assert sorted(FULL_SIZE) == sorted(FAMILY) and len(FAMILY) == 13 + len(NEW_FAMILIES)
    assert set(PUBLISHED_PARAMETERS) == set(FAMILY)
    assert {
        EncoderConfig.from_preset(n).model_type for n in PRESETS if n.startswith("tiny-")
    } == set(FAMILIES)


def small(name: str) -> EncoderConfig:
    """The preset itself if tiny; else the same structure at tiny sizes."""
    config = EncoderConfig.from_preset(name)
    if name.startswith("tiny-"):
        return config
    offset = 2 if config.position_scheme == "absolute_from_padding" else 0
    changes = dict(
        vocab_size=99,
        hidden_size=32,
        num_attention_heads=4,
        intermediate_size=37,
        max_position_embeddings=64 + offset,
        embedding_size=32 if config.embedding_size == config.hidden_size else 16,
    )
    if config.attention_kind == "windowed":
        changes["attention_window"] = 4
    if config.pad_token_id >= 99:  # ModernBERT's pad id 50283
        changes.update(pad_token_id=0, sep_token_id=2)
    if config.local_attention:  # a window shorter than the test sequences
        changes["local_attention"] = 4
    if config.position_buckets > 0:  # log buckets need position_buckets / 2 < k - 1 = 63
        changes["position_buckets"] = 16
    return shrink_layers(config.replace(**changes))


def _hf_config(config: EncoderConfig):
    import transformers

    from bertfamily.checkpoints.io import config_to_hf

    d = {k: list(v) if isinstance(v, tuple) else v for k, v in config_to_hf(config, "x").items()}
    return transformers.AutoConfig.for_model(d.pop("model_type"), **d)


@pytest.mark.parametrize("name", list(PRESETS))
def test_forward_backward_round_trip(name, tmp_path):
    config = small(name)
    assert config.model_type == EncoderConfig.from_preset(name).model_type
    heads = default_heads(config)
    torch.manual_seed(0)
    model = build_model(config, heads=heads).train()
    assert model.heads == tuple(heads)
    ids, mask = padded_batch((9, 6, 2), pad_id=config.pad_token_id)
    kw = {}
    if config.attention_kind == "windowed":  # one global token per row: global weights used
        kw["global_attention_mask"] = torch.zeros_like(mask)
        kw["global_attention_mask"][:, 0] = 1
    out = model(ids, mask, **kw)
    real = mask.bool()
    assert out.last_hidden_state.shape == (3, 9, 32)
    assert out.logits.shape == (3, 9, 99)
    assert torch.isfinite(out.last_hidden_state[real]).all() and torch.isfinite(out.logits).all()
    loss = out.logits[real].logsumexp(-1).mean()
    # a pooler exactly where a head reads it (NSP/SOP), as in transformers' classes
    assert (model.encoder.pooler is not None) == ("pair" in heads)
    if model.encoder.pooler is not None:
        assert out.pooler_output.shape == (3, 32) and torch.isfinite(out.pooler_output).all()
        loss = loss + out.pooler_output.square().mean()
    if "pair" in heads:
        assert out.pair_logits.shape == (3, 2) and torch.isfinite(out.pair_logits).all()
        loss = loss + out.pair_logits.logsumexp(-1).mean()
    loss.backward()
    # trainable parameters only (RoFormer's stored rotary table is frozen)
    grads = {n: p.grad for n, p in model.named_parameters() if p.requires_grad}
    assert all(g is not None and torch.isfinite(g).all() for g in grads.values()), [
        n for n, g in grads.items() if g is None
    ]
    assert model.encoder.layers[0].attention.qkv.weight.grad.abs().sum() > 0

    model.eval()
    with torch.no_grad():
        before = model(ids, mask, **kw)
    model.save_pretrained(tmp_path)
    again = bf.from_pretrained(tmp_path)
    assert again.heads == model.heads and again.config.model_type == config.model_type
    with torch.no_grad():
        after = again(ids, mask, **kw)
    assert torch.equal(before.last_hidden_state[real], after.last_hidden_state[real])
    assert torch.equal(before.logits, after.logits)
    if "pair" in heads:
        assert torch.equal(before.pair_logits, after.pair_logits)


@pytest.mark.parametrize("name", list(PRESETS))
def test_parameter_count_equals_transformers_and_published(name):
    """The trunk (embeddings, layers, pooler) on the meta device: ours == transformers'
    AutoModel of the written config == the published figure, where there is one."""
    import transformers

    config = EncoderConfig.from_preset(name)
    ours = meta_model(config)
    assert next(ours.parameters()).device.type == "meta"
    with torch.device("meta"):
        ref = transformers.AutoModel.from_config(_hf_config(config))
    n_ref = sum(p.numel() for p in ref.parameters())
    assert ours.num_parameters() == n_ref
    if name in PUBLISHED_PARAMETERS:
        assert n_ref == PUBLISHED_PARAMETERS[name]


def test_full_size_specifics():
    """Facts of three presets beyond their trunk counts (meta device)."""
    albert = meta_model(EncoderConfig.from_preset("albert-base"))
    assert albert.num_parameters() == 11_683_584
    # all 12 layer steps run one stored layer
    assert {k.split(".")[2] for k in albert.state_dict() if k.startswith("encoder.layers.")} == {
        "0"
    }
    deberta = EncoderConfig.from_preset("deberta-base")
    # with the MLM head the enhanced mask decoder keeps the absolute table (512 × 768)
    assert (
        meta_model(deberta, ["mlm"]).num_parameters()
        == meta_model(deberta).num_parameters() + 512 * 768
        == 138_601_728 + 512 * 768
    )
    assert EncoderConfig.from_preset("longformer-base").max_sequence_length == 4096


HEAD_SETS = [(), ("mlm",), ("pair",), ("mlm", "pair"), ("rtd",)] + [(t,) for t in TASK_HEADS]


@pytest.mark.parametrize("name", list(PRESETS))
def test_parameter_count_is_exact_without_building(name):
    """`EncoderConfig.parameter_count` (closed form, no torch: `bertfamily models` uses it)
    equals the built model's count for every preset and every head set it can build, and for
    the same preset with conditional norms and ALBERT-style layer groups (full-size presets: the
    base model, as `bertfamily models` lists it; the tiny presets cover every head of every
    family)."""
    config = EncoderConfig.from_preset(name)
    if not name.startswith("tiny-"):
        with torch.device("meta"):
            assert config.parameter_count() == build_model(config).num_parameters(heads=True)
        return
    variants = [config]
    if config.attention_kind == "full" and config.hidden_size <= 64:
        variants.append(
            config.replace(
                conditional_norms=("embeddings", "attention", "ffn", "mlm"),
                condition_size=5,
                num_hidden_layers=4,
                num_hidden_groups=2,
                inner_group_num=2,
            )
        )
    checked = 0
    for cfg in variants:
        for heads in HEAD_SETS:
            try:
                with torch.device("meta"):
                    model = build_model(cfg, heads=list(heads))
            except ValueError:  # a head this config cannot have (pair without a pooler, ...)
                continue
            assert cfg.parameter_count(heads) == model.num_parameters(heads=True), (name, heads)
            checked += 1
    assert checked >= 6
