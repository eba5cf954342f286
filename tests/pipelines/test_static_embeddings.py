"""Static embeddings (`pipelines.embedding.static`, `recipes.static`): `SentenceEmbedder` on
directories that sentence-transformers (``StaticEmbedding``) and model2vec
(``StaticModel.save_pretrained``) save from a tiny random table, against their own ``encode``
(1e-5); our distillation of a tiny random BERT against ``model2vec.distill`` on the same
model (same vocabulary, PCA, weights); the command line; the errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from bertfamily.errors import InputError, SentenceModulesError, TokenizerNotFoundError
from bertfamily.pipelines.embedding.embed import SentenceEmbedder
from bertfamily.recipes.static import distill_static, sif_weights
from helpers import save_wordpiece_bert

st = pytest.importorskip("sentence_transformers")
stm = pytest.importorskip("sentence_transformers.sentence_transformer.modules")
model2vec = pytest.importorskip("model2vec")

TEXTS = ["the cat sat.", "A cat!", "", "sat sat sat the the", "zq xy", "b"]
UNKNOWN = ["the ☃ cat", "☃"]  # [UNK]: model2vec drops it, sentence-transformers keeps it


def _vocab() -> list[str]:
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    specials = ["[PAD]", "[unused0]", "[unused1]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    return specials + letters + ["##" + c for c in letters] + ["the", "cat", "sat", ".", "!"]


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory) -> Path:
    """A tiny random BERT (H=32, L=2, V=64, two [unusedN] tokens), uncased WordPiece."""
    return save_wordpiece_bert(tmp_path_factory.mktemp("tiny-bert"), _vocab(), dropout=0.1)


def _backend(tiny_bert: Path):
    import tokenizers

    return tokenizers.Tokenizer.from_file(str(tiny_bert / "tokenizer.json"))


def _st_static(tiny_bert: Path, out: Path, normalize: bool) -> Path:
    """A StaticEmbedding directory saved by sentence-transformers (random rows)."""
    torch.manual_seed(2)
    modules = [stm.StaticEmbedding(_backend(tiny_bert), embedding_dim=12)]
    if normalize:
        modules.append(stm.Normalize())
    st.SentenceTransformer(modules=modules, device="cpu").save(str(out))
    return out


def _m2v_static(tiny_bert: Path, out: Path, quantized: bool = False, **kwargs) -> Path:
    """A model2vec directory saved by model2vec; ``quantized``: a vocabulary-quantised one
    (10 shared rows, a token mapping and per-token weights)."""
    rng = np.random.default_rng(3)
    n = len(_vocab())
    extra = {}
    rows = n
    if quantized:
        rows = 10
        extra = dict(
            token_mapping=rng.integers(0, rows, n), weights=rng.uniform(0.5, 2, n).astype("f4")
        )
    vectors = rng.standard_normal((rows, 12)).astype(np.float32)
    model = model2vec.StaticModel(vectors, _backend(tiny_bert), **extra, **kwargs)
    model.save_pretrained(out)
    return out


def _ours(directory: Path, texts: list[str]) -> np.ndarray:
    return SentenceEmbedder(directory).encode(texts, batch_size=4)


@pytest.mark.parametrize("normalize", [True, False])
def test_sentence_transformers_static_directory(tiny_bert, tmp_path, normalize):
    d = _st_static(tiny_bert, tmp_path / "st", normalize)
    texts = TEXTS + UNKNOWN
    ref = st.SentenceTransformer(str(d), device="cpu").encode(texts, convert_to_numpy=True)
    ours = _ours(d, texts)
    assert ours.shape == (len(texts), 12)
    np.testing.assert_allclose(ours, ref, atol=1e-5, rtol=0)
    norms = np.linalg.norm(ours[[0, 1, 3]], axis=1)
    assert np.allclose(norms, 1, atol=1e-6) == normalize
    assert not ours[2].any()  # an empty text: no tokens, the zero vector


@pytest.mark.parametrize(
    "quantized,kwargs",
    [(False, {"normalize": False}), (False, {"normalize": True}), (True, {"normalize": True})],
)
def test_model2vec_directory(tiny_bert, tmp_path, quantized, kwargs):
    d = _m2v_static(tiny_bert, tmp_path / "m2v", quantized, **kwargs)
    texts = TEXTS + UNKNOWN
    ref = model2vec.StaticModel.from_pretrained(d).encode(texts)
    ours = _ours(d, texts)
    np.testing.assert_allclose(ours, ref, atol=1e-5, rtol=0)
    # sentence-transformers keeps [UNK]; on texts without one it agrees as well
    st_ref = st.SentenceTransformer(str(d), device="cpu").encode(TEXTS, convert_to_numpy=True)
    np.testing.assert_allclose(ours[: len(TEXTS)], st_ref, atol=1e-5, rtol=0)
    assert np.abs(ours[len(TEXTS)] - st.SentenceTransformer(str(d)).encode(UNKNOWN[0])).max() > 1e-3


def test_model2vec_max_length_cuts_as_model2vec(tiny_bert, tmp_path):
    d = _m2v_static(tiny_bert, tmp_path / "m2v", max_length=3)
    texts = ["the cat sat the cat", "abcdefghij klm", "a b c d", "the cat"]
    ref = model2vec.StaticModel.from_pretrained(d).encode(texts)
    embedder = SentenceEmbedder(d)
    np.testing.assert_allclose(embedder.encode(texts), ref, atol=1e-5, rtol=0)
    assert embedder.last_truncated_rows == [0, 1, 2]


@pytest.mark.parametrize("dims,sif", [(8, 1e-4), (None, None)])
def test_distillation_equals_model2vec(tiny_bert, tmp_path, dims, sif):
    from model2vec.distill import distill

    ref = distill(str(tiny_bert), pca_dims=dims, sif_coefficient=sif, quantize_to="float32")
    summary = distill_static(tiny_bert, tmp_path / "ours", dims=dims, sif_coefficient=sif)
    assert summary["tokens"] == 59 and summary["dimensions"] == (dims or 32)
    ours = model2vec.StaticModel.from_pretrained(tmp_path / "ours")
    # the same vocabulary: [unusedN], [CLS], [SEP], [MASK] left out, renumbered in order
    assert ours.tokens == ref.tokens
    assert "[unused0]" not in ours.tokens and ours.tokens[:3] == ("[PAD]", "[UNK]", "a")
    np.testing.assert_allclose(ours.embedding, ref.embedding, atol=1e-6, rtol=0)
    assert np.abs(ref.embedding).max() > 1e-3
    # our directory, run by model2vec, sentence-transformers and us, and model2vec's by us
    texts = TEXTS + UNKNOWN
    want = ref.encode(texts)
    np.testing.assert_allclose(ours.encode(texts), want, atol=1e-5, rtol=0)
    np.testing.assert_allclose(_ours(tmp_path / "ours", texts), want, atol=1e-5, rtol=0)
    by_st = st.SentenceTransformer(str(tmp_path / "ours"), device="cpu").encode(TEXTS)
    np.testing.assert_allclose(by_st, want[: len(TEXTS)], atol=1e-5, rtol=0)
    ref.save_pretrained(tmp_path / "ref")
    np.testing.assert_allclose(_ours(tmp_path / "ref", texts), want, atol=1e-5, rtol=0)


def test_forward_pass_is_the_model_pooling_of_each_token(tiny_bert, tmp_path):
    """Without PCA and weights a row is the model's mean-pooled [CLS] t [SEP]."""
    distill_static(tiny_bert, tmp_path / "raw", dims=None, sif_coefficient=None, normalize=False)
    table = model2vec.StaticModel.from_pretrained(tmp_path / "raw").embedding
    embedder = SentenceEmbedder(tiny_bert)
    cat = embedder.tokenizer.backend.token_to_id("cat")
    want = embedder.encode_tokenized(
        embedder.tokenize(["cat"]), normalize=False
    )  # [CLS] cat [SEP], mean-pooled
    np.testing.assert_allclose(table[cat - 5], want[0], atol=1e-6, rtol=0)  # 5 tokens dropped
    w = sif_weights(3, 0.5)
    np.testing.assert_allclose(w * (1 / np.arange(2, 5) / (1 / np.arange(2, 5)).sum() + 0.5), 0.5)


