"""The families of issue 30 (RoFormer, ERNIE, MPNet, ModernBERT, GTE, NomicBERT) beyond the
parity sweep of tests/core/test_parity.py (which covers every family × head from the key tables):
their components in the views (`params`, `dataflow`, `models`), ONNX export, and their
tokenizer directories. Tiny presets only."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

import bertfamily as bf
from bertfamily import EncoderConfig, build_model
from bertfamily.cli import app
from bertfamily.presets import PRESETS

runner = CliRunner()
# tiny preset → the full-size presets of that family
NEW = {
    "tiny-roformer": ["roformer-chinese-base"],
    "tiny-ernie": ["ernie-3.0-base-zh"],
    "tiny-mpnet": ["mpnet-base"],
    "tiny-modernbert": ["modernbert-base", "modernbert-large"],
    "tiny-gte": ["gte-base"],
    "tiny-nomic-bert": ["nomic-bert"],
}


@pytest.mark.parametrize("tiny", list(NEW))
def test_onnx_export_matches_pytorch(tiny, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    from bertfamily.convert.onnx import export_onnx

    torch.manual_seed(0)
    model = build_model(EncoderConfig.from_preset(tiny), heads=["mlm"]).eval()
    session = ort.InferenceSession(str(export_onnx(model, tmp_path / "m.onnx")))
    for B, T in ((3, 13), (1, 5)):  # shapes other than the export example
        ids = torch.randint(3, 99, (B, T), generator=torch.Generator().manual_seed(T))
        mask = torch.ones(B, T, dtype=torch.long)
        mask[-1, T // 2 :] = 0
        feed = {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}
        if model.config.type_vocab_size:
            feed["token_type_ids"] = np.zeros((B, T), dtype=np.int64)
        got = session.run(None, feed)
        with torch.no_grad():
            want = model(ids, mask)
        real = mask.bool().numpy()
        np.testing.assert_allclose(got[0][real], want.last_hidden_state.numpy()[real], atol=1e-4)
        np.testing.assert_allclose(got[-1][real], want.logits.numpy()[real], atol=1e-4)


@pytest.mark.parametrize("name", [n for names in NEW.values() for n in names])
def test_params_view_adds_up(name):
    result = runner.invoke(app, ["params", name, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    config = EncoderConfig.from_preset(name)
    assert data["total"] == config.parameter_count()


@pytest.mark.parametrize("tiny", list(NEW))
def test_dataflow_view_runs(tiny):
    result = runner.invoke(app, ["dataflow", tiny, "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)


def test_models_view_lists_the_new_presets():
    result = runner.invoke(app, ["models", "--format", "csv"])
    assert result.exit_code == 0, result.output
    for names in NEW.values():
        for name in names:
            assert name in result.output


def test_dataflow_shows_rotary_tables():
    """The rotary provider appears once, encoder-level, with its (P, Dh) stored table."""
    result = runner.invoke(app, ["dataflow", "tiny-roformer", "--json"])
    assert result.exit_code == 0, result.output
    assert "RoPE: cos/sin" in result.output


def test_roformer_table_is_the_sinusoidal_one_and_frozen():
    model = build_model(EncoderConfig.from_preset("tiny-roformer"))
    table = model.encoder.attention_inputs.weight
    assert table.shape == (64, 8) and not table.requires_grad
    t, i = 5, 1  # sin(5 / 10000^(2/8)), cos(...)
    angle = 5 / 10000 ** (2 * i / 8)
    assert abs(float(table[t, i]) - np.sin(angle)) < 1e-6
    assert abs(float(table[t, 4 + i]) - np.cos(angle)) < 1e-6


ROFORMER_VOCAB = (
    ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    + list("我们是中国人，今天气很好。北京大学生前来应聘的")
    + ["我们", "中国", "今天", "天气", "北京", "大学生", "应聘", "hello", "world", "##s", "a"]
)
ROFORMER_TEXTS = [
    "我们是中国人，今天天气很好。",
    "北京大学生前来应聘",
    "hello worlds 中国人 a",
    "今天的天气，HELLO！",
]


def _roformer_directory(path, tokenizer_json: bool = False):
    """junnyu/roformer_chinese_base's tokenizer layout: vocab.txt and tokenizer_config.json
    naming RoFormerTokenizer (no tokenizer.json)."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "vocab.txt").write_text("\n".join(ROFORMER_VOCAB) + "\n", encoding="utf-8")
    (path / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "RoFormerTokenizer", "do_lower_case": True})
    )
    return path


