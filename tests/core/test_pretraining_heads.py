"""Pretraining losses against references: MLM + NSP vs transformers' BertForPreTraining on the
same weights and batch; SBO vs a naive per-token loop; collation of SBO targets."""

from __future__ import annotations

import numpy as np
import torch
from torch.nn import functional as F

from bertfamily.build import build_model, build_span_boundary_head
from bertfamily.config import EncoderConfig
from bertfamily.objectives.instances import Instance
from bertfamily.objectives.masking import MaskingConfig
from bertfamily.objectives.pretraining import MLMCollator, PretrainingModel
from bertfamily.pretrained import from_pretrained


def batch(seed=0, B=3, T=9, V=99):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, V, (B, T), generator=g)
    attn = torch.ones(B, T, dtype=torch.long)
    attn[0, -2:] = 0
    types = torch.zeros(B, T, dtype=torch.long)
    types[:, 5:] = 1
    labels = torch.full((B, T), -100)
    labels[0, 2], labels[1, 1:4], labels[2, 6] = 17, torch.tensor([3, 40, 41]), 88
    return {
        "input_ids": ids,
        "attention_mask": attn,
        "token_type_ids": types,
        "labels": labels,
        "pair_labels": torch.tensor([0, 1, 1]),
    }


def test_mlm_nsp_loss_equals_bert_for_pretraining(hf_checkpoint):
    path, hf = hf_checkpoint("bert", "BertForPreTraining")
    ours = from_pretrained(path)
    assert ours.heads == ("mlm", "pair")
    b = batch()
    with torch.no_grad():
        ref = hf(
            b["input_ids"],
            attention_mask=b["attention_mask"],
            token_type_ids=b["token_type_ids"],
            labels=b["labels"],
            next_sentence_label=b["pair_labels"],
        )
        loss, parts = PretrainingModel(ours)(b)
    torch.testing.assert_close(loss, ref.loss, atol=1e-5, rtol=1e-5)
    sel = b["labels"] != -100
    mlm_ref = F.cross_entropy(ref.prediction_logits[sel], b["labels"][sel])
    torch.testing.assert_close(parts["mlm_loss"], mlm_ref, atol=1e-5, rtol=1e-5)
    nsp_ref = F.cross_entropy(ref.seq_relationship_logits, b["pair_labels"])
    torch.testing.assert_close(parts["pair_loss"], nsp_ref, atol=1e-5, rtol=1e-5)


def test_gathered_mlm_logits_equal_full_logits():
    torch.manual_seed(0)
    model = build_model(EncoderConfig.from_preset("tiny-bert"), heads=["mlm"]).eval()
    b = batch()
    sel = b["labels"] != -100
    with torch.no_grad():
        full = model(b["input_ids"], b["attention_mask"]).logits  # (B, T, V)
        gathered = model(b["input_ids"], b["attention_mask"], masked_positions=sel).logits
    assert gathered.shape == (int(sel.sum()), 99)
    torch.testing.assert_close(gathered, full[sel], atol=1e-5, rtol=1e-5)


def naive_sbo_loss(model, head, b):
    """One masked token at a time: find its span by scanning, build [x_{s-1}; x_{e+1}; p], two
    GELU + LayerNorm layers written out, tied decoder."""
    with torch.no_grad():
        hidden = model(b["input_ids"], b["attention_mask"]).last_hidden_state
    E = model.encoder.embeddings.token.weight
    losses = []
    B, T = b["labels"].shape
    for r in range(B):
        for i in range(T):
            if b["labels"][r, i] == -100:
                continue
            s = i
            while s - 1 >= 0 and b["labels"][r, s - 1] != -100:
                s -= 1
            e = i
            while e + 1 < T and b["labels"][r, e + 1] != -100:
                e += 1
            h0 = torch.cat([hidden[r, s - 1], hidden[r, e + 1], head.position.weight[i - s]])
            h1 = F.layer_norm(
                F.gelu(h0 @ head.dense1.weight.T + head.dense1.bias),
                (32,),
                head.norm1.weight,
                head.norm1.bias,
                1e-12,
            )
            y = F.layer_norm(
                F.gelu(h1 @ head.dense2.weight.T + head.dense2.bias),
                (32,),
                head.norm2.weight,
                head.norm2.bias,
                1e-12,
            )
            logits = y @ E.T + head.bias
            losses.append(F.cross_entropy(logits[None], b["labels"][r, i][None]))
    return torch.stack(losses).mean()


