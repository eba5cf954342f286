"""Longformer: the chunked windowed + global kernel against a dense reference, window limits,
global-mask defaults and errors, conversion from RoBERTa. Parity with transformers (outputs with
default and explicit global masks, attention probabilities, every head) is in
``test_parity.py``; longformer-base's parameter count in ``test_presets.py``."""

from __future__ import annotations

import json

import pytest
import torch

import bertfamily as bf
from bertfamily import EncoderConfig, build_model
from bertfamily.heads.global_attention import default_global_attention_mask
from helpers import ATOL, longformer_global_mask, padded_batch
from reference.longformer import DenseReference

B, T = 3, 11  # T is not a multiple of any window used below


def batch(padding: str, seed: int = 1):
    """(B, T) ids and mask with rows of 11, 8 and 3 real tokens, padded right or left."""
    return padded_batch((11, 8, 3), pad_id=1, left=padding == "left", seed=seed)


# --- the chunked kernel against the dense reference ------------------------------------------
@pytest.mark.parametrize("windows", [(2, 4, 8), (6, 2, 30), (10, 10, 10)])
@pytest.mark.parametrize("padding", ["right", "left"])
@pytest.mark.parametrize("per_call", [1024, 5])  # 5: several SDPA calls per layer
def test_chunked_equals_dense_reference(windows, padding, per_call):
    config = EncoderConfig.from_preset(
        "tiny-longformer", num_hidden_layers=3, attention_window=windows
    )
    torch.manual_seed(2)
    model = build_model(config, heads=["mlm"]).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    assert [layer.attention.window for layer in model.encoder.layers] == list(windows)
    for layer in model.encoder.layers:
        layer.attention.queries_per_call = per_call
    reference = build_model(config, heads=["mlm"]).eval()
    reference.load_state_dict(model.state_dict())
    for layer, window in zip(reference.encoder.layers, windows):
        layer.attention = DenseReference(layer.attention, window)
    ids, mask = batch(padding, seed=3)
    for kind in ("none", "first", "different"):
        g = longformer_global_mask(kind, mask)
        kw = {} if g is None else {"global_attention_mask": g}
        with torch.no_grad():
            a = model(ids, mask, **kw)
            b = reference(ids, mask, **kw)
        torch.testing.assert_close(a.last_hidden_state, b.last_hidden_state, atol=ATOL, rtol=0)
        torch.testing.assert_close(a.logits, b.logits, atol=ATOL, rtol=0)


def test_whole_window_equals_full_attention():
    """A window covering the input (W >= T - 1), no global tokens: RoBERTa's full attention."""
    config = EncoderConfig.from_preset("tiny-longformer", attention_window=2 * T)
    torch.manual_seed(4)
    longformer = build_model(config).eval()
    roberta = build_model(config.replace(attention_kind="full", model_type="roberta")).eval()
    state = {k: v for k, v in longformer.state_dict().items() if "global" not in k}
    roberta.load_state_dict(state)
    ids, mask = batch("right")
    with torch.no_grad():
        a = longformer(ids, mask).last_hidden_state
        b = roberta(ids, mask).last_hidden_state
    torch.testing.assert_close(a[mask.bool()], b[mask.bool()], atol=ATOL, rtol=0)


def test_long_input_runs_and_window_limits_influence():
    """T = 2000 on a tiny model; a token's change reaches only the tokens within L·W of it."""
    config = EncoderConfig.from_preset(
        "tiny-longformer", max_position_embeddings=2100, attention_window=(4, 6)
    )
    model = build_model(config).eval()
    ids = torch.randint(3, 99, (1, 2000), generator=torch.Generator().manual_seed(0))
    changed = ids.clone()
    changed[0, 1000] = (ids[0, 1000] + 1 - 3) % 96 + 3
    with torch.no_grad():
        a = model(ids).last_hidden_state[0]
        b = model(changed).last_hidden_state[0]
    moved = ((a - b).abs().amax(-1) > 0).nonzero().flatten()
    assert moved.min() == 1000 - 5 and moved.max() == 1000 + 5  # 2 + 3 positions per side


# --- presets, defaults, bad input --------------------------------------------------------------
@pytest.mark.parametrize(
    "window,match",
    [(5, "even"), (0, "positive even"), (-2, "even"), ((4,), "one per layer"), ((4, 3), "got 3")],
)
def test_bad_window(window, match):
    with pytest.raises(ValueError, match=match):
        EncoderConfig.from_preset("tiny-longformer", attention_window=window)


def test_bad_global_attention_mask():
    model = build_model(EncoderConfig.from_preset("tiny-longformer")).eval()
    ids = torch.randint(3, 99, (2, 5))
    with pytest.raises(
        ValueError,
        match=r"global_attention_mask has shape \(2, 4\); expected "
        r"\(2, 5\)",
    ):
        model(ids, global_attention_mask=torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="integers 0/1 or bools"):
        model(ids, global_attention_mask=torch.zeros(2, 5))
    with pytest.raises(ValueError, match=r"only 0 \(local\) and 1 \(global\)"):
        model(ids, global_attention_mask=torch.full((2, 5), 2))
    with pytest.raises(ValueError, match=r"4096 exceeds the model's maximum of 4095"):
        big = build_model(
            EncoderConfig.from_preset("tiny-longformer", max_position_embeddings=4097)
        ).eval()
        big(torch.full((1, 4096), 5))


def test_global_flag_on_padding_is_ignored():
    model = build_model(EncoderConfig.from_preset("tiny-longformer")).eval()
    ids, mask = batch("right")
    g = torch.zeros_like(mask)
    g[2, 7] = 1  # a padding position of row 2
    with torch.no_grad():
        a = model(ids, mask, global_attention_mask=g).last_hidden_state
        b = model(ids, mask).last_hidden_state
    torch.testing.assert_close(a, b, atol=0, rtol=0)


