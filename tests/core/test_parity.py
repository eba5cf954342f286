"""Parity with Hugging Face transformers, by contract: every checkpoint family × every head the
family maps (`checkpoints.keymaps.FAMILIES`), on tiny random checkpoints saved with
``save_pretrained``, padded batches, fp32, 1e-5 — transformers → ours and ours → transformers
(same class, logits and label names) → ours (bit-identical weights). Family-specific cases
(Longformer's explicit global masks, DeBERTa's attention probabilities, legacy checkpoint
files, a fresh head on a base checkpoint) follow the sweep as focused tests."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

import bertfamily as bf
from bertfamily.checkpoints.convert import CheckpointError
from bertfamily.checkpoints.keymaps import FAMILIES
from helpers import ATOL, assert_same_state, longformer_global_mask, padded_batch

LABELS = {0: "neg", 1: "neu", 2: "pos"}
QA_LABELS = {0: "start", 1: "end"}  # transformers' QA heads: Linear(H, 2) for start and end
SEP = 2  # the tiny configs' separator id (transformers' RobertaConfig / LongformerConfig default)
# Config variants swept for every head: ALBERT's layer sharing (3 steps over one shared layer;
# 4 unique layers in 2 groups of 2) and DeBERTa's attention types and relative-position clipping
# (k = 4 < T). The other families have one variant.
VARIANTS = {
    "albert": {
        "shared": {},
        "grouped": dict(num_hidden_layers=4, num_hidden_groups=2, inner_group_num=2),
    },
    "deberta": {
        "c2p|p2c": {},
        "c2p": dict(pos_att_type="c2p"),
        "clipped": dict(max_relative_positions=4),
    },
    # ELECTRA: embedding_size E = 16 < H with `embeddings_project`, E = H without it (the
    # generator's fixed GELU under another hidden_act: tests/core/test_electra.py).
    "electra": {"E<H": {}, "E=H": dict(embedding_size=32)},
    # DeBERTa-v2: shared attention keys on/off × log buckets off/on (8 buckets with k = 8,
    # so at T = 11 distances beyond ±4 are bucketed and the farthest clipped), the last also
    # with the LayerNorm on the relative table and the convolution beside the first layer.
    "deberta-v2": {
        "plain": {},
        "shared": dict(share_att_key=True, pos_att_type="p2c|c2p"),
        "buckets": dict(position_buckets=8, max_relative_positions=8, pos_att_type="c2p"),
        "v3-conv": dict(
            share_att_key=True,
            position_buckets=8,
            max_relative_positions=8,
            norm_rel_ebd="layer_norm",
            conv_kernel_size=3,
            conv_act="gelu",
            conv_groups=2,
        ),
    },
    # RoFormer: E = H; E < H with `embeddings_project` and the values rotated too
    "roformer": {"plain": {}, "E<H+value": dict(embedding_size=16, rotary_value=True)},
    # ERNIE: 3.0's task-type table, and 1.0 without it
    "ernie": {"3.0": {}, "1.0": dict(use_task_id=False)},
    # ModernBERT: bias-free (its published form), and with every bias on
    "modernbert": {
        "bias-free": {},
        "biased": dict(attention_bias=True, mlp_bias=True, norm_bias=True, classifier_bias=True),
    },
    # GTE: gte-base-en-v1.5's layout (no segments) and gte-multilingual-base's (one segment row,
    # added to every token)
    "gte": {"v1.5": {}, "multilingual": dict(type_vocab_size=1, pad_token_id=1)},
    # NomicBERT: one variant (bias-free SwiGLU, two segment types, rotary base 1000)
    # MPNet: one variant, 32 buckets (transformers buckets by 32 whatever the table size); at
    # T = 11 distances >= 8 fall in the log-spaced buckets
}
# Facts each family's tiny checkpoint must read into our config.
CONFIG_FACTS = {
    "albert": dict(
        model_type="albert",
        pair_head="sop",
        hidden_act="gelu_tanh",
        embedding_size=16,
        hidden_size=32,
    ),
    "deberta": dict(
        model_type="deberta", attention_kind="disentangled", position_biased_input=False
    ),
    "deberta-v2": dict(
        model_type="deberta-v2",
        attention_kind="disentangled",
        position_biased_input=False,
        key_bias=True,
    ),
    "longformer": dict(
        model_type="longformer",
        attention_kind="windowed",
        attention_window=(4, 6),
        sep_token_id=SEP,
    ),
    "xlm-roberta": dict(model_type="xlm-roberta", position_scheme="absolute_from_padding"),
    "camembert": dict(model_type="camembert", position_scheme="absolute_from_padding"),
    "electra": dict(model_type="electra", use_pooler=False, pair_head=None, mlm_activation="gelu"),
    "roformer": dict(
        model_type="roformer",
        position_embedding_type="rotary",
        rotary_interleaved=True,
        rotary_table=True,
        use_pooler=False,
    ),
    "modernbert": dict(
        model_type="modernbert",
        norm_position="pre",
        first_attention_norm=False,
        ffn_kind="geglu",
        local_attention=4,
        global_attention_every=2,
        rotary_base=1000.0,
        local_rope_theta=50.0,
        use_pooler=False,
    ),
    "gte": dict(
        model_type="gte",
        position_embedding_type="rotary",
        rotary_interleaved=False,
        rotary_base=500.0,
        ffn_kind="geglu",
        mlp_up_bias=False,
        base_pooler=False,
    ),
    "nomic_bert": dict(
        model_type="nomic_bert",
        position_embedding_type="rotary",
        rotary_base=1000.0,
        attention_bias=False,
        mlp_bias=False,
        base_pooler=False,
    ),
}
PAIR_LOGITS = {
    "bert": "seq_relationship_logits",
    "albert": "sop_logits",
    "ernie": "seq_relationship_logits",
}
SEGMENTS = (
    "bert",
    "albert",
    "electra",
    "roformer",
    "nomic_bert",
)  # families whose tiny configs have two token types
# heads that never read a padded position when left-padded
LEFT_PADDED = ("", "mlm", "tokens", "rtd")
ROBERTA_LIKE = ("roberta", "longformer", "xlm-roberta", "camembert", "mpnet")  # <s> = 0 first


def _head_cases():
    """(family, variant, head key) for every class each family maps; "regression" is the
    sequence-classification class with one label."""
    cases = []
    for family, fmap in FAMILIES.items():
        heads = list(fmap.architectures) + (
            ["regression"] if "classify" in fmap.architectures else []
        )
        for variant in VARIANTS.get(family, {"default": {}}):
            cases += [(family, variant, head) for head in heads]
    return cases


CASES = _head_cases()
# Left padding only for heads that never read a padded position (the others read column 0).
PADDED_CASES = [
    (*case, padding)
    for case in CASES
    for padding in ("right", "left")
    if padding == "right" or case[2] in LEFT_PADDED
]


def test_sweep_covers_every_family_and_head():
    """The sweep is built from the key tables, so a new family or head is swept automatically;
    this pins the minimum it must hold."""
    families = {f for f, _, _ in CASES}
    assert families >= {"bert", "roberta", "distilbert", "albert", "deberta", "longformer"}
    assert "deberta-v2" in families
    assert families >= {"xlm-roberta", "camembert", "electra"}
    for variant in VARIANTS["electra"]:  # generator, discriminator, RTD head, every task head
        heads = {h for f, v, h in CASES if f == "electra" and v == variant}
        assert heads == {"", "mlm", "rtd", "classify", "regression", "tokens", "qa", "choice"}
    no_qa = ("gte", "nomic_bert")  # transformers has no QA class for them
    for family in families:
        heads = {h for f, _, h in CASES if f == family}
        assert {"", "mlm", "classify", "regression", "tokens"} <= heads, family
        assert ("qa" in heads) == (family not in no_qa), family
    for family in no_qa:  # every class transformers has for them
        assert {h for f, _, h in CASES if f == family} == {
            "",
            "mlm",
            "classify",
            "regression",
            "tokens",
        }
    assert {h for f, _, h in CASES if f in ("bert", "albert")} >= {"mlm+pair"}
    assert ("deberta", "c2p|p2c", "choice") not in CASES  # transformers has no such class
    assert {(v, h) for f, v, h in CASES if f == "deberta-v2" and h == "choice"} == {
        (v, "choice") for v in VARIANTS["deberta-v2"]
    }
    assert len(CASES) == sum(
        len(VARIANTS.get(f, {0: 0})) * (len(m.architectures) + 1) for f, m in FAMILIES.items()
    )


def _row(g: torch.Generator, T: int, length: int, question: int, pad_id: int, first: int):
    """first, question, SEP SEP, answer, SEP, padding: exactly three separators, as
    transformers' Longformer QA and multiple-choice defaults demand."""
    answer = length - question - 4
    return torch.cat(
        [
            torch.tensor([first]),
            torch.randint(3, 99, (question,), generator=g),
            torch.tensor([SEP, SEP]),
            torch.randint(3, 99, (answer,), generator=g),
            torch.tensor([SEP]),
            torch.full((T - length,), pad_id),
        ]
    )


