"""DeBERTa-v2/v3: log buckets against transformers and by hand, attention probabilities, both
masked-LM layouts of both DeBERTa families (read and written) under the installed transformers
major (4.x or 5.x), transformers 4.x's broken legacy=false directories, bf16/fp16 on padded
batches, the deberta-v3-base preset's exact count and its command-line views, config checks.
The contract sweep (every head × four variants, both directions, left padding, row alone) is in
``test_parity.py``."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

import bertfamily as bf
from bertfamily import EncoderConfig, build_model
from bertfamily.checkpoints.convert import CheckpointError
from bertfamily.checkpoints.io import ModelDirectoryError
from bertfamily.config import ConfigError
from bertfamily.inspect.models import meta_model
from bertfamily.modules.attention_disentangled import log_bucket_position, relative_rows
from bertfamily.presets import PUBLISHED_PARAMETERS
from helpers import ATOL, padded_batch
from test_parity import VARIANTS

V3_CONV = VARIANTS["deberta-v2"]["v3-conv"]
MLM_CLASS = {"deberta": "DebertaForMaskedLM", "deberta-v2": "DebertaV2ForMaskedLM"}
# legacy (cls.predictions.*) name → original (lm_predictions.lm_head.*) name
TO_ORIGINAL = {
    "cls.predictions.transform.dense.weight": "lm_predictions.lm_head.dense.weight",
    "cls.predictions.transform.dense.bias": "lm_predictions.lm_head.dense.bias",
    "cls.predictions.transform.LayerNorm.weight": "lm_predictions.lm_head.LayerNorm.weight",
    "cls.predictions.transform.LayerNorm.bias": "lm_predictions.lm_head.LayerNorm.bias",
    "cls.predictions.bias": "lm_predictions.lm_head.bias",
}


def _major() -> int:
    import transformers

    return int(transformers.__version__.split(".")[0])


# --- log buckets ------------------------------------------------------------------------------
@pytest.mark.parametrize("buckets,k", [(256, 512), (8, 8), (16, 64), (7, 20)])
def test_log_buckets_equal_transformers(buckets, k):
    from transformers.models.deberta_v2.modeling_deberta_v2 import make_log_bucket_position

    d = torch.arange(-1500, 1501)
    want = make_log_bucket_position(d, buckets, k).long()
    assert torch.equal(log_bucket_position(d, buckets, k), want)


def test_log_buckets_by_hand():
    """8 buckets (m = 4), k = 8: |d| <= 4 exact; 5 → 4 + ceil(log(5/4) / log(7/4) · 3) = 6;
    7 = k - 1 → 7 (the last bucket); 10 → 9, beyond it (the table read clips it to 7)."""
    d = torch.tensor([0, 1, -3, 4, -4, 5, -5, 6, 7, 10, -10])
    got = log_bucket_position(d, 8, 8).tolist()
    assert got == [0, 1, -3, 4, -4, 6, -6, 7, 7, 9, -9]
    # table rows for T = 11: distance d reads row clamp(bucket(d) + 8, 0, 15)
    rows = relative_rows(11, 8, position_buckets=8)
    assert rows.shape == (21,)
    assert rows[10].item() == 8  # d = 0
    assert rows[10 + 5].item() == 8 + 6 and rows[10 - 5].item() == 8 - 6
    assert rows[-1].item() == 15 and rows[0].item() == 0  # d = ±10: clipped to the table


# attention probabilities of every variant: tests/core/test_parity.py (with DeBERTa v1)


def test_components_change_the_output(hf_checkpoint):
    """Each v2 component is really applied: zeroing the convolution's weights, or the
    relative-table LayerNorm's gain, moves the output by over 10× the parity tolerance (so
    the sweep's 1e-5 parity with transformers would catch a missing component)."""
    path, _ = hf_checkpoint("deberta-v2", "DebertaV2Model", **V3_CONV)
    ours = bf.from_pretrained(path)
    ids, mask = padded_batch((11, 8, 3))
    real = mask.bool()
    with torch.no_grad():
        base = ours(ids, mask).last_hidden_state
        for param in (
            ours.encoder.first_layer_branch.conv.weight,
            ours.encoder.attention_inputs.norm.weight,
        ):
            kept = param.clone()
            param.zero_()
            moved = ours(ids, mask).last_hidden_state
            param.copy_(kept)
            assert (moved - base)[real].abs().max() > 10 * ATOL