def test_command_line(tiny_bert, tmp_path, cli):
    res = cli("distill", "static", tiny_bert, tmp_path / "s", "--dims", "4")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["dimensions"] == 4 and out["tokens"] == 59
    assert _ours(tmp_path / "s", ["the cat"]).shape == (1, 4)
    res = cli("distill", "static", tiny_bert, tmp_path / "t", "--dims", "64")
    assert res.exit_code == 2 and "more than the model's 32" in res.output


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"dims": 0}, "positive integer"),
        ({"dims": 40}, "more than the model's 32"),
        ({"sif_coefficient": 1.5}, "sif_coefficient"),
        ({"dims": 8, "remove_pattern": "["}, "not a regular expression"),
        ({"dims": 8, "remove_pattern": ".*"}, "no token is left"),
        ({"dims": 4, "remove_pattern": r"[a-z#]|\[unused"}, "fewer than the 4 tokens"),
    ],
)
def test_distillation_errors(tiny_bert, tmp_path, kwargs, message):
    with pytest.raises(InputError, match=message):
        distill_static(tiny_bert, tmp_path / "x", **kwargs)
    assert not (tmp_path / "x").exists()


def test_directory_errors(tiny_bert, tmp_path):
    d = _st_static(tiny_bert, tmp_path / "st", normalize=False)
    with pytest.raises(InputError, match="static embedding model"):
        SentenceEmbedder(d, quantize="int8")
    with pytest.raises(InputError, match="already a static"):
        distill_static(d, tmp_path / "again")
    bad = tmp_path / "bad"
    shutil.copytree(d, bad)
    (bad / "tokenizer.json").unlink()
    with pytest.raises(TokenizerNotFoundError, match="tokenizer.json"):
        SentenceEmbedder(bad)
    from safetensors.torch import save_file

    for state, message in [
        ({"weight": torch.zeros(64, 12)}, "stores"),
        ({"embedding.weight": torch.zeros(60, 12)}, "60 embedding rows for a vocabulary of 64"),
    ]:
        shutil.copy(d / "tokenizer.json", bad / "tokenizer.json")
        save_file(state, str(bad / "model.safetensors"))
        with pytest.raises(SentenceModulesError, match=message):
            SentenceEmbedder(bad)
    m2v = _m2v_static(tiny_bert, tmp_path / "m2v")
    cfg = json.loads((m2v / "config.json").read_text())
    (m2v / "config.json").write_text(json.dumps(cfg | {"normalize": "yes"}))
    with pytest.raises(SentenceModulesError, match="normalize must be true or false"):
        SentenceEmbedder(m2v)