def task_inputs(family: str, choice: bool, pad_id: int, left: bool = False):
    """(B, T) or (B, K, T) ids and keyword inputs: rows of 11, 8 and 6 real tokens (T = 11 is
    not a multiple of the Longformer windows 4 and 6), padded right or left; two segments for
    the families that have them."""
    g = torch.Generator().manual_seed(3)
    T = 11
    first = 0 if family in ROBERTA_LIKE else 5  # <s> / any token
    lengths = [[11, 7], [8, 8], [6, 10]] if choice else [[11], [8], [6]]
    questions = [[3, 1], [2, 2], [1, 4]] if choice else [[3], [2], [1]]
    ids = torch.stack(
        [
            torch.stack([_row(g, T, n, q, pad_id, first) for n, q in zip(ns, qs)])
            for ns, qs in zip(lengths, questions)
        ]
    )
    mask = (torch.arange(T)[None, None, :] < torch.tensor(lengths)[..., None]).long()
    if left:  # move the padding to the front of each row
        for b in range(ids.shape[0]):
            for k in range(ids.shape[1]):
                n = int(mask[b, k].sum())
                ids[b, k] = torch.roll(ids[b, k], T - n)
                mask[b, k] = torch.roll(mask[b, k], T - n)
    if not choice:
        ids, mask = ids[:, 0], mask[:, 0]
    kw = {"attention_mask": mask}
    if family in SEGMENTS:
        kw["token_type_ids"] = (torch.arange(T) >= 4).long().expand_as(ids).contiguous()
    return ids, kw


