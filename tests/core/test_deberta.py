"""DeBERTa v1: disentangled attention against a naive reference, the heads-interleaved join,
bf16, EMD, published checkpoint layout, config checks. Parity with transformers (attention
variants, clipping, every head, both directions) is in ``test_parity.py``; deberta-base's
parameter counts in ``test_presets.py``."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from safetensors.torch import load_file, save_file

import bertfamily as bf
from bertfamily import EncoderConfig, build_model
from bertfamily.checkpoints.convert import JOINS
from bertfamily.modules.attention_disentangled import (
    DisentangledSelfAttention,
    RelativePositionEmbeddings,
)
from bertfamily.modules.context import AttentionContext
from helpers import padded_batch
from reference.disentangled import disentangled_attention


def _batch(seed: int = 1):
    return padded_batch((7, 5, 2), seed=seed)


def test_heads_interleaved_join_both_directions():
    """in_proj rows [q0, k0, v0, q1, k1, v1] (Dh rows each) ↔ ours [q0, q1, k0, k1, v0, v1]."""
    config = EncoderConfig.from_preset(
        "tiny-deberta", hidden_size=4, num_attention_heads=2, intermediate_size=5
    )
    Dh = 2
    names = ["q0", "k0", "v0", "q1", "k1", "v1"]
    hf = torch.cat([torch.full((Dh, 3), float(i)) for i in range(6)])  # (3H=6·Dh, 3)
    join, split = JOINS["heads_interleaved"]
    ours = join([hf], config)
    order = [names[int(v)] for v in ours[::Dh, 0]]
    assert order == ["q0", "q1", "k0", "k1", "v0", "v1"]
    (back,) = split(ours, 1, config)
    assert torch.equal(back, hf)


def _random_attention(pos_att_type, H=32, N=4, k=4, seed=0):
    torch.manual_seed(seed)
    att = DisentangledSelfAttention(H, N, 0.0, 0.0, pos_att_type).eval()
    rel = RelativePositionEmbeddings(k, H)
    with torch.no_grad():
        for p in list(att.parameters()) + list(rel.parameters()):
            p.normal_(0, 0.3)
    w = {
        "qkv": att.qkv.weight,
        "q_bias": att.q_bias,
        "v_bias": att.v_bias,
        "pos_key": att.pos_key.weight if att.pos_key is not None else None,
        "pos_query": att.pos_query.weight if att.pos_query is not None else None,
        "pos_query_bias": att.pos_query.bias if att.pos_query is not None else None,
        "out": att.out.weight,
        "out_bias": att.out.bias,
    }
    return att, rel, w


@pytest.mark.parametrize("pos_att_type", [("c2p", "p2c"), ("c2p",), ("p2c",), ()])
@pytest.mark.parametrize("k,T", [(4, 7), (16, 7), (3, 1)])
@pytest.mark.parametrize("weights_path", [False, True])
def test_matches_naive_reference(pos_att_type, k, T, weights_path):
    att, rel, w = _random_attention(pos_att_type, k=k)
    x = torch.randn(3, T, 32)
    mask = torch.ones(3, T, dtype=torch.long)
    mask[1, T // 2 + 1 :] = 0
    ctx = AttentionContext.from_mask(mask, x.dtype, need_weights=weights_path)
    ctx = dataclasses.replace(ctx, **rel(x, ctx))
    with torch.no_grad():
        got = att(x, ctx).hidden
    want = disentangled_attention(x, mask, rel.embeddings.weight, w, 4, pos_att_type)
    real = mask.bool()
    torch.testing.assert_close(got[real].double(), want[real], atol=1e-5, rtol=0)
    # padding queries attend to nothing: only the output projection's bias remains
    torch.testing.assert_close(got[~real].double(), want[~real], atol=1e-5, rtol=0)


def test_separate_query_states_match_reference():
    """The enhanced mask decoder's path: queries from one input, keys/values from another."""
    att, rel, w = _random_attention(("c2p", "p2c"), k=4)
    x, q = torch.randn(2, 6, 32), torch.randn(2, 6, 32)
    mask = torch.tensor([[1] * 6, [1] * 4 + [0] * 2])
    ctx = AttentionContext.from_mask(mask, x.dtype)
    ctx = dataclasses.replace(ctx, **rel(x, ctx))
    with torch.no_grad():
        got = att(q, dataclasses.replace(ctx, key_value_states=x)).hidden
    want = disentangled_attention(
        x, mask, rel.embeddings.weight, w, 4, ("c2p", "p2c"), query_states=q
    )
    torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=0)


