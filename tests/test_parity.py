"""Parity with Hugging Face transformers on tiny random checkpoints (fp32, 1e-5)."""

from __future__ import annotations

import pytest
import torch

import bertfamily as bf
from bertfamily import EncoderConfig, build_model
from bertfamily.presets import PRESETS, PUBLISHED_PARAMETERS

from helpers import hf_tiny

ATOL = 1e-5


def _batch(pad_id: int, left: bool = False, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 99, (3, 7), generator=g)
    mask = torch.ones(3, 7, dtype=torch.long)
    lengths = [7, 5, 2]
    for row, n in enumerate(lengths):
        if left:
            mask[row, : 7 - n] = 0
        else:
            mask[row, n:] = 0
    ids[mask == 0] = pad_id
    return ids, mask


CASES = [  # (family, HF class, our heads)
    ("bert", "BertModel", ()),
    ("bert", "BertForMaskedLM", ("mlm",)),
    ("bert", "BertForPreTraining", ("mlm", "pair")),
    ("roberta", "RobertaModel", ()),
    ("roberta", "RobertaForMaskedLM", ("mlm",)),
    ("distilbert", "DistilBertModel", ()),
    ("distilbert", "DistilBertForMaskedLM", ("mlm",)),
]


@pytest.mark.parametrize("family,cls_name,heads", CASES)
@pytest.mark.parametrize("left", [False, True])
def test_outputs_match_transformers(family, cls_name, heads, left, tmp_path_factory):
    if left and family != "roberta":
        pytest.skip("left padding is exercised on RoBERTa (position ids skip padding)")
    path, ref = hf_tiny(family, cls_name, tmp_path_factory)
    ours = bf.from_pretrained(path)
    assert ours.heads == heads
    ids, mask = _batch(ours.config.pad_token_id, left=left)
    tt = None
    if family == "bert":
        tt = torch.zeros_like(ids)
        tt[:, 4:] = 1
    with torch.no_grad():
        a = ours(ids, mask, tt)
        b = ref(input_ids=ids, attention_mask=mask, **({"token_type_ids": tt} if tt is not None else {}))
    real = mask.bool()
    if not heads:
        torch.testing.assert_close(a.last_hidden_state[real], b.last_hidden_state[real],
                                   atol=ATOL, rtol=0)
        if family != "distilbert":
            torch.testing.assert_close(a.pooler_output, b.pooler_output, atol=ATOL, rtol=0)
        else:
            assert a.pooler_output is None
    if "mlm" in heads:
        logits = b.prediction_logits if "pair" in heads else b.logits
        torch.testing.assert_close(a.logits[real], logits[real], atol=ATOL, rtol=0)
    if "pair" in heads:
        torch.testing.assert_close(a.pair_logits, b.seq_relationship_logits, atol=ATOL, rtol=0)


@pytest.mark.parametrize("family,cls_name", [("bert", "BertModel"), ("roberta", "RobertaModel"),
                                             ("distilbert", "DistilBertModel")])
@pytest.mark.parametrize("left", [False, True])
def test_padded_row_equals_row_alone(family, cls_name, left, tmp_path_factory):
    if left and family != "roberta":
        pytest.skip("with absolute positions from 0, left padding shifts positions by design")
    path, _ = hf_tiny(family, cls_name, tmp_path_factory)
    ours = bf.from_pretrained(path)
    ids, mask = _batch(ours.config.pad_token_id, left=left)
    with torch.no_grad():
        full = ours(ids, mask).last_hidden_state
        for row in range(3):
            keep = mask[row].bool()
            alone = ours(ids[row, keep][None]).last_hidden_state[0]
            torch.testing.assert_close(full[row, keep], alone, atol=ATOL, rtol=0)


@pytest.mark.parametrize("family,cls_name", [("bert", "BertForPreTraining"),
                                             ("roberta", "RobertaForMaskedLM"),
                                             ("distilbert", "DistilBertForMaskedLM"),
                                             ("bert", "BertModel")])
def test_save_pretrained_loads_in_transformers(family, cls_name, tmp_path_factory, tmp_path):
    import transformers

    path, _ = hf_tiny(family, cls_name, tmp_path_factory)
    ours = bf.from_pretrained(path)
    ours.save_pretrained(tmp_path)
    again = getattr(transformers, cls_name).from_pretrained(tmp_path).eval()
    base = transformers.AutoModel.from_pretrained(tmp_path).eval()
    ids, mask = _batch(ours.config.pad_token_id)
    real = mask.bool()
    with torch.no_grad():
        a = ours(ids, mask)
        b = again(input_ids=ids, attention_mask=mask)
        c = base(input_ids=ids, attention_mask=mask)
    torch.testing.assert_close(a.last_hidden_state[real], c.last_hidden_state[real],
                               atol=ATOL, rtol=0)
    if ours.heads:
        logits = b.prediction_logits if "pair" in ours.heads else b.logits
        torch.testing.assert_close(a.logits[real], logits[real], atol=ATOL, rtol=0)
    # ... and back into bertfamily with the same heads
    back = bf.from_pretrained(tmp_path)
    assert back.heads == ours.heads
    for (k1, v1), (k2, v2) in zip(ours.state_dict().items(), back.state_dict().items()):
        assert k1 == k2 and torch.equal(v1, v2)


def test_bin_weights_and_unprefixed_keys(tmp_path_factory, tmp_path):
    """pytorch_model.bin (read weights_only), legacy gamma/beta names, no `bert.` prefix."""
    import json
    import shutil

    from safetensors.torch import load_file

    path, ref = hf_tiny("bert", "BertModel", tmp_path_factory)
    state = load_file(path / "model.safetensors")
    state = {k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias",
                                                                        "LayerNorm.beta"): v
             for k, v in state.items()}
    state["embeddings.position_ids"] = torch.arange(64)[None]
    torch.save(state, tmp_path / "pytorch_model.bin")
    shutil.copy(path / "config.json", tmp_path / "config.json")
    ours = bf.from_pretrained(tmp_path)
    ids, mask = _batch(0)
    with torch.no_grad():
        torch.testing.assert_close(ours(ids, mask).last_hidden_state[mask.bool()],
                                   ref(input_ids=ids, attention_mask=mask).last_hidden_state[
                                       mask.bool()], atol=ATOL, rtol=0)
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == "bert"


def _hf_config(config: EncoderConfig):
    import transformers

    from bertfamily.checkpoints.io import config_to_hf

    d = config_to_hf(config, "x")
    return transformers.AutoConfig.for_model(d.pop("model_type"), **d)


@pytest.mark.parametrize("name", [n for n in PRESETS if n in PUBLISHED_PARAMETERS])
def test_parameter_counts_equal_transformers_and_spec(name):
    import transformers

    config = EncoderConfig.from_preset(name)
    with torch.device("meta"):
        ours = build_model(config)
        ref = transformers.AutoModel.from_config(_hf_config(config))
    n_ref = sum(p.numel() for p in ref.parameters())
    assert ours.num_parameters() == n_ref == PUBLISHED_PARAMETERS[name]