# --- masked-LM layouts ------------------------------------------------------------------------
def _original_layout(src, dst) -> None:
    """The `lm_predictions.lm_head.*` layout of the published checkpoints (no `legacy` in
    config.json) from a legacy directory: same tensors, other names."""
    dst.mkdir(parents=True, exist_ok=True)
    state = load_file(src / "model.safetensors")
    save_file({TO_ORIGINAL.get(k, k): v for k, v in state.items()}, str(dst / "model.safetensors"))
    cfg = json.loads((src / "config.json").read_text())
    cfg.pop("legacy", None)
    (dst / "config.json").write_text(json.dumps(cfg))


@pytest.mark.parametrize("layout", ["legacy", "original"])
@pytest.mark.parametrize("family", ["deberta", "deberta-v2"])
def test_mlm_layouts_load_and_save(family, layout, hf_checkpoint, tmp_path):
    """Either layout loads with transformers' outputs; the save writes the legacy layout
    (config legacy=true, cls.predictions.* only), which the installed transformers loads with
    identical outputs, and which loads back bit-identically."""
    import transformers

    overrides = V3_CONV if family == "deberta-v2" else {}
    path, ref = hf_checkpoint(family, MLM_CLASS[family], **overrides)
    assert json.loads((path / "config.json").read_text())["legacy"] is True
    if layout == "original":
        _original_layout(path, tmp_path / "original")
        path = tmp_path / "original"
    ours = bf.from_pretrained(path)
    assert ours.heads == ("mlm",)
    ids, mask = padded_batch((11, 8, 3))
    real = mask.bool()
    with torch.no_grad():
        a = ours(ids, mask).logits
        b = ref(input_ids=ids, attention_mask=mask).logits
    torch.testing.assert_close(a[real], b[real], atol=ATOL, rtol=0)

    out = ours.save_pretrained(tmp_path / "saved")
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["legacy"] is True and cfg["tie_word_embeddings"] is True
    keys = set(load_file(out / "model.safetensors"))
    assert set(TO_ORIGINAL) <= keys and not any(k.startswith("lm_predictions") for k in keys)
    again = getattr(transformers, MLM_CLASS[family]).from_pretrained(out).eval()
    with torch.no_grad():
        c = again(input_ids=ids, attention_mask=mask).logits
    torch.testing.assert_close(a[real], c[real], atol=ATOL, rtol=0)
    back = bf.from_pretrained(out)
    assert all(torch.equal(v, back.state_dict()[k]) for k, v in ours.state_dict().items())


@pytest.mark.parametrize("family", ["deberta", "deberta-v2"])
def test_transformers5_legacy_false_directory(family, hf_checkpoint):
    """transformers 5.x writes `lm_predictions.lm_head.*` for legacy=false (and ties nothing
    there): read with its outputs."""
    if _major() < 5:
        pytest.skip("transformers 4.x breaks legacy=false (see the test below)")
    path, ref = hf_checkpoint(family, MLM_CLASS[family], legacy=False)
    assert any(k.startswith("lm_predictions.") for k in load_file(path / "model.safetensors"))
    ours = bf.from_pretrained(path)
    ids, mask = padded_batch((11, 8, 3))
    with torch.no_grad():
        a, b = ours(ids, mask).logits, ref(input_ids=ids, attention_mask=mask).logits
    torch.testing.assert_close(a[mask.bool()], b[mask.bool()], atol=ATOL, rtol=0)