def _labels(head: str):
    if head in ("classify", "tokens", "choice"):
        return LABELS
    return QA_LABELS if head == "qa" else None


def _compare(family: str, head: str, a, b, mask: torch.Tensor, pooler: bool) -> None:
    """Our output ``a`` against transformers' ``b`` for ``head``, at real tokens."""
    real = mask.bool()
    close = dict(atol=ATOL, rtol=0)
    if head == "":
        torch.testing.assert_close(a.last_hidden_state[real], b.last_hidden_state[real], **close)
        if getattr(b, "pooler_output", None) is None:
            assert a.pooler_output is None  # DistilBERT and DeBERTa have no pooler
        elif pooler:
            torch.testing.assert_close(a.pooler_output, b.pooler_output, **close)
    elif head == "mlm":
        torch.testing.assert_close(a.logits[real], b.logits[real], **close)
    elif head == "mlm+pair":
        torch.testing.assert_close(a.logits[real], b.prediction_logits[real], **close)
        torch.testing.assert_close(a.pair_logits, getattr(b, PAIR_LOGITS[family]), **close)
    elif head == "pair":
        torch.testing.assert_close(a.pair_logits, b.logits, **close)
    elif head == "qa":
        torch.testing.assert_close(a.start_logits[real], b.start_logits[real], **close)
        torch.testing.assert_close(a.end_logits[real], b.end_logits[real], **close)
    elif head in ("tokens", "rtd"):  # (B, T, C) per-token scores; (B, T) replaced-token logits
        torch.testing.assert_close(a.logits[real], b.logits[real], **close)
    else:  # classify, regression, choice: one row of logits per sequence (or per choice set)
        torch.testing.assert_close(a.logits, b.logits, **close)


