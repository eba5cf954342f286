"""Bad input gets a clear ValueError naming the limit or the missing file."""

from __future__ import annotations

import json

import pytest
import torch

import bertfamily as bf
from bertfamily import CheckpointError, EncoderConfig, ModelDirectoryError, build_model


@pytest.fixture(scope="module")
def bert():
    return build_model(EncoderConfig.from_preset("tiny-bert")).eval()


def test_token_id_out_of_range(bert):
    with pytest.raises(ValueError, match=r"99.*vocab_size=99"):
        bert(torch.tensor([[1, 2, 99]]))
    with pytest.raises(ValueError, match=r"-1.*vocab_size"):
        bert(torch.tensor([[1, -1]]))


def test_float_ids_rejected(bert):
    with pytest.raises(ValueError, match="integer"):
        bert(torch.tensor([[1.0, 2.0]]))


def test_token_type_out_of_range(bert):
    with pytest.raises(ValueError, match=r"type_vocab_size=2"):
        bert(torch.tensor([[1, 2]]), token_type_ids=torch.tensor([[0, 2]]))


def test_token_types_rejected_without_segment_embedding():
    model = build_model(EncoderConfig.from_preset("tiny-distilbert")).eval()
    with pytest.raises(ValueError, match="no segment embedding"):
        model(torch.tensor([[1, 2]]), token_type_ids=torch.zeros(1, 2, dtype=torch.long))


def test_roberta_token_types_must_be_zero():
    model = build_model(EncoderConfig.from_preset("tiny-roberta")).eval()
    with pytest.raises(ValueError, match=r"type_vocab_size=1"):
        model(torch.tensor([[0, 5, 2]]), token_type_ids=torch.tensor([[0, 1, 0]]))


def test_sequence_too_long(bert):
    bert(torch.ones(1, 64, dtype=torch.long))  # exactly the limit is fine
    with pytest.raises(ValueError, match=r"65 exceeds.*64"):
        bert(torch.ones(1, 65, dtype=torch.long))


def test_roberta_limit_is_positions_minus_padding_offset():
    config = EncoderConfig.from_preset(
        "roberta-base",
        num_hidden_layers=1,
        hidden_size=32,
        num_attention_heads=4,
        intermediate_size=37,
    )
    model = build_model(config).eval()
    ids = torch.full((1, 512), 5)
    model(ids)
    with pytest.raises(ValueError, match=r"513 exceeds.*512.*padding offset 2"):
        model(torch.full((1, 513), 5))


def test_attention_mask_shape(bert):
    with pytest.raises(ValueError, match=r"attention_mask has shape \(1, 2\); expected \(1, 3\)"):
        bert(torch.tensor([[1, 2, 3]]), torch.ones(1, 2, dtype=torch.long))


def test_directory_errors(tmp_path):
    with pytest.raises(ModelDirectoryError, match="not a directory"):
        bf.from_pretrained(tmp_path / "nope")
    with pytest.raises(ModelDirectoryError, match="no config.json"):
        bf.from_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(ModelDirectoryError, match="model.safetensors.*pytorch_model.bin"):
        bf.from_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(ModelDirectoryError, match=r"unsupported model_type 'gpt2'.*bert"):
        bf.from_pretrained(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ModelDirectoryError, match="not valid JSON"):
        bf.from_pretrained(tmp_path)


def test_missing_unexpected_and_mismatched_keys(hf_checkpoint, tmp_path):
    import shutil

    from safetensors.torch import load_file, save_file

    path, _ = hf_checkpoint("bert", "BertModel")
    state = load_file(path / "model.safetensors")
    del state["encoder.layer.1.output.dense.bias"]
    state["encoder.layer.1.extra.weight"] = torch.zeros(3)
    state["embeddings.LayerNorm.weight"] = torch.zeros(31)
    save_file(state, tmp_path / "model.safetensors")
    shutil.copy(path / "config.json", tmp_path)
    with pytest.raises(CheckpointError) as e:
        bf.from_pretrained(tmp_path)
    msg = str(e.value)
    assert "encoder.layers.1.ffn.down.bias" in msg  # missing (our name)
    assert "bert.encoder.layer.1.extra.weight" in msg  # unexpected
    assert "encoder.embeddings.norm.weight: checkpoint (31,) vs model (32,)" in msg
    model, report = bf.from_pretrained(tmp_path, strict=False, return_report=True)
    assert report.missing == ["encoder.layers.1.ffn.down.bias"]
    assert report.unexpected == ["bert.encoder.layer.1.extra.weight"]
    assert len(report.mismatched) == 1


def test_unsupported_variant(hf_checkpoint, tmp_path):
    import shutil

    path, _ = hf_checkpoint("bert", "BertModel")
    shutil.copy(path / "model.safetensors", tmp_path)
    cfg = json.loads((path / "config.json").read_text())
    cfg["position_embedding_type"] = "relative_key"
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelDirectoryError, match="position_embedding_type"):
        bf.from_pretrained(tmp_path)


@pytest.mark.parametrize("heads", [(), ("classify",), ("mlm",)])
def test_unknown_forward_keywords_raise_type_error(heads):
    """A typo'd keyword is never silently ignored, on any model and any head."""
    model = build_model(EncoderConfig.from_preset("tiny-longformer"), heads=heads).eval()
    ids = torch.tensor([[0, 5, 6, 2]])
    mask = torch.tensor([[1, 0, 0, 0]])
    with pytest.raises(TypeError, match="global_attention_masks"):
        model(ids, global_attention_masks=mask)
    with pytest.raises(TypeError, match="atention_mask"):
        model.encoder(ids, atention_mask=mask)
    with torch.no_grad():  # the spelled-right keyword is read: it changes the output
        plain = model(ids).last_hidden_state
        glob = model(ids, global_attention_mask=torch.tensor([[0, 1, 0, 0]])).last_hidden_state
    assert (plain - glob).abs().max() > 1e-4


@pytest.mark.parametrize("preset", ["tiny-bert", "tiny-deberta", "tiny-albert"])
def test_global_attention_mask_rejected_without_windowed_attention(preset):
    model = build_model(EncoderConfig.from_preset(preset)).eval()
    ids = torch.tensor([[1, 5, 6, 2]])
    with pytest.raises(TypeError, match="global_attention_mask is not an input of this model"):
        model(ids, global_attention_mask=torch.ones_like(ids))
    with pytest.raises(TypeError, match="global_attention_mask is not an input"):
        model.encoder(ids, global_attention_mask=torch.ones_like(ids))