@pytest.mark.parametrize("family", ["deberta", "deberta-v2"])
def test_transformers4_legacy_false_directory_is_refused_clearly(family, hf_checkpoint, tmp_path):
    """transformers 4.x ties `lm_predictions.lm_head.dense` to the word embedding when
    legacy=false: the file holds the (V, H) embedding under the dense's name and no word
    embedding. Written by 4.x itself where installed, else rebuilt tensor by tensor."""
    import transformers

    if _major() < 5:
        torch.manual_seed(0)
        from helpers import hf_config

        model = getattr(transformers, MLM_CLASS[family])(hf_config(family, legacy=False))
        model.save_pretrained(tmp_path)
    else:
        path, _ = hf_checkpoint(family, MLM_CLASS[family])
        state = load_file(path / "model.safetensors")
        emb = state.pop("deberta.embeddings.word_embeddings.weight")
        state = {TO_ORIGINAL.get(k, k): v for k, v in state.items()}
        state["lm_predictions.lm_head.dense.weight"] = emb  # (V, H)
        bias = state["lm_predictions.lm_head.dense.bias"]
        state["lm_predictions.lm_head.dense.bias"] = torch.cat([bias, torch.zeros(99 - 32)])
        save_file(state, str(tmp_path / "model.safetensors"))
        cfg = json.loads((path / "config.json").read_text())
        (tmp_path / "config.json").write_text(json.dumps({**cfg, "legacy": False}))
    state = load_file(tmp_path / "model.safetensors")
    assert state["lm_predictions.lm_head.dense.weight"].shape == (99, 32)
    assert "deberta.embeddings.word_embeddings.weight" not in state
    with pytest.raises(CheckpointError, match="legacy=false") as info:
        bf.from_pretrained(tmp_path)
    assert "mlm_head.dense.weight" in " ".join(info.value.mismatched)
    assert "encoder.embeddings.token.weight" in info.value.missing


def test_two_mlm_layouts_at_once_are_refused(hf_checkpoint, tmp_path):
    path, _ = hf_checkpoint("deberta-v2", "DebertaV2ForMaskedLM")
    state = load_file(path / "model.safetensors")
    state["lm_predictions.lm_head.bias"] = state["cls.predictions.bias"].clone()
    save_file(state, str(tmp_path / "model.safetensors"))
    shutil.copy(path / "config.json", tmp_path / "config.json")
    with pytest.raises(CheckpointError, match="2 layouts"):
        bf.from_pretrained(tmp_path)


# --- precision --------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("weights", [False, True])
def test_low_precision_with_fully_masked_rows_is_finite(dtype, weights, hf_checkpoint):
    """A padded batch with a row of padding only: every output finite in bf16 and fp16, masked
    probabilities exactly zero, real tokens near fp32 (LayerNorm-scaled: 0.15 absolute)."""
    path, _ = hf_checkpoint("deberta-v2", "DebertaV2ForMaskedLM", **V3_CONV)
    ids, mask = padded_batch((11, 6, 1, 11), seed=2)
    mask[2] = 0  # a fully masked row
    real = mask.bool()
    with torch.no_grad():
        full = bf.from_pretrained(path)(ids, mask)
        low = bf.from_pretrained(path, dtype=dtype)(ids, mask, output_attentions=weights)
    assert low.last_hidden_state.dtype == dtype
    assert torch.isfinite(low.last_hidden_state).all() and torch.isfinite(low.logits).all()
    diff = (low.last_hidden_state.float() - full.last_hidden_state)[real].abs()
    assert diff.max() < 0.15, diff.max()
    if weights:
        for p in low.attentions:
            assert torch.isfinite(p).all()
            assert (p.masked_select(~real[:, None, None, :]) == 0).all()