def test_served_and_not_trained(tiny_bert, tmp_path):
    from fastapi.testclient import TestClient

    from bertfamily.serve.app import create_app, load_served_model
    from bertfamily.serve.settings import ServeSettings

    d = _m2v_static(tiny_bert, tmp_path / "m2v", normalize=True)
    with TestClient(create_app(load_served_model(d), ServeSettings())) as client:
        res = client.post("/embed", json={"inputs": TEXTS[:2]})
    assert res.status_code == 200
    want = model2vec.StaticModel.from_pretrained(d).encode(TEXTS[:2])
    np.testing.assert_allclose(np.array(res.json()), want, atol=1e-5, rtol=0)
    with pytest.raises(InputError, match="training a static"):
        SentenceEmbedder.for_training(d)


def test_byte_level_bpe_distillation_equals_model2vec(hf_checkpoint, tmp_path):
    """A RoBERTa with a byte-level BPE: the same vocabulary (<s>, </s>, <mask> out), table and
    tokenizer behaviour (model2vec adds a prefix space) as model2vec's distill."""
    import tokenizers
    import transformers
    from model2vec.distill import distill

    src, _ = hf_checkpoint("roberta", "RobertaModel")
    d = tmp_path / "roberta"
    shutil.copytree(src, d)
    size = json.loads((d / "config.json").read_text())["vocab_size"]
    backend = tokenizers.Tokenizer(tokenizers.models.BPE())
    backend.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = tokenizers.decoders.ByteLevel()
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    alphabet = tokenizers.pre_tokenizers.ByteLevel.alphabet()[:60]
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=size, special_tokens=specials, initial_alphabet=alphabet
    )
    backend.train_from_iterator(["hello world the cat sat on the mat"] * 50, trainer)
    backend.post_processor = tokenizers.processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    roles = dict(bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>",
                 mask_token="<mask>", cls_token="<s>", sep_token="</s>")  # fmt: skip
    transformers.PreTrainedTokenizerFast(tokenizer_object=backend, **roles).save_pretrained(d)
    ref = distill(str(d), pca_dims=8, quantize_to="float32")
    distill_static(d, tmp_path / "ours", dims=8)
    ours = model2vec.StaticModel.from_pretrained(tmp_path / "ours")
    assert ours.tokens == ref.tokens and "<mask>" not in ours.tokens
    np.testing.assert_allclose(ours.embedding, ref.embedding, atol=1e-6, rtol=0)
    texts = ["hello world", "the cat sat", " on the mat"]
    np.testing.assert_allclose(_ours(tmp_path / "ours", texts), ref.encode(texts), atol=1e-5)


@pytest.mark.parametrize("layout", ["sentence-transformers", "model2vec"])
def test_texts_without_tokens_are_the_zero_vector_as_their_libraries(tiny_bert, tmp_path, layout):
    """A text with no token to average (empty; for model2vec's rule, only [UNK]) is the zero
    vector, normalised or not, equal to its library's and never NaN, even when every text of
    a batch is such a text (a (B, 0) batch)."""
    if layout == "model2vec":
        d = _m2v_static(tiny_bert, tmp_path / "m2v", normalize=True)
        texts, ref = ["☃", "", "☃ ☃"], model2vec.StaticModel.from_pretrained(d).encode
    else:
        d = _st_static(tiny_bert, tmp_path / "st", normalize=True)
        texts = ["", ""]
        ref = st.SentenceTransformer(str(d), device="cpu").encode
    embedder = SentenceEmbedder(d)
    for batch in (texts, [*texts, "the cat"]):  # alone in their batch, and beside a text
        ours = embedder.encode(batch, batch_size=8)
        assert np.isfinite(ours).all()
        np.testing.assert_array_equal(ours[: len(texts)], np.zeros((len(texts), 12), "f4"))
        np.testing.assert_allclose(ours, ref(batch), atol=1e-5, rtol=0)
    assert np.linalg.norm(ours[-1]) == pytest.approx(1, abs=1e-6)  # "the cat": normalised