@pytest.mark.parametrize("family,variant,head,padding", PADDED_CASES)
def test_matches_transformers(family, variant, head, padding, hf_checkpoint, tmp_path):
    """transformers → ours → transformers → ours for one family, variant and head. For
    Longformer no global_attention_mask is passed: both sides apply their task defaults."""
    import transformers

    from hf_compat import TRANSFORMERS_MAJOR

    fmap = FAMILIES[family]
    key = "classify" if head == "regression" else head
    cls_name = fmap.architectures[key]
    labels = _labels(head)
    overrides = dict(VARIANTS.get(family, {}).get(variant, {}))
    if labels:
        overrides.update(id2label=labels, label2id={v: k for k, v in labels.items()})
    if head == "regression":
        overrides.update(num_labels=1)
    path, ref = hf_checkpoint(family, cls_name, **overrides)

    ours = bf.from_pretrained(path)
    assert ours.heads == (tuple(key.split("+")) if key else ())
    for field, value in CONFIG_FACTS.get(family, {}).items():
        assert getattr(ours.config, field) == value, field
    if family == "longformer":  # one window per layer, as in the checkpoint
        assert [layer.attention.window for layer in ours.encoder.layers] == [4, 6]
    if labels:
        assert ours.config.label_names == tuple(labels.values())
    if head == "regression":
        assert ours.config.num_labels == 1
    ids, kw = task_inputs(
        family, head == "choice", ours.config.pad_token_id, left=padding == "left"
    )
    mask = kw["attention_mask"]
    with torch.no_grad():
        a = ours(ids, **kw, output_hidden_states=head == "")
        b = ref(input_ids=ids, **kw, output_hidden_states=head == "")
    _compare(family, head, a, b, mask, pooler=padding == "right")
    if head == "regression":
        assert a.logits.shape == (3, 1)
    if head == "choice":
        assert a.logits.shape == (3, 2)
    if head == "":  # every layer's output, not only the last
        if family == "albert":  # ours: one state per layer step; transformers: per group step
            steps = ref.config.num_hidden_layers * ref.config.inner_group_num
            assert len(a.hidden_states) == 1 + steps
            torch.testing.assert_close(
                a.hidden_states[0][mask.bool()], b.hidden_states[0][mask.bool()], atol=ATOL, rtol=0
            )
        else:
            assert len(a.hidden_states) == len(b.hidden_states) == 1 + ref.config.num_hidden_layers
            states = list(zip(a.hidden_states, b.hidden_states))
            if family == "modernbert" and TRANSFORMERS_MAJOR < 5:
                # transformers 4's last ModernBERT state precedes the final norm (5's, and ours,
                # follow it: last_hidden_state, compared above)
                states = states[:-1]
            for ours_h, ref_h in states:
                torch.testing.assert_close(
                    ours_h[mask.bool()], ref_h[mask.bool()], atol=ATOL, rtol=0
                )
    if padding == "left":
        return

    # ours → transformers: same class, same outputs, same label names
    out = ours.save_pretrained(tmp_path / "saved")
    written = json.loads((out / "config.json").read_text())
    assert written["model_type"] == family and written["architectures"] == [cls_name]
    if family in ("deberta", "deberta-v2"):  # the `cls.predictions.*` MLM layout (keymaps.py)
        assert written["legacy"] is True
    again = getattr(transformers, cls_name).from_pretrained(out).eval()
    if labels:
        assert again.config.id2label == labels
    if family == "albert":
        assert again.config.num_hidden_groups == ours.config.num_hidden_groups
        assert again.config.inner_group_num == ours.config.inner_group_num
    with torch.no_grad():
        c = again(input_ids=ids, **kw)
    _compare(family, head, a, c, mask, pooler=True)
    if key in ("mlm", "mlm+pair", "pair") or (key and family != "longformer"):
        # the trunk alone, as AutoModel reads it (Longformer task heads add default globals)
        base = transformers.AutoModel.from_pretrained(out).eval()
        flat = {k: v.flatten(0, 1) if head == "choice" else v for k, v in kw.items()}
        with torch.no_grad():
            h = base(
                input_ids=ids.flatten(0, 1) if head == "choice" else ids, **flat
            ).last_hidden_state
        real = flat["attention_mask"].bool()
        torch.testing.assert_close(
            a.last_hidden_state.reshape(h.shape)[real], h[real], atol=ATOL, rtol=0
        )

    # ... and back into bertfamily: same heads, bit-identical weights
    back = bf.from_pretrained(out)
    assert back.heads == ours.heads
    assert_same_state(ours, back)