# --- the deberta-v3-base preset ----------------------------------------------------------------
def test_v3_base_parameter_count_equals_transformers():
    """Base model and masked LM, on the meta device, against DebertaV2Model /
    DebertaV2ForMaskedLM of microsoft/deberta-v3-base's config."""
    import transformers

    from bertfamily.checkpoints.io import config_to_hf

    config = EncoderConfig.from_preset("deberta-v3-base")
    hf = transformers.DebertaV2Config(
        vocab_size=128100,
        hidden_size=768,
        num_hidden_layers=12,
        num_attention_heads=12,
        intermediate_size=3072,
        max_position_embeddings=512,
        type_vocab_size=0,
        relative_attention=True,
        position_buckets=256,
        norm_rel_ebd="layer_norm",
        share_att_key=True,
        pos_att_type="p2c|c2p",
        position_biased_input=False,
        max_relative_positions=-1,
        hidden_act="gelu",
        layer_norm_eps=1e-7,
        pad_token_id=0,
    )
    with torch.device("meta"):
        base = transformers.DebertaV2Model(hf)
        mlm = transformers.DebertaV2ForMaskedLM(hf)
    count = sum(p.numel() for p in base.parameters())
    assert count == meta_model(config).num_parameters() == 183_831_552
    assert count == PUBLISHED_PARAMETERS["deberta-v3-base"]
    ours_mlm = sum(p.numel() for p in meta_model(config, ["mlm"]).parameters())
    assert sum(p.numel() for p in mlm.parameters()) == ours_mlm == count + 720_228
    assert count <= config.estimated_parameters(()) <= 1.02 * count
    written = config_to_hf(config, "DebertaV2Model")
    for name in ("position_buckets", "norm_rel_ebd", "share_att_key", "max_relative_positions"):
        assert written[name] == getattr(hf, name), name


@pytest.mark.slow
def test_v3_base_on_the_command_line(cli):
    result = cli("params", "deberta-v3-base")
    assert result.exit_code == 0, result.output
    assert "183,831,552" in result.output and "393,216" in result.output  # 512 × 768 table
    result = cli("dataflow", "deberta-v3-base", "--json")
    assert result.exit_code == 0, result.output
    notes = " ".join(json.loads(result.output)["differences"]["notes"])
    assert "512 log buckets" in notes and "reuse the content Q/K" in notes
    result = cli("models", "--format", "json")
    row = next(r for r in json.loads(result.output) if r["model"] == "deberta-v3-base")
    assert row["parameters"] == row["published"] == 183_831_552
    assert row["positions"] == "relative (in attention)" and row["segments"] == "none"


# --- config ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "bad,match",
    [
        (dict(position_buckets=128), "position_buckets=128"),  # 64 // 2 ... k = 64: 64 >= 63
        (dict(position_buckets=1), "position_buckets=1"),
        (dict(conv_kernel_size=4), "odd"),
        (dict(conv_kernel_size=3, conv_groups=5), "conv_groups"),
        (dict(conv_act="gelu_new"), "conv_act"),
        (dict(norm_rel_ebd="batch_norm"), "norm_rel_ebd"),
        (dict(conv_kernel_size=3, num_hidden_groups=1), "unshared"),
    ],
)
def test_bad_config_raises(bad, match):
    with pytest.raises(ConfigError, match=match):
        EncoderConfig.from_preset("tiny-deberta-v3", **bad)


def test_v2_fields_need_disentangled_attention():
    with pytest.raises(ConfigError, match="share_att_key, key_bias need attention_kind"):
        EncoderConfig.from_preset("tiny-bert", share_att_key=True, key_bias=True)


def test_norm_rel_ebd_is_normalised():
    config = EncoderConfig.from_preset("tiny-deberta-v3", norm_rel_ebd="Layer_Norm|none")
    assert config.norm_rel_ebd == "layer_norm"


