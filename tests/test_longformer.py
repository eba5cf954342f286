"""Longformer: windowed + global attention against transformers and against a dense reference."""

from __future__ import annotations

import json

import pytest
import torch

import bertfamily as bf
from bertfamily import EncoderConfig, build_model
from bertfamily.heads.global_attention import default_global_attention_mask
from bertfamily.presets import PUBLISHED_PARAMETERS

from helpers import hf_longformer
from reference.longformer import DenseReference

ATOL = 1e-5
B, T = 3, 11  # T is not a multiple of any window used below


def batch(padding: str, seed: int = 1):
    """(B, T) ids and mask with rows of 11, 8 and 3 real tokens, padded right or left."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 99, (B, T), generator=g)
    mask = torch.ones(B, T, dtype=torch.long)
    for row, n in enumerate([11, 8, 3]):
        if padding == "left":
            mask[row, : T - n] = 0
        else:
            mask[row, n:] = 0
    ids[mask == 0] = 1
    return ids, mask


def global_mask(kind: str, mask: torch.Tensor):
    """None, the first real token, or different numbers of global tokens per row (3, 1, 0)."""
    if kind == "none":
        return None
    g = torch.zeros_like(mask)
    first = mask.argmax(dim=1)
    if kind == "first":
        g[torch.arange(B), first] = 1
    else:
        real = [torch.nonzero(mask[r]).flatten() for r in range(B)]
        g[0, real[0][[0, 5, 9]]] = 1
        g[1, real[1][4]] = 1
    return g


@pytest.fixture(scope="module")
def hf_base(tmp_path_factory):
    return hf_longformer("LongformerModel", tmp_path_factory)


@pytest.fixture(scope="module")
def hf_mlm(tmp_path_factory):
    return hf_longformer("LongformerForMaskedLM", tmp_path_factory)


@pytest.mark.parametrize("padding", ["right", "left"])
@pytest.mark.parametrize("glob", ["none", "first", "different"])
@pytest.mark.parametrize("which", ["base", "mlm"])
def test_outputs_match_transformers(which, padding, glob, request):
    path, ref = request.getfixturevalue(f"hf_{which}")
    ours = bf.from_pretrained(path)
    assert ours.heads == (() if which == "base" else ("mlm",))
    assert [layer.attention.window for layer in ours.encoder.layers] == [4, 6]
    ids, mask = batch(padding)
    g = global_mask(glob, mask)
    kw = {} if g is None else {"global_attention_mask": g}
    with torch.no_grad():
        a = ours(ids, mask, **kw)
        b = ref(input_ids=ids, attention_mask=mask, **kw)
    real = mask.bool()
    if which == "base":
        assert a.last_hidden_state.shape == (B, T, 32)  # internal padding trimmed
        torch.testing.assert_close(a.last_hidden_state[real], b.last_hidden_state[real],
                                   atol=ATOL, rtol=0)
        if padding == "right":  # the pooler reads column 0, a padding token when left-padded
            torch.testing.assert_close(a.pooler_output, b.pooler_output, atol=ATOL, rtol=0)
    else:
        torch.testing.assert_close(a.logits[real], b.logits[real], atol=ATOL, rtol=0)


@pytest.mark.parametrize("padding", ["right", "left"])
@pytest.mark.parametrize("glob", ["none", "first", "different"])
def test_attention_weights_match_transformers(hf_base, padding, glob):
    """output_attentions: band probabilities (B, N, T, 2W+1), the global-key columns and the
    global rows equal transformers' ``attentions`` / ``global_attentions``; hidden unchanged."""
    path, ref = hf_base
    ours = bf.from_pretrained(path)
    ids, mask = batch(padding)
    g = global_mask(glob, mask)
    kw = {} if g is None else {"global_attention_mask": g}
    caught = []
    handles = [layer.attention.register_forward_hook(lambda m, a, o: caught.append(o))
               for layer in ours.encoder.layers]
    with torch.no_grad():
        a = ours(ids, mask, output_attentions=True, **kw)
        plain = ours(ids, mask, **kw)
        b = ref(input_ids=ids, attention_mask=mask, output_attentions=True, **kw)
    for h in handles:
        h.remove()
    torch.testing.assert_close(a.last_hidden_state, plain.last_hidden_state, atol=ATOL, rtol=0)
    G = 0 if g is None else int(g.sum(1).max())
    for layer, window in enumerate([4, 6]):
        probs, out = a.attentions[layer], caught[layer]
        assert probs.shape == (B, 4, T, window + 1)  # 2W + 1 band columns, never (T, T)
        assert a.attention_scores[layer].shape == (B, 4, T, window + 1)
        assert b.attentions[layer].shape[-1] == G + window + 1
        torch.testing.assert_close(probs, b.attentions[layer][..., G:], atol=ATOL, rtol=0)
        assert float(probs.max()) > 0.3  # not a near-uniform or all-zero tensor
        if G == 0:
            assert out.global_key_probs is None and out.global_probs is None
            continue
        torch.testing.assert_close(out.global_key_probs, b.attentions[layer][..., :G],
                                   atol=ATOL, rtol=0)
        rows = out.global_probs.transpose(2, 3)  # (B, N, T, G) like transformers
        valid = (torch.arange(G)[None, :] < g.sum(1)[:, None])[:, None, None, :].expand_as(rows)
        torch.testing.assert_close(rows[valid], b.global_attentions[layer][:, :, :T][valid],
                                   atol=ATOL, rtol=0)
        assert not rows[~valid].any()
        # every real local query's probabilities (band + global keys) sum to one
        local = mask.bool() & ~g.bool()
        total = probs.sum(-1) + out.global_key_probs.sum(-1)
        torch.testing.assert_close(total.permute(0, 2, 1)[local], torch.ones(int(local.sum()), 4))


