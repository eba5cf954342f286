import pytest

from bertfamily import EncoderConfig
from bertfamily.presets import PRESETS


def test_heads_must_divide_hidden():
    with pytest.raises(ValueError, match=r"hidden_size \(100\).*num_attention_heads \(12\)"):
        EncoderConfig(hidden_size=100, num_attention_heads=12)


@pytest.mark.parametrize(
    "field,value",
    [
        ("vocab_size", 0),
        ("hidden_act", "swish2"),
        ("attention_kind", "magic"),
        ("pad_token_id", 40000),
        ("hidden_dropout_prob", 1.5),
        ("num_hidden_groups", 5),
    ],
)
def test_invalid_values_raise(field, value):
    with pytest.raises(ValueError, match=field):
        EncoderConfig(**{field: value})


def test_unknown_preset_lists_valid_names():
    with pytest.raises(KeyError) as e:
        EncoderConfig.from_preset("bert-huge")
    for name in ("bert-base", "roberta-base", "bert-tiny"):
        assert name in str(e.value)


def test_overrides_and_derived_values():
    c = EncoderConfig.from_preset("roberta-base", num_hidden_layers=3)
    assert c.num_hidden_layers == 3 and c.vocab_size == 50265
    assert c.max_sequence_length == 512  # 514 - pad_token_id(1) - 1
    assert EncoderConfig.from_preset("tinybert-4l").head_dim == 26
    with pytest.raises(TypeError):
        EncoderConfig.from_preset("bert-base", hidden_sise=3)


def test_layer_schedule():
    assert EncoderConfig(num_hidden_layers=4).layer_schedule == [0, 1, 2, 3]
    assert EncoderConfig(num_hidden_layers=4, num_hidden_groups=1).layer_schedule == [0, 0, 0, 0]
    assert EncoderConfig(
        num_hidden_layers=4, num_hidden_groups=2, inner_group_num=2
    ).layer_schedule == [0, 1, 0, 1, 2, 3, 2, 3]


def test_presets_are_valid_configs():
    for name in PRESETS:
        EncoderConfig.from_preset(name)


@pytest.mark.parametrize(
    "field,value",
    [
        ("layer_norm_eps", "tiny"),
        ("layer_norm_eps", 0.0),
        ("hidden_size", 32.0),
        ("num_hidden_layers", True),
        ("use_pooler", 1),
        ("hidden_act", None),
        ("hidden_dropout_prob", float("nan")),
        ("initializer_range", -1.0),
        ("conditional_norms", [["ffn"]]),
        ("pos_att_type", [1]),
        ("num_hidden_layers", 10**6),
    ],
)
def test_types_and_ranges_raise_config_error_naming_the_field(field, value):
    from bertfamily import ConfigError

    with pytest.raises(ConfigError, match=field):
        EncoderConfig(**{field: value})


def test_numbers_become_floats():
    c = EncoderConfig(layer_norm_eps=1, hidden_dropout_prob=0)
    assert isinstance(c.layer_norm_eps, float) and isinstance(c.hidden_dropout_prob, float)


def test_replace_takes_num_labels_and_refuses_unknown_fields():
    """transformers' ``num_labels`` works where users pass it (from_pretrained's keywords go
    through `EncoderConfig.replace`); a misspelt field is refused with the closest names."""
    from bertfamily.errors import ArgumentTypeError, ConfigError

    base = EncoderConfig.from_preset("tiny-bert")
    assert base.replace(num_labels=3).label_names == ("LABEL_0", "LABEL_1", "LABEL_2")
    assert base.replace(num_labels=2, label_names=("neg", "pos")).label_names == ("neg", "pos")
    with pytest.raises(ArgumentTypeError, match=r"'hiden_size' \(did you mean hidden_size"):
        base.replace(hiden_size=8)
    with pytest.raises(TypeError):  # still the builtin users catch
        base.replace(not_a_field=1)
    with pytest.raises(ConfigError, match="num_labels must be a positive integer"):
        base.replace(num_labels=0)