# --- padding contract ------------------------------------------------------------------------
ROW_ALONE = [
    ("bert", "right", {}),
    ("roberta", "right", {}),
    ("roberta", "left", {}),
    ("distilbert", "right", {}),
    ("albert", "right", {}),
    ("deberta", "right", {}),
    ("deberta", "right", VARIANTS["deberta"]["clipped"]),
    ("deberta-v2", "right", VARIANTS["deberta-v2"]["v3-conv"]),
    ("deberta-v2", "left", VARIANTS["deberta-v2"]["v3-conv"]),
    ("deberta-v2", "left", VARIANTS["deberta-v2"]["buckets"]),
    ("longformer", "right", {}),
    ("longformer", "left", {}),
    ("xlm-roberta", "left", {}),
    ("camembert", "right", {}),
    ("electra", "right", {}),
    ("electra", "right", VARIANTS["electra"]["E=H"]),
    # rotary positions: q·k depends on the distance only, so left padding changes nothing
    # (not so with rotary_value: the values carry absolute positions)
    ("roformer", "left", {}),
    ("roformer", "right", VARIANTS["roformer"]["E<H+value"]),
    ("gte", "left", {}),
    ("nomic_bert", "right", {}),
]


@pytest.mark.parametrize(
    "family,padding,overrides",
    ROW_ALONE,
    ids=[
        f"{f}-{p}-" + next((v for v, ov in VARIANTS.get(f, {}).items() if o and ov == o), "default")
        for f, p, o in ROW_ALONE
    ],
)
def test_padded_row_equals_row_alone(family, padding, overrides, hf_checkpoint):
    """A padded row's real tokens equal the row run alone (left padding only where positions
    count from the first real token, RoBERTa's scheme, or are relative only: DeBERTa-v2, whose
    convolution sees padding as the sequence's edge). Longformer: with different numbers of
    global tokens per row."""
    path, _ = hf_checkpoint(family, FAMILIES[family].architectures[""], **overrides)
    ours = bf.from_pretrained(path)
    T = 11 if family == "longformer" else 7
    ids, mask = padded_batch(
        (T, 8 if T == 11 else 5, 3 if T == 11 else 2),
        pad_id=ours.config.pad_token_id,
        left=padding == "left",
    )
    g = longformer_global_mask("different", mask) if family == "longformer" else None
    with torch.no_grad():
        kw = {} if g is None else {"global_attention_mask": g}
        full = ours(ids, mask, **kw).last_hidden_state
        for row in range(3):
            keep = mask[row].bool()
            kw = {} if g is None else {"global_attention_mask": g[row, keep][None]}
            alone = ours(ids[row, keep][None], **kw).last_hidden_state[0]
            torch.testing.assert_close(full[row, keep], alone, atol=ATOL, rtol=0)


# --- focused cases ---------------------------------------------------------------------------
@pytest.mark.parametrize("padding", ["right", "left"])
@pytest.mark.parametrize("glob", ["first", "different"])
@pytest.mark.parametrize("head", ["", "mlm"])
def test_longformer_explicit_global_mask_matches_transformers(head, glob, padding, hf_checkpoint):
    """Explicit global tokens: the first real token, or 3, 1 and 0 global tokens per row."""
    path, ref = hf_checkpoint("longformer", FAMILIES["longformer"].architectures[head])
    ours = bf.from_pretrained(path)
    ids, mask = padded_batch((11, 8, 3), pad_id=1, left=padding == "left")
    g = longformer_global_mask(glob, mask)
    with torch.no_grad():
        a = ours(ids, mask, global_attention_mask=g)
        b = ref(input_ids=ids, attention_mask=mask, global_attention_mask=g)
    assert a.last_hidden_state.shape == (3, 11, 32)  # the internal window padding is trimmed
    # the pooler reads column 0, a padding token when left-padded
    _compare("longformer", head, a, b, mask, pooler=padding == "right")