@pytest.mark.parametrize("padding", ["right", "left"])
def test_padded_row_equals_row_alone(hf_base, padding):
    ours = bf.from_pretrained(hf_base[0])
    ids, mask = batch(padding)
    g = global_mask("different", mask)
    with torch.no_grad():
        full = ours(ids, mask, global_attention_mask=g).last_hidden_state
        for row in range(B):
            keep = mask[row].bool()
            alone = ours(ids[row, keep][None],
                         global_attention_mask=g[row, keep][None]).last_hidden_state[0]
            torch.testing.assert_close(full[row, keep], alone, atol=ATOL, rtol=0)


def test_save_pretrained_loads_in_transformers(hf_mlm, tmp_path):
    import transformers

    ours = bf.from_pretrained(hf_mlm[0])
    ours.save_pretrained(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert cfg["model_type"] == "longformer" and cfg["attention_window"] == [4, 6]
    again = transformers.LongformerForMaskedLM.from_pretrained(tmp_path).eval()
    ids, mask = batch("right")
    g = global_mask("different", mask)
    with torch.no_grad():
        a = ours(ids, mask, global_attention_mask=g).logits
        b = again(input_ids=ids, attention_mask=mask, global_attention_mask=g).logits
    torch.testing.assert_close(a[mask.bool()], b[mask.bool()], atol=ATOL, rtol=0)
    back = bf.from_pretrained(tmp_path)
    for (k1, v1), (k2, v2) in zip(ours.state_dict().items(), back.state_dict().items()):
        assert k1 == k2 and torch.equal(v1, v2)


# --- the chunked kernel against the dense reference ------------------------------------------
@pytest.mark.parametrize("windows", [(2, 4, 8), (6, 2, 30), (10, 10, 10)])
@pytest.mark.parametrize("padding", ["right", "left"])
@pytest.mark.parametrize("per_call", [1024, 5])  # 5: several SDPA calls per layer
def test_chunked_equals_dense_reference(windows, padding, per_call):
    config = EncoderConfig.from_preset("tiny-longformer", num_hidden_layers=3,
                                       attention_window=windows)
    torch.manual_seed(2)
    model = build_model(config, heads=["mlm"]).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
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
        g = global_mask(kind, mask)
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
    config = EncoderConfig.from_preset("tiny-longformer", max_position_embeddings=2100,
                                       attention_window=(4, 6))
    model = build_model(config).eval()
    ids = torch.randint(3, 99, (1, 2000), generator=torch.Generator().manual_seed(0))
    changed = ids.clone()
    changed[0, 1000] = (ids[0, 1000] + 1 - 3) % 96 + 3
    with torch.no_grad():
        a = model(ids).last_hidden_state[0]
        b = model(changed).last_hidden_state[0]
    moved = ((a - b).abs().amax(-1) > 0).nonzero().flatten()
    assert moved.min() == 1000 - 5 and moved.max() == 1000 + 5  # 2 + 3 positions per side


# --- parameters, presets, defaults, bad input ---------------------------------------------------
def test_longformer_base_parameters_equal_transformers():
    import transformers

    from bertfamily.checkpoints.io import config_to_hf

    config = EncoderConfig.from_preset("longformer-base")
    hf = config_to_hf(config, "LongformerModel")
    hf.pop("model_type")
    with torch.device("meta"):
        ours = build_model(config)
        ref = transformers.LongformerModel(transformers.LongformerConfig(**hf))
    n_ref = sum(p.numel() for p in ref.parameters())
    assert ours.num_parameters() == n_ref == PUBLISHED_PARAMETERS["longformer-base"] == 148_659_456
    assert config.max_sequence_length == 4096


@pytest.mark.parametrize("window,match", [(5, "even"), (0, "positive even"), (-2, "even"),
                                          ((4,), "one per layer"), ((4, 3), "got 3")])
def test_bad_window(window, match):
    with pytest.raises(ValueError, match=match):
        EncoderConfig.from_preset("tiny-longformer", attention_window=window)


def test_bad_global_attention_mask():
    model = build_model(EncoderConfig.from_preset("tiny-longformer")).eval()
    ids = torch.randint(3, 99, (2, 5))
    with pytest.raises(ValueError, match=r"global_attention_mask has shape \(2, 4\); expected "
                                         r"\(2, 5\)"):
        model(ids, global_attention_mask=torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="integers 0/1 or bools"):
        model(ids, global_attention_mask=torch.zeros(2, 5))
    with pytest.raises(ValueError, match=r"only 0 \(local\) and 1 \(global\)"):
        model(ids, global_attention_mask=torch.full((2, 5), 2))
    with pytest.raises(ValueError, match=r"4096 exceeds the model's maximum of 4095"):
        big = build_model(EncoderConfig.from_preset(
            "tiny-longformer", max_position_embeddings=4097)).eval()
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
    ids = torch.tensor([[0, 7, 8, 2, 2, 9, 9, 2, 1, 1],
                        [0, 7, 2, 2, 9, 9, 9, 9, 9, 2],
                        [1, 1, 0, 7, 8, 9, 2, 2, 9, 2]])
    mask = (ids != 1).long()
    mask[1, 0] = 1
    cls = default_global_attention_mask(ids, "classification", attention_mask=mask)
    assert cls.tolist() == [[1] + [0] * 9, [1] + [0] * 9, [0, 0, 1] + [0] * 7]
    qa = default_global_attention_mask(ids, "qa", sep_token_id=2, attention_mask=mask)
    assert qa.tolist() == [[1, 1, 1, 0, 0, 0, 0, 0, 0, 0],
                           [1, 1, 0, 0, 0, 0, 0, 0, 0, 0],
                           [0, 0, 1, 1, 1, 1, 0, 0, 0, 0]]
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
def test_convert_roberta_to_longformer(tmp_path_factory, tmp_path):
    import transformers

    from bertfamily.to_longformer import to_longformer
    from helpers import hf_tiny

    path, roberta = hf_tiny("roberta", "RobertaForMaskedLM", tmp_path_factory)
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
    g = global_mask("different", mask)
    with torch.no_grad():
        a = ours(ids, mask, global_attention_mask=g).logits
        b = ref(input_ids=ids, attention_mask=mask, global_attention_mask=g).logits
        torch.testing.assert_close(a[mask.bool()], b[mask.bool()], atol=ATOL, rtol=0)
        # Short input, window covering it, no global tokens: exactly RoBERTa (the paper's §5).
        r = roberta(input_ids=ids, attention_mask=mask).logits
        torch.testing.assert_close(ours(ids, mask).logits[mask.bool()], r[mask.bool()],
                                   atol=ATOL, rtol=0)
        # Global tokens start with the local projections: same outputs with or without them.
        torch.testing.assert_close(a[mask.bool()], r[mask.bool()], atol=ATOL, rtol=0)
    long_ids = torch.randint(3, 99, (1, 150))
    with torch.no_grad():
        torch.testing.assert_close(ours(long_ids).logits, ref(input_ids=long_ids).logits,
                                   atol=ATOL, rtol=0)


def test_convert_rejects_bad_sources(tmp_path_factory, tmp_path):
    from bertfamily.to_longformer import to_longformer
    from helpers import hf_tiny

    bert, _ = hf_tiny("bert", "BertModel", tmp_path_factory)
    with pytest.raises(bf.ModelDirectoryError, match="RoBERTa-family"):
        to_longformer(bert, tmp_path / "x")
    roberta, _ = hf_tiny("roberta", "RobertaModel", tmp_path_factory)
    with pytest.raises(ValueError, match="at least the source's limit of 64"):
        to_longformer(roberta, tmp_path / "x", max_positions=32)
    with pytest.raises(ValueError, match="positive even"):
        to_longformer(roberta, tmp_path / "x", window=7)


def test_cli_convert(tmp_path_factory, tmp_path):
    from typer.testing import CliRunner

    from bertfamily.cli import app
    from helpers import hf_tiny

    path, _ = hf_tiny("roberta", "RobertaModel", tmp_path_factory)
    result = CliRunner().invoke(app, ["convert", "to-longformer", "--model", str(path),
                                      "--output", str(tmp_path / "lf"), "--max-positions", "128",
                                      "--window", "8"])
    assert result.exit_code == 0, result.output
    cfg = json.loads((tmp_path / "lf" / "config.json").read_text())
    assert cfg["model_type"] == "longformer" and cfg["max_position_embeddings"] == 130
    assert cfg["attention_window"] == 8 and cfg["architectures"] == ["LongformerModel"]
    bad = CliRunner().invoke(app, ["convert", "to-longformer", "--model", str(path),
                                   "--output", str(tmp_path / "x"), "--window", "7"])
    assert bad.exit_code == 2 and "even" in bad.output
