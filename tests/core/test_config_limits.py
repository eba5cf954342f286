"""Issue 43, kind 1: one bound check of every size a config can set (`config.SIZE_LIMITS`), for
every family, before anything is sized by it; and kind 7's preset name where a config is
expected (`config.as_config`)."""

from __future__ import annotations

import json

import pytest
import torch

import bertfamily as bf
from bertfamily.config import SIZE_LIMITS, EncoderConfig, as_config, check_parameter_budget
from bertfamily.errors import ArgumentTypeError, ConfigError, ModelDirectoryError
from bertfamily.inference.limits import input_limit
from bertfamily.presets import PRESETS
from helpers import save_tiny_files

TINY = [name for name in PRESETS if "tiny" in name]
# the field each family's length-like sizes live in, with a value the family can hold
LENGTH_FIELDS = {
    "tiny-modernbert": "local_attention",
    "tiny-longformer": "attention_window",
    "tiny-deberta-v3": "max_relative_positions",
    "tiny-mpnet": "relative_attention_buckets",
    "tiny-roformer": "max_position_embeddings",
}


@pytest.mark.parametrize("preset", TINY)
def test_every_family_refuses_positions_beyond_the_limit(preset):
    limit = SIZE_LIMITS["max_position_embeddings"]
    with pytest.raises(ConfigError, match=r"max_position_embeddings=1000000000000000 "):
        EncoderConfig.from_preset(preset, max_position_embeddings=10**15)
    with pytest.raises(ConfigError, match=rf"exceeds the limit of {limit:,}"):
        EncoderConfig.from_preset(preset, max_position_embeddings=limit + 1)


@pytest.mark.parametrize("preset, name", sorted(LENGTH_FIELDS.items()))
def test_windows_buckets_and_relative_spans_are_bounded(preset, name):
    limit = SIZE_LIMITS[name]
    config = EncoderConfig.from_preset(preset)
    big = limit + 2  # even: a window must be
    value = [big] * config.num_hidden_layers if name == "attention_window" else big
    with pytest.raises(ConfigError, match=rf"{name}={big} exceeds the limit of {limit:,}"):
        config.replace(**{name: value})


@pytest.mark.parametrize(
    "name", ["vocab_size", "hidden_size", "intermediate_size", "num_attention_heads"]
)
def test_widths_are_bounded_before_the_parameter_budget(name):
    with pytest.raises(ConfigError, match=rf"{name}=.* exceeds the limit"):
        EncoderConfig.from_preset("tiny-bert", **{name: SIZE_LIMITS[name] * 2})


def test_a_limit_can_be_raised_before_loading(monkeypatch):
    monkeypatch.setitem(SIZE_LIMITS, "max_position_embeddings", 2**20)
    config = EncoderConfig.from_preset("tiny-modernbert", max_position_embeddings=2**18)
    assert config.max_sequence_length == 2**18


def test_rotary_config_from_a_directory_is_refused_and_long_lines_are_cut(tmp_path, minilm_dir):
    """The issue's instance: a ModernBERT config.json with max_position_embeddings 10^15 is
    refused on load (one line naming the file and the field); the real limit cuts a 200 KB
    line to the model's input limit (a rotary model has no position table to run out of)."""
    torch.manual_seed(0)
    config = EncoderConfig.from_preset("tiny-modernbert", vocab_size=30522)
    save_tiny_files(bf.build_model(config), tmp_path / "m", minilm_dir)
    from bertfamily.pipelines.embedding.embed import SentenceEmbedder

    embedder = SentenceEmbedder(tmp_path / "m")
    assert embedder.max_seq_length == config.max_position_embeddings == 64
    line = "word " * 40_000  # 200 KB
    rows = embedder.tokenize([line])
    assert [len(r) for r in rows.rows["input_ids"]] == [64] and rows.truncated == [True]
    out = embedder.encode([line])
    assert out.shape == (1, 32) and bool(torch.isfinite(torch.as_tensor(out)).all())

    file = tmp_path / "m" / "config.json"
    raw = json.loads(file.read_text())
    raw["max_position_embeddings"] = 10**15
    file.write_text(json.dumps(raw))
    with pytest.raises(ModelDirectoryError, match=r"config\.json: max_position_embeddings="):
        bf.from_pretrained(tmp_path / "m")
    with pytest.raises(ModelDirectoryError, match="exceeds the limit of 131,072"):
        SentenceEmbedder(tmp_path / "m")


def test_input_limit_of_a_rotary_model_is_its_position_limit():
    config = EncoderConfig.from_preset("tiny-nomic-bert")
    assert not config.position_biased_input
    assert (
        input_limit(config) == config.max_sequence_length <= SIZE_LIMITS["max_position_embeddings"]
    )


# --- kind 7: a preset name (or a dict) where a config is expected --------------------------------


def test_build_model_takes_a_preset_name():
    model = bf.build_model("tiny-mpnet", heads=("mlm",))
    assert model.config == EncoderConfig.from_preset("tiny-mpnet").replace(use_pooler=False)
    assert check_parameter_budget("tiny-mpnet") == EncoderConfig.from_preset(
        "tiny-mpnet"
    ).estimated_parameters(("mlm", "pair"))


def test_build_model_says_what_a_config_is():
    with pytest.raises(bf.UnknownNameError, match="unknown preset 'mpnet-bas'; valid presets"):
        bf.build_model("mpnet-bas")
    with pytest.raises(ArgumentTypeError, match="an EncoderConfig, a preset name or a dict"):
        bf.build_model(12)
    dict_config = as_config({"hidden_size": 64, "num_attention_heads": 4})
    assert dict_config.hidden_size == 64


# --- kind 6: an empty batch in every family -----------------------------------------------------


@pytest.mark.parametrize("preset", TINY)
@pytest.mark.parametrize("heads", [(), ("mlm",), ("classify",), ("tokens",), ("qa",)])
def test_empty_batch_gives_empty_outputs(preset, heads):
    model = bf.build_model(preset, heads=heads).eval()
    ids = torch.zeros((0, 5), dtype=torch.long)
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=torch.ones_like(ids))
    tensors = (
        [v for v in vars(out).values() if isinstance(v, torch.Tensor)]
        if not isinstance(out, torch.Tensor)
        else [out]
    )
    assert tensors and all(t.shape[0] == 0 for t in tensors)
