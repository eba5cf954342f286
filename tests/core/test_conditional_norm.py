"""Conditional Layer Normalization (γ and β computed from a condition vector): formula,
parameter count, zero-init identity, loading ordinary checkpoints, errors, and the docs
example."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

import bertfamily as bf
from bertfamily import EncoderConfig, build_model
from bertfamily.checkpoints.convert import CheckpointError
from bertfamily.modules.norms import ConditionalLayerNorm
from helpers import padded_batch

SITES = ("embeddings", "attention", "ffn", "mlm")


def _batch(seed: int = 1):
    return padded_batch((7, 5, 2), seed=seed, pad_id=None)


def test_parameter_count_h768_c128():
    norm = ConditionalLayerNorm(768, 128)
    assert sum(p.numel() for p in norm.parameters()) == 198_144  # 1,536 + 2 · 98,304
    plain = EncoderConfig.from_preset("bert-base")
    cond = plain.replace(conditional_norms=("embeddings",), condition_size=128)
    with torch.device("meta"):
        a, b = build_model(plain), build_model(cond)
    assert b.num_parameters() - a.num_parameters() == 196_608
    assert sum(p.numel() for p in b.encoder.embeddings.norm.parameters()) == 198_144


def test_formula_per_sequence_and_per_token():
    torch.manual_seed(0)
    norm = ConditionalLayerNorm(32, 5, eps=1e-6)
    with torch.no_grad():
        for p in norm.parameters():
            p.normal_()
    x, c = torch.randn(3, 7, 32), torch.randn(3, 5)
    mu, var = x.mean(-1, keepdim=True), x.var(-1, unbiased=False, keepdim=True)
    gamma = norm.weight + c @ norm.condition_weight  # (B, H)
    beta = norm.bias + c @ norm.condition_bias
    expected = gamma[:, None] * (x - mu) / torch.sqrt(var + 1e-6) + beta[:, None]
    torch.testing.assert_close(norm(x, c), expected, atol=1e-5, rtol=1e-5)
    per_token = c[:, None, :].expand(3, 7, 5)  # (B, T, C): same vector at every position
    torch.testing.assert_close(norm(x, per_token), expected, atol=1e-5, rtol=1e-5)
    other = per_token.clone()
    other[:, 3] += 1.0
    changed = norm(x, other)
    torch.testing.assert_close(changed[:, :3], expected[:, :3], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(changed[:, 3], expected[:, 3])


@pytest.mark.parametrize("preset", ["tiny-bert", "tiny-albert"])
def test_zero_init_equals_unconditioned_model_exactly(preset):
    torch.manual_seed(0)
    heads = ["mlm", "pair"]
    plain = build_model(EncoderConfig.from_preset(preset), heads=heads).eval()
    cond = build_model(
        EncoderConfig.from_preset(preset, conditional_norms=SITES, condition_size=6), heads=heads
    ).eval()
    result = cond.load_state_dict(plain.state_dict(), strict=False)
    assert result.unexpected_keys == []
    assert all(k.endswith(("condition_weight", "condition_bias")) for k in result.missing_keys)
    n_norms = 2 + 2 * cond.config.num_unique_layers  # embeddings, mlm, two per unique layer
    assert len(result.missing_keys) == 2 * n_norms
    ids, mask = _batch()
    condition = torch.randn(3, 6)
    # Same execution path for both (a conditioned forward runs padded; the plain model would
    # otherwise take the unpadded path, equal only to float tolerance): bit-for-bit comparison.
    plain.encoder.unpad = False
    with torch.no_grad():
        a, b = plain(ids, mask), cond(ids, mask, condition=condition)
    for name in ("last_hidden_state", "pooler_output", "logits", "pair_logits"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    # ... and a non-zero W changes every output
    with torch.no_grad():
        cond.encoder.embeddings.norm.condition_weight.normal_()
        c = cond(ids, mask, condition=condition)
    assert not torch.allclose(a.last_hidden_state, c.last_hidden_state, atol=1e-3)


def test_load_ordinary_checkpoint_reports_newly_initialized(hf_checkpoint):
    path, ref = hf_checkpoint("albert", "AlbertForMaskedLM")
    overrides = {"conditional_norms": ("attention", "ffn", "mlm"), "condition_size": 4}
    model, report = bf.from_pretrained(path, return_report=True, config_overrides=overrides)
    assert report.clean and report.missing == []
    assert report.newly_initialized == sorted(
        f"{prefix}.{p}"
        for prefix in (
            "encoder.layers.0.attention_norm",
            "encoder.layers.0.ffn_norm",
            "mlm_head.norm",
        )
        for p in ("condition_bias", "condition_weight")
    )
    ids, mask = _batch()
    with torch.no_grad():
        ours = model(ids, mask, condition=torch.randn(3, 4)).logits
        theirs = ref(input_ids=ids, attention_mask=mask).logits
    torch.testing.assert_close(ours[mask.bool()], theirs[mask.bool()], atol=1e-5, rtol=0)
    plain, plain_report = bf.from_pretrained(path, return_report=True)
    assert plain_report.newly_initialized == []


def test_masked_positions_select_the_condition_too():
    torch.manual_seed(0)
    model = build_model(
        EncoderConfig.from_preset("tiny-bert", conditional_norms=("mlm",), condition_size=3),
        heads=["mlm"],
    ).eval()
    with torch.no_grad():
        model.mlm_head.norm.condition_weight.normal_()
    ids, mask = _batch()
    picked = torch.zeros(3, 7, dtype=torch.bool)
    picked[0, 1] = picked[1, 4] = picked[2, 0] = True
    for condition in (torch.randn(3, 3), torch.randn(3, 7, 3)):
        with torch.no_grad():
            full = model(ids, mask, condition=condition).logits  # (B, T, V)
            part = model(ids, mask, condition=condition, masked_positions=picked).logits  # (M, V)
        torch.testing.assert_close(part, full[picked], atol=1e-5, rtol=1e-5)


def test_condition_weights_get_gradients():
    model = build_model(
        EncoderConfig.from_preset("tiny-bert", conditional_norms=("ffn",), condition_size=3)
    )
    ids, mask = _batch()
    model(ids, mask, condition=torch.randn(3, 3)).last_hidden_state.square().sum().backward()
    grad = model.encoder.layers[1].ffn_norm.condition_weight.grad
    assert grad is not None and grad.abs().sum() > 0


def test_clear_errors():
    cond = build_model(
        EncoderConfig.from_preset("tiny-bert", conditional_norms=("attention",), condition_size=8)
    )
    plain = build_model(EncoderConfig.from_preset("tiny-bert"))
    ids, mask = _batch()
    with pytest.raises(ValueError, match=r"conditional LayerNorms \(condition_size C=8\)"):
        cond(ids, mask)
    with pytest.raises(ValueError, match=r"size 5 .* expects C=8"):
        cond(ids, mask, condition=torch.randn(3, 5))
    with pytest.raises(ValueError, match=r"condition has shape \(2, 8\)"):
        cond(ids, mask, condition=torch.randn(2, 8))
    with pytest.raises(ValueError, match="float"):
        cond(ids, mask, condition=torch.ones(3, 8, dtype=torch.long))
    with pytest.raises(ValueError, match="no conditional norms"):
        plain(ids, mask, condition=torch.randn(3, 8))


@pytest.mark.parametrize(
    "fields,match",
    [
        (dict(conditional_norms=("pooler",), condition_size=4), "conditional_norms"),
        (dict(conditional_norms=("ffn", "ffn"), condition_size=4), "distinct"),
        (dict(conditional_norms="ffn", condition_size=4), "sequence"),
        (dict(conditional_norms=("ffn",)), "condition_size"),
        (dict(conditional_norms=("ffn",), condition_size=0), "condition_size"),
        (dict(condition_size=4), "conditional_norms is empty"),
    ],
)
def test_invalid_config_raises(fields, match):
    with pytest.raises(ValueError, match=match):
        EncoderConfig(**fields)


def test_config_json_round_trip_keeps_tuple():
    c = EncoderConfig(conditional_norms=["attention", "mlm"], condition_size=16)
    assert c.conditional_norms == ("attention", "mlm")
    assert EncoderConfig(**json.loads(c.to_json())) == c


def test_conditional_model_cannot_be_saved_as_hugging_face(tmp_path):
    model = build_model(
        EncoderConfig.from_preset("tiny-bert", conditional_norms=("ffn",), condition_size=3)
    )
    with pytest.raises(CheckpointError, match="condition_weight"):
        model.save_pretrained(tmp_path)


def test_docs_example_runs(tmp_path, monkeypatch):
    page = (Path(__file__).parents[2] / "docs" / "albert.md").read_text()
    section = page.split("## Conditional LayerNorm", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(code, "docs/albert.md", "exec"), namespace)
    assert namespace["logits"].shape == (2, 5, 99)
    assert len(namespace["report"].newly_initialized) == 6