def test_bf16_padded_batch_is_finite_and_close_to_fp32(hf_checkpoint):
    """bf16 (8-bit mantissa, ~3e-3 relative): LayerNorm-scaled outputs within 0.15 absolute
    of fp32 and 0.03 on average, at real tokens; every value finite, padding included."""
    path, _ = hf_checkpoint("deberta", "DebertaForMaskedLM")
    ids, mask = _batch()
    real = mask.bool()
    with torch.no_grad():
        a = bf.from_pretrained(path)(ids, mask, output_attentions=True)
        b = bf.from_pretrained(path, dtype=torch.bfloat16)(ids, mask, output_attentions=True)
        c = bf.from_pretrained(path, dtype=torch.bfloat16)(ids, mask)
    for out in (b, c):
        assert out.last_hidden_state.dtype == torch.bfloat16
        assert torch.isfinite(out.last_hidden_state).all() and torch.isfinite(out.logits).all()
        diff = (out.last_hidden_state.float() - a.last_hidden_state)[real].abs()
        assert diff.max() < 0.15 and diff.mean() < 0.03, (diff.max(), diff.mean())
    assert all((p.masked_select(~real[:, None, None, :]) == 0).all() for p in b.attentions)


def test_emd_uses_absolute_positions_only_in_the_decoder():
    torch.manual_seed(0)
    model = build_model(EncoderConfig.from_preset("tiny-deberta"), heads=["mlm"]).eval()
    assert model.mlm_decoder is not None and model.encoder.embeddings.position is not None
    ids, mask = _batch()
    shifted = torch.arange(7)[None] + 5
    with torch.no_grad():
        a = model(ids, mask)
        b = model(ids, mask, position_ids=shifted)
        # by hand: the last layer twice, queries = H_{L-1} + P, keys/values = H_{L-1}
        out, ctx = model.encoder(ids, mask, output_hidden_states=True, return_context=True)
        layer = model.encoder.layers[-1]
        h = out.hidden_states[-2]
        ctx = dataclasses.replace(ctx, key_value_states=h)
        q = h + model.encoder.embeddings.position.weight[:7]
        for _ in range(2):
            q, _ = layer(q, ctx)
        manual = model.mlm_head(q)
    real = mask.bool()
    torch.testing.assert_close(a.last_hidden_state, b.last_hidden_state, atol=0, rtol=0)
    assert (a.logits[real] - b.logits[real]).abs().max() > 1e-2
    torch.testing.assert_close(a.logits[real], manual[real], atol=1e-5, rtol=0)
    assert a.hidden_states is None
    plain = build_model(EncoderConfig.from_preset("tiny-deberta", emd_layers=0), heads=["mlm"])
    assert plain.mlm_decoder is None and plain.encoder.embeddings.position is None


def test_published_layout_position_table(hf_checkpoint, tmp_path):
    """Published checkpoints carry deberta.embeddings.position_embeddings although
    position_biased_input=False: dropped for the plain model, read by the decoder."""
    path, _ = hf_checkpoint("deberta", "DebertaForMaskedLM")
    state = load_file(path / "model.safetensors")
    table = torch.randn(64, 32)
    state["deberta.embeddings.position_embeddings.weight"] = table
    save_file(state, str(tmp_path / "model.safetensors"))
    cfg = json.loads((path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    model, report = bf.from_pretrained(tmp_path, return_report=True)
    assert report.clean and "encoder.embeddings.position.weight" in report.dropped
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "emd_layers": 2}))
    emd = bf.from_pretrained(tmp_path)
    assert emd.mlm_decoder is not None
    assert torch.equal(emd.encoder.embeddings.position.weight, table)


@pytest.mark.parametrize(
    "bad",
    [
        dict(pos_att_type="c2x"),
        dict(pos_att_type="c2p|c2p"),
        dict(position_biased_input=True),
        dict(attention_kind="full"),
        dict(emd_layers=-1),
    ],
)
def test_bad_config_raises(bad):
    with pytest.raises(ValueError):
        EncoderConfig.from_preset("tiny-deberta", **bad)


def test_pos_att_type_list_is_normalised():
    config = EncoderConfig.from_preset("tiny-deberta", pos_att_type=["P2C", "c2p"])
    assert config.pos_att_type == "p2c|c2p"


def test_benchmark_quick_runs():
    """benchmarks/deberta.py --quick: same weights in both, so outputs agree; ratio printed."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "bench_deberta", Path(__file__).parents[2] / "benchmarks" / "deberta.py"
    )
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    r = bench.run(quick=True)
    assert r["max_abs_diff"] < 1e-5 and r["ratio"] > 0