def test_sbo_against_naive_reference():
    torch.manual_seed(0)
    cfg = EncoderConfig.from_preset(
        "tiny-bert",
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        use_pooler=False,
        pair_head=None,
    )
    model = build_model(cfg, heads=["mlm"]).eval()
    head = build_span_boundary_head(cfg, model).eval()
    with torch.no_grad():
        for p in head.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    # Collate real instances so the SBO fields come from the collator under test.
    insts = []
    for r in range(3):
        ids = np.arange(10, 19) + r
        special = np.zeros(9, bool)
        special[[0, 8]] = True
        insts.append(Instance(ids, np.zeros(9, np.int64), special, np.ones(9, bool), -1))
    collate = MLMCollator(
        MaskingConfig(),
        vocab_size=99,
        mask_token_id=4,
        pad_token_id=0,
        special_ids=[0, 1, 2, 3, 4],
        sbo=True,
    )
    b = collate(insts, np.random.default_rng(0))
    b["labels"][:] = -100
    for r, (s, e) in enumerate([(2, 5), (1, 2), (3, 7)]):
        b["labels"][r, s:e] = b["input_ids"][r, s:e]
    # recompute the SBO fields for the labels set above
    b = {**b, **{k: v for k, v in collate._sbo_fields(b["labels"].numpy()).items()}}
    with torch.no_grad():
        _, parts = PretrainingModel(model, head, pair_objective=False)(b)
        ref = naive_sbo_loss(model, head, b)
    torch.testing.assert_close(parts["sbo_loss"], ref, atol=1e-5, rtol=1e-5)
    assert (
        b["sbo_left"][0, 2:5].tolist() == [1, 1, 1]
        and b["sbo_right"][0, 2:5].tolist() == [5, 5, 5]
        and b["sbo_rel"][2, 3:7].tolist() == [0, 1, 2, 3]
    )


def test_mlm_sop_loss_equals_albert_for_pretraining(hf_checkpoint):
    """SOP (Lan et al. 2020 §4.1) through the same pair head: AlbertForPreTraining's loss
    (MLM + sentence-order) on the same weights and batch."""
    path, hf = hf_checkpoint("albert", "AlbertForPreTraining")
    ours = from_pretrained(path)
    assert ours.heads == ("mlm", "pair") and ours.config.pair_head == "sop"
    b = batch()
    with torch.no_grad():
        ref = hf(
            b["input_ids"],
            attention_mask=b["attention_mask"],
            token_type_ids=b["token_type_ids"],
            labels=b["labels"],
            sentence_order_label=b["pair_labels"],
        )
        loss, parts = PretrainingModel(ours)(b)
    torch.testing.assert_close(loss, ref.loss, atol=1e-5, rtol=1e-5)
    sop_ref = F.cross_entropy(ref.sop_logits, b["pair_labels"])
    torch.testing.assert_close(parts["pair_loss"], sop_ref, atol=1e-5, rtol=1e-5)


def test_unigram_baseline_is_finite_on_unseen_and_unk_targets():
    """[UNK] (a special id that masking can choose) and ids never seen in training keep a finite
    log-probability; only ids seen solely as [CLS]/[SEP]/padding get -inf."""
    import math

    from bertfamily.objectives.pretraining import unigram_log_probs

    def inst(ids):
        ids = np.asarray(ids)
        special = np.isin(ids, [0, 2, 3])  # padding, [CLS], [SEP]
        return Instance(ids, np.zeros(len(ids), np.int64), special, ~special)

    train = [inst([2, 10, 11, 10, 3, 0]), inst([2, 12, 3])]
    logp = unigram_log_probs(train, vocab_size=20, special_ids=[0, 1, 2, 3, 4])  # 1 = [UNK]
    assert torch.isinf(logp[[0, 2, 3]]).all()  # never a target
    assert torch.isfinite(logp[[1, 4, 15]]).all()  # [UNK], [MASK], an unseen id
    # add-one smoothing: "10" seen twice → (2 + 1) / (4 seen + 17 other ids)
    assert math.isclose(float(logp[10]), math.log(3 / 21), rel_tol=1e-12)
    assert math.isclose(float(logp.exp().sum()), 1.0, rel_tol=1e-12)
