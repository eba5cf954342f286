"""Whole sentence-transformers directories: bertfamily's `SentenceEmbedder` against
sentence-transformers itself (1e-5, fp32) on the real MiniLM and on small directories that
sentence-transformers saves from a tiny random BERT (every Pooling mode, include_prompt,
Dense, Normalize, max_seq_length, do_lower_case, prompts), and the errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from bertfamily.cli import app
from bertfamily.pipelines.embedding.embed import PoolingSpec, SentenceEmbedder, pool
from bertfamily.pipelines.embedding.sentence_modules import POOLING_MODES, SentenceModulesError

st = pytest.importorskip("sentence_transformers")
stm = pytest.importorskip("sentence_transformers.sentence_transformer.modules")

H = 32
TEXTS = [
    "the cat sat.",
    "The Cat sat!",
    "a",
    "",
    "query: the cat",
    "The quick brown fox jumps over the lazy dog, again and again and again.",
    "ZEBRA Yak",
]
PROMPTS = {"query": "query: ", "passage": "passage: "}


def _vocab() -> list[str]:
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    return (
        ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        + letters
        + [c.upper() for c in letters]
        + ["##" + c for c in letters]
        + [".", ",", ":", "!", "the", "The", "query", "passage", "cat", "Cat", "sat"]
    )


@pytest.fixture(scope="module")
def tiny_hf(tmp_path_factory) -> Path:
    """A tiny random BERT (H=32, L=2, V=94) with a cased WordPiece tokenizer."""
    import tokenizers
    import transformers

    d = tmp_path_factory.mktemp("tiny-hf")
    vocab = _vocab()
    backend = tokenizers.Tokenizer(
        tokenizers.models.WordPiece({t: i for i, t in enumerate(vocab)}, unk_token="[UNK]")
    )
    backend.normalizer = tokenizers.normalizers.BertNormalizer(lowercase=False)
    backend.pre_tokenizer = tokenizers.pre_tokenizers.BertPreTokenizer()
    backend.post_processor = tokenizers.processors.BertProcessing(("[SEP]", 3), ("[CLS]", 2))
    backend.decoder = tokenizers.decoders.WordPiece()
    specials = dict(pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]")
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=backend, mask_token="[MASK]",
                                               **specials)  # fmt: skip
    tok.save_pretrained(d)
    assert tok(["The Cat sat!"])["input_ids"] == [[2, 88, 92, 93, 86, 3]]  # cased: no [UNK]
    cfg = transformers.BertConfig(
        vocab_size=len(vocab),
        hidden_size=H,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=37,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    transformers.BertModel(cfg).eval().save_pretrained(d)
    return d


def _save(tiny_hf, out: Path, mode="mean", include_prompt=True, dense=(), normalize=True,
          safe=True, default_prompt_name=None) -> Path:  # fmt: skip
    """A sentence-transformers directory saved by sentence-transformers itself; ``dense`` is a
    list of (out_features, activation module, bias)."""
    torch.manual_seed(1)
    modules = [stm.Transformer(str(tiny_hf)), stm.Pooling(H, pooling_mode=mode,
               include_prompt=include_prompt)]  # fmt: skip
    width = H * (1 if isinstance(mode, str) else len(mode))
    for n_out, act, bias in dense:
        modules.append(stm.Dense(width, n_out, bias=bias, activation_function=act))
        width = n_out
    if normalize:
        modules.append(stm.Normalize())
    model = st.SentenceTransformer(
        modules=modules, prompts=PROMPTS, default_prompt_name=default_prompt_name, device="cpu"
    )
    model.save(str(out), safe_serialization=safe)
    return out


def _assert_same(directory: Path, **encode) -> np.ndarray:
    ref = st.SentenceTransformer(str(directory), device="cpu").encode(
        TEXTS, batch_size=3, convert_to_numpy=True, **encode
    )
    ours = SentenceEmbedder(directory, dtype="fp32").encode(TEXTS, batch_size=2, **encode)
    assert ours.shape == ref.shape
    np.testing.assert_allclose(ours, ref, atol=1e-5, rtol=0)
    return ours


CASES = [(m, True) for m in POOLING_MODES] + [
    (m, False) for m in ("cls", "mean", "weightedmean", "lasttoken", "max")
]


@pytest.mark.parametrize("mode,include_prompt", CASES)
def test_every_pooling_mode_equals_sentence_transformers(tiny_hf, tmp_path, mode, include_prompt):
    d = _save(tiny_hf, tmp_path / "m", mode=mode, include_prompt=include_prompt, normalize=False)
    ours = _assert_same(d, prompt_name="query")
    assert ours.shape == (len(TEXTS), H)
    if not include_prompt and mode != "lasttoken":  # the prompt tokens really are left out
        pooled_too = SentenceEmbedder(
            d, pooling=PoolingSpec(mode=mode, include_prompt=True), dtype="fp32"
        )
        with_prompt = pooled_too.encode(TEXTS, prompt_name="query")
        assert np.abs(with_prompt - ours).max() > 1e-3


def test_concatenated_modes_and_explicit_prompt(tiny_hf, tmp_path):
    d = _save(tiny_hf, tmp_path / "m", mode=("cls", "mean", "max"), include_prompt=False)
    ours = _assert_same(d, prompt="passage: ")
    assert ours.shape == (len(TEXTS), 3 * H)
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-6)


def test_dense_layers_and_normalize(tiny_hf, tmp_path):
    dense = [(16, torch.nn.Tanh(), True), (8, torch.nn.Identity(), False)]
    d = _save(tiny_hf, tmp_path / "m", dense=dense, normalize=True)
    assert json.loads((d / "2_Dense" / "config.json").read_text())["activation_function"] == (
        "torch.nn.modules.activation.Tanh"
    )
    ours = _assert_same(d)
    assert ours.shape == (len(TEXTS), 8)
    assert SentenceEmbedder(d).dimension == 8
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-6)


def test_dense_weights_from_pytorch_model_bin(tiny_hf, tmp_path):
    d = _save(tiny_hf, tmp_path / "m", dense=[(12, torch.nn.Tanh(), True)], safe=False)
    assert (d / "2_Dense" / "pytorch_model.bin").is_file()
    assert not (d / "2_Dense" / "model.safetensors").exists()
    assert _assert_same(d).shape == (len(TEXTS), 12)


def test_default_prompt_name(tiny_hf, tmp_path):
    d = _save(tiny_hf, tmp_path / "m", include_prompt=False, default_prompt_name="query")
    ours = _assert_same(d)  # the default prompt applies
    no_prompt = SentenceEmbedder(d).encode(TEXTS, prompt="")
    assert np.abs(ours - no_prompt).max() > 1e-3
    with pytest.raises(ValueError, match="unknown prompt_name 'nope'.*passage.*query"):
        SentenceEmbedder(d).encode(TEXTS, prompt_name="nope")
    with pytest.raises(ValueError, match="not both"):
        SentenceEmbedder(d).encode(TEXTS, prompt="x", prompt_name="query")


def test_max_seq_length_and_do_lower_case(tiny_hf, tmp_path):
    d = _save(tiny_hf, tmp_path / "m")
    # the keys older sentence-transformers versions wrote (the real MiniLM has them)
    settings = json.loads((d / "sentence_bert_config.json").read_text())
    (d / "sentence_bert_config.json").write_text(
        json.dumps({**settings, "max_seq_length": 8, "do_lower_case": True})
    )
    ref_model = st.SentenceTransformer(str(d), device="cpu")
    assert ref_model.max_seq_length == 8
    ours = _assert_same(d)
    emb = SentenceEmbedder(d, dtype="fp32")  # auto is bf16 on an AMX CPU
    assert emb.max_length == 8
    emb.encode(TEXTS)
    assert emb.last_truncated == 2  # the long sentence; ZEBRA Yak is z ##e ##b ##r ##a y ##a ##k
    # lowercasing matters for this cased vocabulary: "The Cat sat!" becomes "the cat sat!"
    np.testing.assert_allclose(ours[1], emb.encode(["the cat sat!"])[0], atol=1e-6)
    (d / "sentence_bert_config.json").write_text(json.dumps({**settings, "max_seq_length": 8}))
    cased = SentenceEmbedder(d, dtype="fp32").encode(["The Cat sat!"])[0]
    assert np.abs(cased - ours[1]).max() > 1e-3


def test_max_seq_length_decides_over_the_tokenizer_limit(tiny_hf, tmp_path):
    """Issue 32 item 6: sentence-transformers' max_seq_length decides the truncation even when
    the tokenizer's model_max_length is smaller (as in sentence-transformers itself)."""
    d = _save(tiny_hf, tmp_path / "m")
    settings = json.loads((d / "sentence_bert_config.json").read_text())
    (d / "sentence_bert_config.json").write_text(json.dumps({**settings, "max_seq_length": 12}))
    tok_cfg = json.loads((d / "tokenizer_config.json").read_text())
    (d / "tokenizer_config.json").write_text(json.dumps({**tok_cfg, "model_max_length": 6}))
    assert st.SentenceTransformer(str(d), device="cpu").max_seq_length == 12
    emb = SentenceEmbedder(d, dtype="fp32")
    assert emb.max_length == 12 and emb.tokenizer.model_max_length == 6
    _assert_same(d)  # the long sentence is cut at 12 tokens by both, not at 6
    emb.encode(TEXTS)
    assert emb.last_truncated == 1