def test_longformer_saved_with_explicit_global_mask(hf_checkpoint, tmp_path):
    import transformers

    ours = bf.from_pretrained(hf_checkpoint("longformer", "LongformerForMaskedLM")[0])
    ours.save_pretrained(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert cfg["model_type"] == "longformer" and cfg["attention_window"] == [4, 6]
    again = transformers.LongformerForMaskedLM.from_pretrained(tmp_path).eval()
    ids, mask = padded_batch((11, 8, 3), pad_id=1)
    g = longformer_global_mask("different", mask)
    with torch.no_grad():
        a = ours(ids, mask, global_attention_mask=g).logits
        b = again(input_ids=ids, attention_mask=mask, global_attention_mask=g).logits
    torch.testing.assert_close(a[mask.bool()], b[mask.bool()], atol=ATOL, rtol=0)


@pytest.mark.parametrize("padding", ["right", "left"])
@pytest.mark.parametrize("glob", ["none", "first", "different"])
def test_longformer_attention_probabilities_match_transformers(glob, padding, hf_checkpoint):
    """output_attentions: band probabilities (B, N, T, 2W+1), the global-key columns and the
    global rows equal transformers' ``attentions`` / ``global_attentions``; hidden unchanged."""
    path, ref = hf_checkpoint("longformer", "LongformerModel")
    ours = bf.from_pretrained(path)
    ids, mask = padded_batch((11, 8, 3), pad_id=1, left=padding == "left")
    B, T = ids.shape
    g = longformer_global_mask(glob, mask)
    kw = {} if g is None else {"global_attention_mask": g}
    caught = []
    handles = [
        layer.attention.register_forward_hook(lambda m, a, o: caught.append(o))
        for layer in ours.encoder.layers
    ]
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
        torch.testing.assert_close(
            out.global_key_probs, b.attentions[layer][..., :G], atol=ATOL, rtol=0
        )
        rows = out.global_probs.transpose(2, 3)  # (B, N, T, G) like transformers
        valid = (torch.arange(G)[None, :] < g.sum(1)[:, None])[:, None, None, :].expand_as(rows)
        torch.testing.assert_close(
            rows[valid], b.global_attentions[layer][:, :, :T][valid], atol=ATOL, rtol=0
        )
        assert not rows[~valid].any()
        # every real local query's probabilities (band + global keys) sum to one
        local = mask.bool() & ~g.bool()
        total = probs.sum(-1) + out.global_key_probs.sum(-1)
        torch.testing.assert_close(total.permute(0, 2, 1)[local], torch.ones(int(local.sum()), 4))


@pytest.mark.parametrize("task", ["classify", "qa", "choice"])
def test_longformer_explicit_global_mask_overrides_default(task, hf_checkpoint):
    """An explicit global_attention_mask is used as given (here: none global, and a mask other
    than the default); the default differs from it, so the default really is applied."""
    path, ref = hf_checkpoint("longformer", FAMILIES["longformer"].architectures[task])
    ours = bf.from_pretrained(path)
    ids, kw = task_inputs("longformer", task == "choice", ours.config.pad_token_id)
    mask = kw["attention_mask"]
    other = torch.zeros_like(mask)
    other[..., 4] = 1  # one global token at column 4 in every row
    key = "start_logits" if task == "qa" else "logits"
    real = mask.bool()
    with torch.no_grad():
        default = ours(ids, **kw).last_hidden_state.view(*mask.shape, -1)[real]
        for g in (torch.zeros_like(mask), other):
            a = ours(ids, **kw, global_attention_mask=g)
            b = ref(input_ids=ids, **kw, global_attention_mask=g)
            sel = real if task == "qa" else slice(None)
            torch.testing.assert_close(
                getattr(a, key)[sel], getattr(b, key)[sel], atol=ATOL, rtol=0
            )
            hidden = a.last_hidden_state.view(*mask.shape, -1)[real]
            assert (hidden - default).abs().max() > 1e-2  # the default was really applied


# DeBERTa v1 and v2 attention: the base class and lengths (v2: T = 11 reaches its log buckets)
DISENTANGLED = {
    "deberta": ("DebertaModel", (7, 5, 2)),
    "deberta-v2": ("DebertaV2Model", (11, 8, 3)),
}


@pytest.mark.parametrize("family,variant", [(f, v) for f in DISENTANGLED for v in VARIANTS[f]])
def test_deberta_attention_probabilities_match_transformers(family, variant, hf_checkpoint):
    """output_attentions: (B, N, T, S) probabilities equal transformers' at real query rows;
    masked keys and padding queries exactly zero; the fast path (SDPA + strided relative views)
    equals the explicit path (DeBERTa v1 and every v2 variant)."""
    cls_name, lengths = DISENTANGLED[family]
    path, ref = hf_checkpoint(family, cls_name, **VARIANTS[family][variant])
    ours = bf.from_pretrained(path)
    ids, mask = padded_batch(lengths)
    real = mask.bool()
    with torch.no_grad():
        a = ours(ids, mask, output_attentions=True)
        b = ref(input_ids=ids, attention_mask=mask, output_attentions=True)
        fast = ours(ids, mask).last_hidden_state
    assert len(a.attentions) == len(b.attentions) == 2
    for ours_p, ref_p in zip(a.attentions, b.attentions):
        torch.testing.assert_close(
            ours_p.transpose(1, 2)[real], ref_p.transpose(1, 2)[real], atol=ATOL, rtol=0
        )
        assert (ours_p.masked_select(~real[:, None, None, :]) == 0).all()
        assert (ours_p.masked_select(~real[:, None, :, None]) == 0).all()
    torch.testing.assert_close(
        a.last_hidden_state[real], b.last_hidden_state[real], atol=ATOL, rtol=0
    )
    torch.testing.assert_close(fast[real], a.last_hidden_state[real], atol=ATOL, rtol=0)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_new_head_on_base_checkpoint(family, hf_checkpoint):
    """A base checkpoint + a fresh classification head: strict loading refuses it; with
    new_heads the trunk equals the checkpoint's and the head has the new labels."""
    path, ref = hf_checkpoint(family, FAMILIES[family].architectures[""])
    with pytest.raises(CheckpointError):
        bf.from_pretrained(path, heads=["classify"])  # strict: the head is missing
    model = bf.from_pretrained(
        path, heads=["classify"], new_heads=True, label_names=("a", "b", "c", "d")
    )
    assert model.config.num_labels == 4
    ids, kw = task_inputs(family, False, model.config.pad_token_id)
    with torch.no_grad():
        h = model.encoder(ids, **kw).last_hidden_state
        r = ref(input_ids=ids, **kw).last_hidden_state
        assert model(ids, **kw).logits.shape == (3, 4)
    real = kw["attention_mask"].bool()
    torch.testing.assert_close(h[real], r[real], atol=ATOL, rtol=0)


def test_bin_weights_and_unprefixed_keys(hf_checkpoint, tmp_path):
    """pytorch_model.bin (read weights_only), legacy gamma/beta names, no `bert.` prefix."""
    from safetensors.torch import load_file

    path, ref = hf_checkpoint("bert", "BertModel")
    state = load_file(path / "model.safetensors")
    state = {
        k.replace("LayerNorm.weight", "LayerNorm.gamma").replace(
            "LayerNorm.bias", "LayerNorm.beta"
        ): v
        for k, v in state.items()
    }
    assert any(k.endswith("LayerNorm.gamma") for k in state)
    state["embeddings.position_ids"] = torch.arange(64)[None]
    torch.save(state, tmp_path / "pytorch_model.bin")
    shutil.copy(path / "config.json", tmp_path / "config.json")
    ours = bf.from_pretrained(tmp_path)
    ids, mask = padded_batch((7, 5, 2))
    with torch.no_grad():
        torch.testing.assert_close(
            ours(ids, mask).last_hidden_state[mask.bool()],
            ref(input_ids=ids, attention_mask=mask).last_hidden_state[mask.bool()],
            atol=ATOL,
            rtol=0,
        )
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == "bert"


# --- losses: `labels` and friends under transformers' names -----------------------------------
PAIR_LABEL = {
    "bert": "next_sentence_label",
    "albert": "sentence_order_label",
    "ernie": "next_sentence_label",
}
LOSS_CASES = [c for c in CASES if c[2] != ""] + [
    (family, "default", "multilabel")
    for family, fmap in FAMILIES.items()
    if "classify" in fmap.architectures
]


def _loss_targets(family: str, head: str, ids: torch.Tensor, mask: torch.Tensor) -> dict:
    """Targets for ``head`` under transformers' argument names: padding and every other
    token carry no MLM / token loss; one QA position lies beyond the sequence (no loss)."""
    g = torch.Generator().manual_seed(7)
    if head in ("mlm", "mlm+pair"):
        labels = torch.randint(3, 99, ids.shape, generator=g)
        labels[(mask == 0) | (torch.arange(ids.shape[-1]) % 2 == 0)] = -100
        if head == "mlm":
            return {"labels": labels}
        return {"labels": labels, PAIR_LABEL[family]: torch.tensor([0, 1, 1])}
    if head == "pair":
        return {"labels": torch.tensor([1, 0, 1])}
    if head == "rtd":  # 1 = replaced; padding positions carry no loss
        return {"labels": torch.randint(0, 2, ids.shape, generator=g)}
    if head == "classify":
        return {"labels": torch.tensor([0, 2, 1])}
    if head == "regression":
        return {"labels": torch.tensor([0.5, -1.0, 2.0])}
    if head == "multilabel":
        return {"labels": torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 0.0], [0.0, 1.0, 1.0]])}
    if head == "tokens":
        labels = torch.randint(0, 3, ids.shape, generator=g)
        labels[mask == 0] = -100
        return {"labels": labels}
    if head == "qa":
        return {
            "start_positions": torch.tensor([1, 3, 40]),
            "end_positions": torch.tensor([2, 5, 0]),
        }
    assert head == "choice"
    return {"labels": torch.tensor([1, 0, 1])}