def test_roformer_tokenizer_splits_jieba_words(tmp_path):
    """A RoFormer tokenizer directory pre-tokenises with jieba words: a word in the vocabulary
    is one token (中国), a jieba word outside it falls apart into characters (今天天气: 天气 is
    in the vocabulary, but WordPiece never sees it as a word)."""
    tok = bf.load_tokenizer(_roformer_directory(tmp_path))
    assert tok.tokenize("我们是中国人") == ["我们", "是", "中国", "人"]
    assert tok.tokenize("北京大学生前来应聘") == ["北京", "大学生", "前", "来", "应聘"]
    assert tok.tokenize("今天天气很好") == ["今", "天", "天", "气", "很", "好"]
    word, ren = ROFORMER_VOCAB.index("中国"), ROFORMER_VOCAB.index("人")
    assert tok("中国人")["input_ids"][0].tolist() == [2, word, ren, 3]
    # saved, it loads again with the same ids (tokenizer.json keeps BERT's pre-tokenizer;
    # tokenizer_config.json names RoFormerTokenizer, which restores jieba)
    again = bf.load_tokenizer(tok.save_pretrained(tmp_path / "saved"))
    config = json.loads((tmp_path / "saved" / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "RoFormerTokenizer"
    for text in ROFORMER_TEXTS:
        assert again.tokenize(text) == tok.tokenize(text)


def test_roformer_jieba_fallback_equals_rjieba(tmp_path, monkeypatch):
    """Without rjieba the words come from jieba (a dependency); on these texts they are the
    same words rjieba gives."""
    pytest.importorskip("rjieba")
    import jieba

    from bertfamily.tokenization import jieba_words

    with_rjieba = bf.load_tokenizer(_roformer_directory(tmp_path))
    monkeypatch.setattr(
        jieba_words,
        "jieba_segmenter",
        lambda: ("jieba", lambda text: jieba.tokenize(text, HMM=False)),
    )
    with_jieba = bf.load_tokenizer(tmp_path)
    for text in ROFORMER_TEXTS:
        assert with_jieba.tokenize(text) == with_rjieba.tokenize(text)


@pytest.mark.parity
@pytest.mark.parametrize("pair", [False, True])
def test_roformer_tokenizer_matches_transformers(pair, tmp_path):
    """Our RoFormer tokenizer (from vocab.txt, and from the directory transformers saves)
    encodes Chinese, English and mixed text as transformers' RoFormerTokenizer (rjieba), and
    transformers loads our saved directory with the same ids."""
    pytest.importorskip("rjieba")
    import transformers

    from hf_compat import TRANSFORMERS_MAJOR

    vocab = _roformer_directory(tmp_path / "vocab") / "vocab.txt"
    if TRANSFORMERS_MAJOR >= 5:
        ref = transformers.RoFormerTokenizer(vocab={t: i for i, t in enumerate(ROFORMER_VOCAB)})
    else:
        ref = transformers.RoFormerTokenizerFast(vocab_file=str(vocab))
    texts = ROFORMER_TEXTS
    args = (texts, texts[::-1]) if pair else (texts,)
    want = ref(*args)["input_ids"]
    assert want[0][1:3] == [ref.convert_tokens_to_ids("我们"), ref.convert_tokens_to_ids("是")]
    ref.save_pretrained(tmp_path / "hf")  # (4.x's tokenizer loses its jieba step after this)
    ours = [bf.load_tokenizer(tmp_path / "vocab"), bf.load_tokenizer(tmp_path / "hf")]
    ours[0].save_pretrained(tmp_path / "ours")
    back = transformers.AutoTokenizer.from_pretrained(tmp_path / "ours")
    for tok in ours:
        got = tok(*args, padding=True)
        assert [row[: int(n)] for row, n in zip(got["input_ids"].tolist(),
                got["attention_mask"].sum(1))] == want  # fmt: skip
    assert back(*args)["input_ids"] == want


def test_presets_are_registered():
    for names in NEW.values():
        assert set(names) <= set(PRESETS)


@pytest.mark.parity
@pytest.mark.parametrize(
    "text, pair",
    [("hello <mask> worlds, the", None), ("hello<mask>worlds", None), ("hello", "world")],
)
def test_mpnet_tokenizer_directory_matches_transformers(text, pair, tmp_path):
    """MPNetTokenizer's directory (WordPiece with <s> </s> <mask>; the mask absorbs the space
    before it; pairs as <s> A </s></s> B </s>) encodes as transformers does."""
    import transformers

    from hf_compat import TRANSFORMERS_MAJOR

    if TRANSFORMERS_MAJOR < 5:
        pytest.skip("the reference is built from vocab= (transformers 5)")
    vocab = [
        "<s>",
        "<pad>",
        "</s>",
        "<unk>",
        "[UNK]",
        "hello",
        "world",
        "the",
        "##s",
        ",",
        "<mask>",
    ]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    hf = transformers.MPNetTokenizer(vocab=str(tmp_path / "vocab.txt"))
    hf.save_pretrained(tmp_path / "saved")
    ours = bf.load_tokenizer(tmp_path / "saved")
    args = (text,) if pair is None else (text, pair)
    assert ours(*args)["input_ids"][0].tolist() == hf(*args)["input_ids"]


@pytest.mark.parity
@pytest.mark.parametrize("strategy", ["per_sequence", "padded", "bucketed"])
def test_modernbert_unpadded_long_batches_match_transformers(strategy, tmp_path, monkeypatch):
    """ModernBERT on sequences far longer than its local window (4: two positions each side;
    T = 40), right-padded so that the encoder takes its unpadded fast path (both packed
    attention strategies), against transformers and against our own padded path."""
    import transformers

    from bertfamily.modules.attention import SelfAttention
    from helpers import ATOL, padded_batch, save_hf_tiny

    if not hasattr(transformers, "ModernBertModel"):  # 4.48 and later have it
        pytest.skip(f"transformers {transformers.__version__} has no ModernBertModel")
    monkeypatch.setattr(SelfAttention, "packed_strategy", strategy)
    ref = save_hf_tiny("modernbert", "ModernBertForMaskedLM", tmp_path)
    ours = bf.from_pretrained(tmp_path)
    layers = ours.encoder.layers
    assert [layer.attention.window for layer in layers] == [0, 2, 0, 2]
    assert [layer.attention.rotary for layer in layers] == ["global", "local"] * 2
    ids, mask = padded_batch((40, 23, 9), pad_id=0)
    plan = ours.encoder._unpad_plan(mask, ours.encoder.attention_context(
        torch.zeros(3, 40, 32), mask))  # fmt: skip
    assert plan is not None  # the packed path is the one under test
    real = mask.bool()
    with torch.no_grad():
        a = ours(ids, mask)
        b = ref(input_ids=ids, attention_mask=mask)
        ours.encoder.unpad = False
        c = ours(ids, mask)
    torch.testing.assert_close(a.logits[real], b.logits[real], atol=ATOL, rtol=0)
    torch.testing.assert_close(c.logits[real], b.logits[real], atol=ATOL, rtol=0)
    # a row alone (no padding at all: the unmasked path) equals its row in the batch
    with torch.no_grad():
        alone = ours(ids[1:2, :23]).logits[0]
    torch.testing.assert_close(alone, a.logits[1, :23], atol=ATOL, rtol=0)


def test_modernbert_components():
    """Pre-LN layers without the first attention norm, a final norm, GeGLU, bias-free."""
    from bertfamily.modules.ffn import GatedFeedForward

    model = build_model(EncoderConfig.from_preset("tiny-modernbert"), heads=["classify"])
    first, second = model.encoder.layers[:2]
    assert isinstance(first.attention_norm, torch.nn.Identity) and first.pre_norm
    assert isinstance(second.attention_norm, torch.nn.LayerNorm)
    assert second.attention_norm.bias is None and model.encoder.final_norm is not None
    assert isinstance(first.ffn, GatedFeedForward) and first.ffn.up.weight.shape == (74, 32)
    assert first.attention.qkv.bias is None and first.ffn.up.bias is None
    assert model.task_head.transform.dense.bias is None
    assert set(model.encoder.attention_inputs.bases) == {"global", "local"}


@pytest.mark.parity
@pytest.mark.parametrize(
    "family, cls_name",
    [("gte", "GteForMaskedLM"), ("nomic_bert", "NomicBertForSequenceClassification")],
)
def test_rotary_glu_unpadded_batches_match_transformers(family, cls_name, hf_checkpoint):
    """GTE and NomicBERT on a right-padded batch take the unpadded fast path (packed rows,
    rotary positions restarting at every row): equal to transformers, to our own padded path,
    and a row alone equals its row in the batch."""
    from helpers import ATOL, padded_batch

    path, ref = hf_checkpoint(family, cls_name, id2label={0: "a", 1: "b", 2: "c"})
    ours = bf.from_pretrained(path)
    ids, mask = padded_batch((30, 17, 4), pad_id=ours.config.pad_token_id)
    ctx = ours.encoder.attention_context(torch.zeros(3, 30, 32), mask)
    assert ours.encoder._unpad_plan(mask, ctx) is not None  # the path under test
    real = mask.bool()
    with torch.no_grad():
        a = ours(ids, mask)
        b = ref(input_ids=ids, attention_mask=mask)
        ours.encoder.unpad = False
        c = ours(ids, mask)
        alone = ours(ids[1:2, :17])
    if family == "gte":  # (B, T, V) masked-LM logits at real tokens
        torch.testing.assert_close(a.logits[real], b.logits[real], atol=ATOL, rtol=0)
        torch.testing.assert_close(c.logits[real], a.logits[real], atol=ATOL, rtol=0)
        torch.testing.assert_close(alone.logits[0], a.logits[1, :17], atol=ATOL, rtol=0)
    else:  # (B, C) classification through the pooler
        torch.testing.assert_close(a.logits, b.logits, atol=ATOL, rtol=0)
        torch.testing.assert_close(c.logits, a.logits, atol=ATOL, rtol=0)
        torch.testing.assert_close(alone.logits[0], a.logits[1], atol=ATOL, rtol=0)


def test_gte_and_nomic_components():
    """GTE: GeGLU with a bias-free H→2I and a biased I→H; NomicBERT: bias-free attention and
    SwiGLU; both: post-LN, one rotary table over the whole head, no pooler without a head and
    BERT's pooler under the classification head."""
    from bertfamily.modules.ffn import GatedFeedForward

    gte = build_model(EncoderConfig.from_preset("tiny-gte"))
    ffn = gte.encoder.layers[0].ffn
    assert isinstance(ffn, GatedFeedForward) and ffn.up.weight.shape == (74, 32)
    assert ffn.up.bias is None and ffn.down.bias is not None
    assert gte.encoder.layers[0].attention.qkv.bias is not None
    assert gte.encoder.pooler is None and gte.encoder.final_norm is None
    assert gte.encoder.embeddings.segment is None  # gte-base-en-v1.5: no segments
    nomic = build_model(EncoderConfig.from_preset("tiny-nomic-bert"), heads=["classify"])
    layer = nomic.encoder.layers[0]
    assert layer.attention.qkv.bias is None and layer.attention.out.bias is None
    assert layer.ffn.up.bias is None and layer.ffn.down.bias is None
    assert nomic.encoder.pooler is not None and not layer.pre_norm
    assert set(nomic.encoder.attention_inputs.bases) == {"global"}
    assert (
        nomic.encoder.attention_inputs.dim == 8 and not nomic.encoder.attention_inputs.interleaved
    )


@pytest.mark.parity
@pytest.mark.parametrize(
    "family, cls_name",
    [("gte", "GteModel"), ("nomic_bert", "NomicBertModel"), ("modernbert", "ModernBertModel")],
)
def test_rotary_attention_probabilities_match_transformers(family, cls_name, hf_checkpoint):
    """output_attentions (the need_weights path, with rotary positions and, for ModernBERT, the
    local band): (B, N, T, S) probabilities equal transformers' eager attention at real query
    rows, masked keys exactly zero for them, and the hidden states equal those of the fast
    path."""
    import transformers

    from helpers import ATOL, padded_batch

    path, _ = hf_checkpoint(family, cls_name)
    ref = getattr(transformers, cls_name).from_pretrained(path, attn_implementation="eager")
    ours = bf.from_pretrained(path)
    ids, mask = padded_batch((9, 6, 2), pad_id=ours.config.pad_token_id)
    real = mask.bool()
    with torch.no_grad():
        a = ours(ids, mask, output_attentions=True)
        b = ref.eval()(input_ids=ids, attention_mask=mask, output_attentions=True)
        fast = ours(ids, mask).last_hidden_state
    assert len(a.attentions) == len(b.attentions) == ours.config.num_hidden_layers
    for ours_p, ref_p in zip(a.attentions, b.attentions):
        torch.testing.assert_close(
            ours_p.transpose(1, 2)[real], ref_p.transpose(1, 2)[real], atol=ATOL, rtol=0
        )
        for row in range(3):  # real queries put nothing on masked keys
            assert (ours_p[row][:, real[row]][..., ~real[row]] == 0).all()
    torch.testing.assert_close(a.last_hidden_state[real], fast[real], atol=ATOL, rtol=0)