def _minilm_with_dense(minilm_dir: Path, out: Path) -> tuple[Path, torch.Tensor, torch.Tensor]:
    """The real MiniLM directory with a 2_Dense (384 → 16, tanh, bias) between Pooling and
    Normalize (the big weight file is linked, not copied)."""
    from safetensors.torch import save_file

    out.mkdir()
    for f in minilm_dir.iterdir():
        if f.name.startswith("."):
            continue
        if f.is_dir():
            shutil.copytree(f, out / f.name)
        elif f.name == "model.safetensors":
            (out / f.name).symlink_to(f)
        else:
            shutil.copy(f, out / f.name)
    g = torch.Generator().manual_seed(3)
    w, b = torch.randn(16, 384, generator=g) * 0.2, torch.randn(16, generator=g) * 0.1
    (out / "2_Dense").mkdir()
    (out / "2_Dense" / "config.json").write_text(
        json.dumps(
            {
                "in_features": 384,
                "out_features": 16,
                "bias": True,
                "activation_function": "torch.nn.modules.activation.Tanh",
            }
        )  # fmt: skip
    )
    save_file({"linear.weight": w, "linear.bias": b}, out / "2_Dense" / "model.safetensors")
    modules = json.loads((out / "modules.json").read_text())
    normalize = modules.pop()
    assert normalize["type"].endswith("Normalize")
    dense_entry = {"idx": 2, "name": "2", "path": "2_Dense",
                   "type": "sentence_transformers.models.Dense"}  # fmt: skip
    modules += [dense_entry, {**normalize, "idx": 3, "name": "3", "path": "3_Normalize"}]
    (out / "modules.json").write_text(json.dumps(modules))
    return out, w, b