@pytest.mark.parametrize("family,variant,head", LOSS_CASES)
def test_loss_matches_transformers(family, variant, head, hf_checkpoint):
    """``model(**batch, labels=y).loss`` equals transformers' loss for every family and head,
    including regression and multi-label classification (problem_type in config.json)."""
    fmap = FAMILIES[family]
    key = "classify" if head in ("regression", "multilabel") else head
    # regression has one output and no label names (transformers 4 lets id2label override
    # num_labels=1, so naming three labels would make a 3-output model)
    labels = None if head == "regression" else _labels(key)
    overrides = dict(VARIANTS.get(family, {}).get(variant, {}))
    if labels:
        overrides.update(id2label=labels, label2id={v: k for k, v in labels.items()})
    if head == "regression":
        overrides.update(num_labels=1)
    if head == "multilabel":
        overrides.update(problem_type="multi_label_classification")
    path, ref = hf_checkpoint(family, fmap.architectures[key], **overrides)
    ours = bf.from_pretrained(path)
    if head == "multilabel":
        assert ours.config.problem_type == "multi_label_classification"
    ids, kw = task_inputs(family, head == "choice", ours.config.pad_token_id)
    if head == "qa":  # ours never takes padding as an answer (see test_qa_loss_ignores_padding)
        ids, kw = ids[:1], {k: v[:1] for k, v in kw.items()}
    targets = _loss_targets(family, head, ids, kw["attention_mask"])
    if head == "qa":
        targets = {k: v[:1] for k, v in targets.items()}
    with torch.no_grad():
        a = ours(ids, **kw, **targets)
        b = ref(input_ids=ids, **kw, **targets)
    assert a.loss.dim() == 0 and torch.isfinite(a.loss)
    torch.testing.assert_close(a.loss, b.loss, atol=ATOL, rtol=0)