def test_default_global_attention_mask():
    ids = torch.tensor(
        [
            [0, 7, 8, 2, 2, 9, 9, 2, 1, 1],
            [0, 7, 2, 2, 9, 9, 9, 9, 9, 2],
            [1, 1, 0, 7, 8, 9, 2, 2, 9, 2],
        ]
    )
    mask = (ids != 1).long()
    mask[1, 0] = 1
    cls = default_global_attention_mask(ids, "classification", attention_mask=mask)
    assert cls.tolist() == [[1] + [0] * 9, [1] + [0] * 9, [0, 0, 1] + [0] * 7]
    qa = default_global_attention_mask(ids, "qa", sep_token_id=2, attention_mask=mask)
    assert qa.tolist() == [
        [1, 1, 1, 0, 0, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0, 0, 0, 0, 0],
        [0, 0, 1, 1, 1, 1, 0, 0, 0, 0],
    ]
    with pytest.raises(ValueError, match="sep_token_id"):
        default_global_attention_mask(ids, "qa")
    with pytest.raises(ValueError, match=r"rows \[0\] hold no separator"):
        default_global_attention_mask(torch.tensor([[0, 5, 5]]), "qa", sep_token_id=2)
    with pytest.raises(ValueError, match="unknown task"):
        default_global_attention_mask(ids, "ner")


def test_default_qa_mask_matches_transformers():
    from transformers.models.longformer.modeling_longformer import _compute_global_attention_mask

    ids = torch.tensor([[0, 7, 8, 2, 2, 9, 9, 2, 1, 1], [0, 7, 2, 2, 9, 9, 9, 9, 9, 2]])
    ours = default_global_attention_mask(ids, "qa", sep_token_id=2)
    assert torch.equal(ours.bool(), _compute_global_attention_mask(ids, 2))


# --- conversion from RoBERTa --------------------------------------------------------------------
def test_convert_roberta_to_longformer(hf_checkpoint, tmp_path):
    import shutil

    import transformers

    from bertfamily.convert.longformer import to_longformer

    source, roberta = hf_checkpoint("roberta", "RobertaForMaskedLM")
    path = shutil.copytree(source, tmp_path / "roberta")  # the shared checkpoint stays as is
    (path / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 64}))
    out = to_longformer(path, tmp_path / "lf", max_positions=150, window=32)
    assert json.loads((out / "tokenizer_config.json").read_text())["model_max_length"] == 150
    ours = bf.from_pretrained(out)
    assert ours.config.max_position_embeddings == 152 and ours.config.attention_window == 32
    table = ours.encoder.embeddings.position.weight
    old = roberta.roberta.embeddings.position_embeddings.weight
    assert torch.equal(table[:66], old) and torch.equal(table[66:130], old[2:])
    assert torch.equal(table[130:], old[2:24])
    ref = transformers.LongformerForMaskedLM.from_pretrained(out).eval()
    ids, mask = batch("right")
    g = longformer_global_mask("different", mask)
    with torch.no_grad():
        a = ours(ids, mask, global_attention_mask=g).logits
        b = ref(input_ids=ids, attention_mask=mask, global_attention_mask=g).logits
        torch.testing.assert_close(a[mask.bool()], b[mask.bool()], atol=ATOL, rtol=0)
        # Short input, window covering it, no global tokens: exactly RoBERTa (the paper's §5).
        r = roberta(input_ids=ids, attention_mask=mask).logits
        torch.testing.assert_close(
            ours(ids, mask).logits[mask.bool()], r[mask.bool()], atol=ATOL, rtol=0
        )
        # Global tokens start with the local projections: same outputs with or without them.
        torch.testing.assert_close(a[mask.bool()], r[mask.bool()], atol=ATOL, rtol=0)
    long_ids = torch.randint(3, 99, (1, 150))
    with torch.no_grad():
        torch.testing.assert_close(
            ours(long_ids).logits, ref(input_ids=long_ids).logits, atol=ATOL, rtol=0
        )


def test_convert_rejects_bad_sources(hf_checkpoint, tmp_path):
    from bertfamily.convert.longformer import to_longformer

    bert, _ = hf_checkpoint("bert", "BertModel")
    with pytest.raises(bf.ModelDirectoryError, match="RoBERTa-family"):
        to_longformer(bert, tmp_path / "x")
    roberta, _ = hf_checkpoint("roberta", "RobertaModel")
    with pytest.raises(ValueError, match="at least the source's limit of 64"):
        to_longformer(roberta, tmp_path / "x", max_positions=32)
    with pytest.raises(ValueError, match="positive even"):
        to_longformer(roberta, tmp_path / "x", window=7)


def test_cli_convert(hf_checkpoint, cli, tmp_path):
    path, _ = hf_checkpoint("roberta", "RobertaModel")
    result = cli(
        "convert",
        "to-longformer",
        "--model",
        path,
        "--output",
        tmp_path / "lf",
        "--max-positions",
        "128",
        "--window",
        "8",
    )
    assert result.exit_code == 0, result.output
    cfg = json.loads((tmp_path / "lf" / "config.json").read_text())
    assert cfg["model_type"] == "longformer" and cfg["max_position_embeddings"] == 130
    assert cfg["attention_window"] == 8 and cfg["architectures"] == ["LongformerModel"]
    bad = cli(
        "convert", "to-longformer", "--model", path, "--output", tmp_path / "x", "--window", "7"
    )
    assert bad.exit_code == 2 and "even" in bad.output