def test_config_json_conv_act_names(hf_checkpoint, tmp_path):
    """conv_act is read under transformers' activation names; an unknown one is refused."""
    path, _ = hf_checkpoint("deberta-v2", "DebertaV2Model", **V3_CONV)
    cfg = json.loads((path / "config.json").read_text())
    assert bf.from_pretrained(path).config.conv_act == "gelu"
    shutil.copy(path / "model.safetensors", tmp_path / "model.safetensors")
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "conv_act": "gelu_new"}))
    assert bf.from_pretrained(tmp_path).config.conv_act == "gelu_tanh"
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "conv_act": "swishy"}))
    with pytest.raises(ModelDirectoryError, match="convolution activation 'swishy'"):
        bf.from_pretrained(tmp_path)


def test_tiny_preset_runs_every_component():
    torch.manual_seed(0)
    model = build_model(EncoderConfig.from_preset("tiny-deberta-v3"), heads=["mlm"]).eval()
    assert model.encoder.first_layer_branch is not None
    assert model.encoder.attention_inputs.norm is not None
    assert model.encoder.attention_inputs.embeddings.num_embeddings == 32  # 2 × 16 buckets
    attention = model.encoder.layers[0].attention
    assert attention.pos_key is None and attention.pos_query is None  # shared with Q/K
    assert attention.k_bias is not None
    ids, mask = padded_batch((7, 5, 2))
    with torch.no_grad():
        out = model(ids, mask)
    assert torch.isfinite(out.logits).all() and out.logits.shape == (3, 7, 99)


def test_published_v3_layout_loads(hf_checkpoint, tmp_path):
    """microsoft/deberta-v3-* as published: no `architectures`, the masked-LM head in the
    original `lm_predictions.lm_head.*` layout and the pretraining discriminator's
    `mask_predictions.*` head, which no transformers class reads: the base model equals
    DebertaV2Model, the RTD head is dropped on purpose (reported), and the MLM head loads."""
    import transformers

    src, _ = hf_checkpoint("deberta-v2", "DebertaV2ForMaskedLM")
    path = tmp_path / "published"
    shutil.copytree(src, path)
    state = load_file(path / "model.safetensors")
    state = {TO_ORIGINAL.get(k, k): v for k, v in state.items()}
    H = state["deberta.embeddings.word_embeddings.weight"].shape[1]
    g = torch.Generator().manual_seed(3)
    rtd = {
        "mask_predictions.dense.weight": torch.randn(H, H, generator=g),
        "mask_predictions.dense.bias": torch.randn(H, generator=g),
        "mask_predictions.LayerNorm.weight": torch.randn(H, generator=g),
        "mask_predictions.LayerNorm.bias": torch.randn(H, generator=g),
        "mask_predictions.classifier.weight": torch.randn(1, H, generator=g),
        "mask_predictions.classifier.bias": torch.randn(1, generator=g),
    }
    save_file({**state, **rtd}, path / "model.safetensors", metadata={"format": "pt"})
    config = json.loads((path / "config.json").read_text())
    for key in ("architectures", "legacy"):
        config.pop(key, None)
    (path / "config.json").write_text(json.dumps(config))

    base, report = bf.from_pretrained(path, heads=[], new_heads=True, return_report=True)
    assert report.clean and base.heads == ()
    assert set(rtd) <= set(report.dropped)
    ref = transformers.DebertaV2Model.from_pretrained(path).eval()
    ids, mask = padded_batch((11, 8, 3))
    with torch.no_grad():
        a = base(ids, mask).last_hidden_state
        b = ref(input_ids=ids, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(a[mask.bool()], b[mask.bool()], atol=ATOL, rtol=0)
    mlm, report = bf.from_pretrained(path, return_report=True)  # the heads the file holds
    assert mlm.heads == ("mlm",) and report.clean and set(rtd) <= set(report.dropped)
    head = {k: v for k, v in mlm.state_dict().items() if k.startswith("mlm_head.")}
    assert torch.equal(head["mlm_head.dense.weight"], state["lm_predictions.lm_head.dense.weight"])