def test_qa_loss_ignores_padding():
    """A padded batch's QA loss is the mean of its rows' losses alone."""
    torch.manual_seed(0)
    qa = bf.build_model(bf.EncoderConfig.from_preset("tiny-bert"), heads=["qa"]).eval()
    ids = torch.tensor([[5, 6, 7, 8, 9], [5, 6, 7, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    start, end = torch.tensor([1, 2]), torch.tensor([3, 2])
    with torch.no_grad():
        batch = qa(ids, mask, start_positions=start, end_positions=end).loss
        rows = [
            qa(
                ids[i : i + 1, : int(mask[i].sum())],
                start_positions=start[i : i + 1],
                end_positions=end[i : i + 1],
            ).loss
            for i in range(2)
        ]
    torch.testing.assert_close(batch, (rows[0] + rows[1]) / 2, atol=1e-6, rtol=0)


def test_loss_only_for_the_heads_present():
    base = bf.build_model(bf.EncoderConfig.from_preset("tiny-bert")).eval()
    ids = torch.tensor([[5, 6, 7]])
    assert base(ids).loss is None
    with pytest.raises(ValueError, match="take none"):
        base(ids, labels=torch.tensor([1]))
    qa = bf.build_model(bf.EncoderConfig.from_preset("tiny-bert"), heads=["qa"]).eval()
    with pytest.raises(ValueError, match="take none"):
        qa(ids, labels=torch.tensor([1]))
    with pytest.raises(ValueError, match="together"):
        qa(ids, start_positions=torch.tensor([1]))
    mlm = bf.build_model(bf.EncoderConfig.from_preset("tiny-bert"), heads=["mlm"]).eval()
    with pytest.raises(ValueError, match="pair head"):
        mlm(ids, labels=torch.full_like(ids, -100), next_sentence_label=torch.tensor([0]))
    with pytest.raises(TypeError, match="label"):
        mlm(ids, label=ids)  # transformers' name is `labels`
    # the loss trains: one step of SGD on it lowers it
    labels = torch.tensor([[-100, 9, -100]])
    opt = torch.optim.SGD(mlm.parameters(), lr=0.5)
    mlm.train()
    before = mlm(ids, labels=labels).loss
    before.backward()
    opt.step()
    assert mlm(ids, labels=labels).loss < before