@pytest.fixture(scope="module")
def minilm_dense(minilm_dir, tmp_path_factory):
    return _minilm_with_dense(minilm_dir, tmp_path_factory.mktemp("mini") / "minilm-dense")


@pytest.mark.slow
def test_real_minilm_equals_sentence_transformers(minilm_dir):
    assert _assert_same(minilm_dir).shape == (len(TEXTS), 384)


@pytest.mark.slow
def test_minilm_with_dense_is_n_by_16(minilm_dense):
    """A user's failing case: the Dense layer was skipped and (N, 384) came back."""
    import transformers

    d, w, b = minilm_dense
    ours = _assert_same(d)
    assert ours.shape == (len(TEXTS), 16)
    # by hand: normalize(tanh(W · mean_pool + b)) from transformers' own encoder
    tok = transformers.AutoTokenizer.from_pretrained(d)
    model = transformers.AutoModel.from_pretrained(d).eval()
    batch = tok(TEXTS, padding=True, truncation=True, max_length=256, return_tensors="pt")
    with torch.no_grad():
        h = model(**batch).last_hidden_state
    mean = pool(h, batch["attention_mask"], "mean", normalize=False)
    want = torch.nn.functional.normalize(torch.tanh(mean @ w.T + b), dim=-1).numpy()
    np.testing.assert_allclose(ours, want, atol=1e-5, rtol=0)


@pytest.mark.slow
def test_cli_reports_the_dense_dimension(minilm_dense):
    d = minilm_dense[0]
    runner = CliRunner()
    result = runner.invoke(app, ["embed", "one", "two", "--model", str(d), "--format", "jsonl"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [len(r["embedding"]) for r in rows] == [16, 16]
    result = runner.invoke(app, ["embed", "one", "two", "--model", str(d)])
    assert result.exit_code == 0 and "dim 16" in result.output, result.output


def _edit(directory: Path, rel: str, **changes) -> None:
    file = directory / rel
    file.write_text(json.dumps({**json.loads(file.read_text()), **changes}))


def test_unknown_module_type_is_an_error(tiny_hf, tmp_path):
    d = _save(tiny_hf, tmp_path / "m")
    modules = json.loads((d / "modules.json").read_text())
    for bad in ("sentence_transformers.models.LSTM", "mypackage.Pooling"):
        modules[1]["type"] = bad
        (d / "modules.json").write_text(json.dumps(modules))
        with pytest.raises(SentenceModulesError, match=f"{bad}.*cannot be run"):
            SentenceEmbedder(d)


@pytest.mark.parametrize(
    "rel,change,message",
    [
        ("2_Dense/config.json", {"in_features": 16}, r"expected \{'linear.weight': \(8, 16\)"),
        ("2_Dense/config.json", {"out_features": 9}, "weights do not match config.json"),
        ("2_Dense/config.json", {"bias": False}, "weights do not match"),
        ("2_Dense/config.json", {"activation_function": "os.system"}, "'os.system' is not a"),
        ("2_Dense/config.json", {"use_residual": True}, "use_residual=True is not supported"),
        ("1_Pooling/config.json", {"pooling_mode": "median"}, "unknown pooling mode 'median'"),
        ("1_Pooling/config.json", {"embedding_dimension": 31}, "embedding_dimension is 31"),
    ],
)
def test_bad_module_settings_are_errors(tiny_hf, tmp_path, rel, change, message):
    d = _save(tiny_hf, tmp_path / "m", dense=[(8, torch.nn.Tanh(), True)])
    SentenceEmbedder(d)  # fine as saved
    _edit(d, rel, **change)
    with pytest.raises(SentenceModulesError, match=message):
        SentenceEmbedder(d)


def test_dense_in_features_checked_against_modes(tiny_hf, tmp_path):
    d = _save(tiny_hf, tmp_path / "m", dense=[(8, torch.nn.Tanh(), True)])
    _edit(d, "1_Pooling/config.json", pooling_mode=["cls", "mean"])
    with pytest.raises(SentenceModulesError, match="in_features is 32, but .* vectors of 64"):
        SentenceEmbedder(d)


def test_module_order_is_checked(tiny_hf, tmp_path):
    d = _save(tiny_hf, tmp_path / "m", dense=[(8, torch.nn.Tanh(), True)])
    modules = json.loads((d / "modules.json").read_text())
    modules[2], modules[3] = modules[3], modules[2]  # Normalize before Dense
    (d / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(SentenceModulesError, match="Transformer, Pooling, then Dense"):
        SentenceEmbedder(d)


# --- bi-encoders on the newer trunks (issue 30) ------------------------------------------------
# (family, transformers class, the family's special tokens in id order 0..4, pooling, prompts):
# all-mpnet-base-v2's layout (MPNet, <s> <pad> </s>: MPNet counts positions from pad id 1),
# gte-base-en-v1.5's (GTE, [CLS] pooling) and nomic-embed-text-v1.5's (NomicBERT, mean pooling,
# its task prefixes as prompts).
TRUNKS = {
    "mpnet": ("MPNetModel", ["<s>", "<pad>", "</s>", "<unk>", "<mask>"], "mean", PROMPTS),
    "gte": ("GteModel", ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"], "cls", {}),
    "nomic_bert": (
        "NomicBertModel",
        ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
        "mean",
        {"search_query": "search_query: ", "search_document": "search_document: "},
    ),
}


def _trunk_directory(family: str, out: Path) -> Path:
    """A sentence-transformers directory saved by sentence-transformers itself around a tiny
    random ``family`` trunk (transformers' save_pretrained) with a cased WordPiece tokenizer
    using the family's special tokens."""
    import tokenizers
    import transformers

    from helpers import hf_config

    cls_name, specials, mode, prompts = TRUNKS[family]
    if not hasattr(transformers, cls_name):
        pytest.skip(f"transformers {transformers.__version__} has no {cls_name}")
    vocab = specials + _vocab()[5:]
    pad, unk, cls, sep, mask = (specials[i] for i in (
        (1, 3, 0, 2, 4) if family == "mpnet" else (0, 1, 2, 3, 4)))  # fmt: skip
    backend = tokenizers.Tokenizer(
        tokenizers.models.WordPiece({t: i for i, t in enumerate(vocab)}, unk_token=unk)
    )
    backend.normalizer = tokenizers.normalizers.BertNormalizer(lowercase=False)
    backend.pre_tokenizer = tokenizers.pre_tokenizers.BertPreTokenizer()
    backend.post_processor = tokenizers.processors.BertProcessing(
        (sep, vocab.index(sep)), (cls, vocab.index(cls))
    )
    backend.decoder = tokenizers.decoders.WordPiece()
    trunk = out.parent / f"{out.name}-trunk"
    transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token=pad, unk_token=unk, cls_token=cls, sep_token=sep,
        mask_token=mask,
    ).save_pretrained(trunk)  # fmt: skip
    overrides = dict(vocab_size=len(vocab), pad_token_id=vocab.index(pad))
    if family == "mpnet":
        overrides["pad_token_id"] = 1
    torch.manual_seed(0)
    model = getattr(transformers, cls_name)(hf_config(family, **overrides)).eval()
    with torch.no_grad():  # non-trivial norms and biases
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name.lower() or "_ln" in name:
                p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(trunk)
    modules = [stm.Transformer(str(trunk)), stm.Pooling(H, pooling_mode=mode), stm.Normalize()]
    st.SentenceTransformer(modules=modules, prompts=prompts, device="cpu").save(str(out))
    return out


@pytest.mark.parametrize("family", list(TRUNKS))
def test_newer_trunks_equal_sentence_transformers(family, tmp_path):
    """MPNet, GTE and NomicBERT bi-encoders, with and without their prompts, right-padded in
    batches of two (the unpadded path): equal to sentence-transformers (1e-5)."""
    d = _trunk_directory(family, tmp_path / family)
    assert SentenceEmbedder(d).model.config.model_type == family
    plain = _assert_same(d)
    assert plain.shape == (len(TEXTS), H)
    for name in TRUNKS[family][3]:  # every prompt of the directory
        prompted = _assert_same(d, prompt_name=name)
        assert np.abs(prompted - plain).max() > 1e-3


def test_sentence_transformers_encode_keywords(tiny_hf, tmp_path):
    """encode takes sentence-transformers' keywords and returns its shapes (issue 44)."""
    d = _save(tiny_hf, tmp_path / "m", include_prompt=False, normalize=True)
    ref, ours = st.SentenceTransformer(str(d), device="cpu"), SentenceEmbedder(d, dtype="fp32")
    for kw in (
        dict(truncate_dim=8),  # cut, not renormalised (the Normalize module ran before)
        dict(truncate_dim=8, normalize_embeddings=True),
        dict(normalize_embeddings=True, prompt_name="query"),
        dict(precision="ubinary", truncate_dim=16),
    ):
        want = ref.encode(TEXTS, batch_size=3, **kw)
        got = ours.encode(TEXTS, batch_size=2, show_progress_bar=False, **kw)
        assert got.shape == want.shape and got.dtype == want.dtype, kw
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=0, err_msg=str(kw))
    cut = ours.encode(TEXTS, truncate_dim=8)
    assert np.linalg.norm(cut, axis=1).max() < 0.999  # really not renormalised
    tensor = ours.encode(TEXTS, convert_to_tensor=True)
    assert isinstance(tensor, torch.Tensor) and tensor.shape == (len(TEXTS), H)
    torch.testing.assert_close(tensor, ref.encode(TEXTS, convert_to_tensor=True), atol=1e-5, rtol=0)
    rows = ours.encode(TEXTS, convert_to_numpy=False)
    assert isinstance(rows, list) and len(rows) == len(TEXTS) and rows[0].shape == (H,)
    one = ours.encode("the cat sat.", convert_to_tensor=True)
    assert one.shape == (H,)
    tokens = ours.encode(TEXTS[:3], output_value="token_embeddings", prompt_name="query")
    theirs = ref.encode(TEXTS[:3], output_value="token_embeddings", prompt_name="query")
    assert [t.shape for t in tokens] == [t.shape for t in theirs]
    for a, b in zip(tokens, theirs):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


def test_encode_query_and_document_use_the_prompts(tiny_hf, tmp_path):
    d = _save(tiny_hf, tmp_path / "m", include_prompt=False)
    ref, ours = st.SentenceTransformer(str(d), device="cpu"), SentenceEmbedder(d, dtype="fp32")
    q, p = ours.encode_query(TEXTS), ours.encode_document(TEXTS)
    np.testing.assert_allclose(q, ref.encode_query(TEXTS), atol=1e-5, rtol=0)
    np.testing.assert_allclose(p, ref.encode_document(TEXTS), atol=1e-5, rtol=0)
    np.testing.assert_allclose(q, ours.encode(TEXTS, prompt="query: "), atol=0, rtol=0)
    assert ours.prompts["document"] == ""  # sentence-transformers saves empty query/document
    np.testing.assert_allclose(p, ours.encode(TEXTS, prompt=""), atol=0, rtol=0)
    assert np.abs(q - p).max() > 1e-3
    del ours.prompts["document"], ref.prompts["document"]  # then "passage" is next
    p = ours.encode_document(TEXTS)
    np.testing.assert_allclose(p, ref.encode_document(TEXTS), atol=1e-5, rtol=0)
    np.testing.assert_allclose(p, ours.encode(TEXTS, prompt="passage: "), atol=0, rtol=0)
    # an explicit prompt wins over the query prompt
    np.testing.assert_allclose(ours.encode_query(TEXTS, prompt=""), ours.encode(TEXTS), atol=0)


@pytest.mark.parametrize(
    "kw,message",
    [
        (dict(device="cuda"), "'device'.*chosen when the model is loaded"),
        (dict(normalise=True), "'normalise'.*not a keyword"),
        (dict(normalize=False, normalize_embeddings=True), "contradicts"),
        (dict(dimensions=8, truncate_dim=8), "not both"),
        (dict(output_value=None), "output_value must be"),
        (dict(truncate_dim=H + 1), "more than"),
    ],
)
def test_encode_refuses_unknown_keywords(tiny_hf, tmp_path, kw, message):
    from bertfamily.errors import InputError

    ours = SentenceEmbedder(_save(tiny_hf, tmp_path / "m"), dtype="fp32")
    with pytest.raises(InputError, match=message):
        ours.encode(TEXTS, **kw)


def _classifier(tiny_hf: Path, out: Path, labels: int, **config) -> Path:
    """``tiny_hf``'s trunk as a random BertForSequenceClassification saved by transformers
    (``labels`` labels, ``config`` added to its config.json), with its tokenizer."""
    import transformers

    cfg = transformers.BertConfig.from_pretrained(tiny_hf, num_labels=labels)
    torch.manual_seed(3)
    transformers.BertForSequenceClassification(cfg).eval().save_pretrained(out)
    for file in tiny_hf.glob("*token*"):
        shutil.copy(file, out / file.name)
    if config:
        data = json.loads((out / "config.json").read_text())
        (out / "config.json").write_text(json.dumps(data | config))
    return out


SIGMOID = {"sentence_transformers": {"activation_fn": "torch.nn.modules.activation.Sigmoid"}}


@pytest.mark.parametrize(
    "labels,config,says",
    [
        (None, {}, "has no sentence-transformers modules.json: embedding it assumes mean"),
        (1, {}, "is a cross-encoder (BertForSequenceClassification), not a sentence embedder"),
        (3, SIGMOID, "is a cross-encoder (BertForSequenceClassification), not a sentence"),
        (3, {}, "is a sequence classifier (BertForSequenceClassification, 3 labels), not a"),
    ],
)
def test_directory_without_modules_warns_that_mean_pooling_is_assumed(
    tiny_hf, tmp_path, caplog, labels, config, says
):
    """As sentence-transformers ("No sentence-transformers model found ... mean pooling"): a
    directory without modules.json is embedded with mean pooling, L2-normalised, and a
    warning says so, naming the directory, and naming a cross-encoder or classifier as one."""
    d = tiny_hf if labels is None else _classifier(tiny_hf, tmp_path / "clf", labels, **config)
    with caplog.at_level("WARNING"):
        ours = SentenceEmbedder(d).encode(TEXTS[:3])
    notes = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(notes) == 1 and notes[0].startswith(str(d)) and "\n" not in notes[0]
    assert says in notes[0] and notes[0].endswith("mean pooling of its token states, L2-normalised")
    # the vectors are sentence-transformers' mean pooling of the same directory, normalised
    ref = st.SentenceTransformer(str(d), device="cpu").encode(TEXTS[:3], convert_to_numpy=True)
    ref /= np.linalg.norm(ref, axis=1, keepdims=True)
    np.testing.assert_allclose(ours, ref, atol=1e-5, rtol=0)
    caplog.clear()
    with caplog.at_level("WARNING"):  # a pooling given, or a sentence-transformers directory
        SentenceEmbedder(d, pooling=PoolingSpec("cls"))
        SentenceEmbedder(_save(tiny_hf, tmp_path / "st"))
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


def test_embed_command_says_the_cross_encoder_on_one_stderr_line(tiny_hf, tmp_path):
    import os
    import subprocess
    import sys

    d = _classifier(tiny_hf, tmp_path / "ce", 1)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bertfamily",
            "embed",
            "the cat",
            "--model",
            str(d),
            "--format",
            "jsonl",
        ],
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert len(json.loads(proc.stdout.splitlines()[0])["embedding"]) == H
    warned = [line for line in proc.stderr.splitlines() if line.startswith("WARNING")]
    assert warned == [
        f"WARNING bertfamily.pipelines.embedding.embed: {d} is a cross-encoder "
        "(BertForSequenceClassification), not a sentence embedder: it scores text pairs (load "
        "it with Reranker, `bertfamily rerank`); embedding it assumes mean pooling of its token "
        "states, L2-normalised"
    ]
