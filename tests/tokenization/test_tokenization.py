"""Parity of bertfamily.tokenization with transformers' tokenizers on tiny trained vocabularies."""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

import numpy as np
import pytest
import torch
from tokenizers import AddedToken, decoders, models, normalizers, pre_tokenizers, trainers
from tokenizers import Tokenizer as BackendTokenizer

from bertfamily.tokenization import Tokenizer, TokenizerNotFoundError, load_tokenizer
from hf_compat import hf_bert_tokenizer, hf_roberta_tokenizer

transformers = pytest.importorskip("transformers")

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "A Café in Zürich serves naïve crème brûlée to tourists.",
    "Déjà vu: the résumé of Ångström and Ørsted.",
    "北京是中国的首都。东京是日本的首都。",
    "Привет, мир! Как дела?",
    "Tokenizers split unbelievably long words into pieces.",
    "HELLO World, hello WORLD, Hello world!",
    "Numbers like 3.14159 and 1,000,000 appear too.",
    "Encoders read text; decoders write it.",
    "Jane Austen wrote Pride and Prejudice in 1813.",
] * 3

SENTENCES = [
    "The QUICK brown fox!",
    "Café naïve résumé déjà vu",
    "北京是首都",
    "Привет мир",
    "unbelievably long tokenizers",
    "zzzz qqqq ⊗ 🤗 unseen",
    "Tabs\tand\nnew lines   spaced",
    "",
    "[MASK] sits in the text",
]
PAIRS = [
    "Second segment here.",
    "Ångström",
    "东京",
    "Как дела?",
    "pieces pieces pieces pieces pieces pieces",
    "x",
    "Pride and Prejudice",
    "only the pair",
    "hello",
]
WORDPIECE_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
BPE_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]


def _strip_accents(text: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFD", text) if not unicodedata.combining(c))


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def wordpiece_vocab(tmp_path_factory) -> Path:
    """A cased WordPiece vocab.txt (about 300 entries) trained on CORPUS."""
    backend = BackendTokenizer(models.WordPiece(unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=False, strip_accents=False)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(
        vocab_size=300, special_tokens=WORDPIECE_SPECIALS, show_progress=False
    )
    backend.train_from_iterator(CORPUS, trainer)
    vocab = sorted(backend.get_vocab().items(), key=lambda kv: kv[1])
    assert [i for _, i in vocab] == list(range(len(vocab)))
    path = tmp_path_factory.mktemp("wordpiece") / "vocab.txt"
    path.write_text("".join(tok + "\n" for tok, _ in vocab), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def bpe_files(tmp_path_factory) -> Path:
    """A directory with a byte-level BPE vocab.json + merges.txt trained on CORPUS."""
    backend = BackendTokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        show_progress=False,
        special_tokens=BPE_SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    backend.train_from_iterator(CORPUS, trainer)
    directory = tmp_path_factory.mktemp("bpe")
    backend.model.save(str(directory))
    assert (directory / "vocab.json").is_file() and (directory / "merges.txt").is_file()
    return directory


def _wordpiece_dir(tmp_path: Path, vocab: Path, tokenizer_config=None, config=None) -> Path:
    directory = tmp_path / "wp"
    directory.mkdir()
    (directory / "vocab.txt").write_bytes(vocab.read_bytes())
    if tokenizer_config is not None:
        (directory / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    if config is not None:
        (directory / "config.json").write_text(json.dumps(config))
    return directory


def _hf_bert(vocab: Path, **kwargs):
    return hf_bert_tokenizer(vocab, **kwargs)


def _hf_roberta(directory: Path, **kwargs):
    # RoBERTa's released tokenizer: <mask> absorbs the space before it.
    mask = AddedToken("<mask>", lstrip=True, rstrip=False, special=True)
    return hf_roberta_tokenizer(directory, mask_token=mask, **kwargs)


def _assert_same(ours: dict, theirs, keys) -> None:
    for key in keys:
        expected = torch.as_tensor(np.asarray(theirs[key]), dtype=torch.int64)
        assert ours[key].dtype == torch.int64, key
        torch.testing.assert_close(ours[key], expected, rtol=0, atol=0, msg=key)


# --------------------------------------------------------------------------- WordPiece


@pytest.mark.parametrize("lower", [True, False])
def test_wordpiece_matches_transformers(tmp_path, wordpiece_vocab, lower):
    directory = _wordpiece_dir(tmp_path, wordpiece_vocab, {"do_lower_case": lower})
    ours = load_tokenizer(directory)
    hf = _hf_bert(wordpiece_vocab, do_lower_case=lower)
    assert ours.scheme == "wordpiece" and ours.has_token_type_ids
    keys = [
        "input_ids",
        "attention_mask",
        "token_type_ids",
        "offset_mapping",
        "special_tokens_mask",
    ]

    got = ours(SENTENCES, return_offsets=True, return_special_tokens_mask=True)
    want = hf(SENTENCES, padding=True, return_offsets_mapping=True, return_special_tokens_mask=True)
    _assert_same(got, want, keys)
    # Padding is real: the batch has rows of different lengths.
    assert got["attention_mask"].sum(1).unique().numel() > 2

    got = ours(SENTENCES, PAIRS, return_offsets=True, return_special_tokens_mask=True)
    want = hf(SENTENCES, PAIRS, padding=True, return_offsets_mapping=True,
              return_special_tokens_mask=True)  # fmt: skip
    _assert_same(got, want, keys)
    assert got["token_type_ids"].max() == 1

    for text in SENTENCES:
        assert ours.tokenize(text) == hf.tokenize(text)
        ids = ours.encode(text)
        assert ids == hf.encode(text)
        assert ours.convert_ids_to_tokens(ids) == hf.convert_ids_to_tokens(ids)
        assert ours.decode(ids) == hf.decode(ids, skip_special_tokens=True)


def test_wordpiece_lower_casing_and_accents(tmp_path, wordpiece_vocab):
    uncased = load_tokenizer(_wordpiece_dir(tmp_path, wordpiece_vocab))  # default: lower-case
    (tmp_path / "wp").rename(tmp_path / "uncased")
    cased = load_tokenizer(_wordpiece_dir(tmp_path, wordpiece_vocab, {"do_lower_case": False}))
    assert uncased.tokenize("HELLO") == ["hello"]
    assert "".join(t.removeprefix("##") for t in uncased.tokenize("CAFÉ")) == "cafe"
    assert cased.tokenize("HELLO") != uncased.tokenize("HELLO")
    assert "".join(t.removeprefix("##") for t in cased.tokenize("HELLO")) == "HELLO"
    assert "é" in "".join(cased.tokenize("Café"))
    # CJK characters are split one per token, with or without lower-casing.
    assert cased.tokenize("北京是") == ["北", "京", "是"]
    # The special token in running text is kept whole, not lower-cased or split.
    assert uncased.tokenize("[MASK] x")[0] == "[MASK]"
    assert uncased.convert_tokens_to_ids("[MASK]") == uncased.mask_token_id == 4
    assert uncased.convert_tokens_to_ids("no-such-token") == uncased.unk_token_id == 1


def test_truncation_longest_first_and_model_max_length(tmp_path, wordpiece_vocab):
    directory = _wordpiece_dir(tmp_path, wordpiece_vocab, {"model_max_length": 10})
    ours = load_tokenizer(directory)
    hf = _hf_bert(wordpiece_vocab, model_max_length=10)
    assert ours.model_max_length == 10
    keys = ["input_ids", "attention_mask", "token_type_ids"]

    got = ours(SENTENCES, PAIRS)  # truncated to model_max_length by default
    assert got["input_ids"].shape == (len(SENTENCES), 10)
    _assert_same(got, hf(SENTENCES, PAIRS, padding=True, truncation=True), keys)

    got = ours(SENTENCES, PAIRS, max_length=7)
    _assert_same(got, hf(SENTENCES, PAIRS, padding=True, truncation=True, max_length=7), keys)
    assert got["input_ids"].shape[1] == 7

    untruncated = ours(SENTENCES, PAIRS, truncation=False)
    assert untruncated["input_ids"].shape[1] > 10
    _assert_same(untruncated, hf(SENTENCES, PAIRS, padding=True), keys)


def test_truncation_and_padding_do_not_leak_between_calls(tmp_path, wordpiece_vocab):
    ours = load_tokenizer(_wordpiece_dir(tmp_path, wordpiece_vocab))
    assert ours.model_max_length is None
    long_text = " ".join(["pieces"] * 40)
    full = len(ours.tokenize(long_text)) + 2  # + [CLS], [SEP]
    assert full >= 42
    assert ours(long_text, max_length=5)["input_ids"].shape == (1, 5)
    assert ours.backend.truncation is None and ours.backend.padding is None
    assert ours(long_text)["input_ids"].shape == (1, full)
    assert len(ours.encode(long_text)) == full
    assert ours([long_text, "a"], padding="max_length", max_length=6)["input_ids"].shape == (2, 6)
    assert ours.backend.truncation is None and ours.backend.padding is None
    assert ours([long_text, "a"])["input_ids"].shape == (2, full)


def test_padding_modes_and_return_types(tmp_path, wordpiece_vocab):
    ours = load_tokenizer(_wordpiece_dir(tmp_path, wordpiece_vocab))
    pad = ours.pad_token_id
    assert pad == 0

    texts = ["a b", "The quick brown fox"]
    lengths = [len(ours.encode(t)) for t in texts]
    assert lengths[0] == 4 and 4 < lengths[1] < 12
    out = ours(texts, padding="max_length", max_length=12, return_tensors="np",
               return_offsets=True)  # fmt: skip
    assert all(v.dtype == np.int64 for v in out.values())
    assert out["input_ids"].shape == (2, 12) and out["offset_mapping"].shape == (2, 12, 2)
    assert out["attention_mask"].sum(1).tolist() == lengths
    assert out["input_ids"][0].tolist() == ours.encode("a b") + [pad] * 8
    assert (out["offset_mapping"][0, 4:] == 0).all() and (out["offset_mapping"][0, 1:3] != 0).any()

    lists = ours(texts, padding=False, return_tensors=None)
    assert [len(r) for r in lists["input_ids"]] == lengths
    with pytest.raises(ValueError, match="different lengths"):
        ours(["a b", "The quick brown fox"], padding=False)
    with pytest.raises(ValueError, match="max_length"):
        ours("a", padding="max_length")
    with pytest.raises(ValueError, match="pairs"):
        ours(["a", "b"], ["c"])


# --------------------------------------------------------------------------- byte-level BPE


@pytest.mark.parametrize("add_prefix_space", [False, True])
def test_byte_level_bpe_matches_transformers(tmp_path, bpe_files, add_prefix_space):
    directory = tmp_path / "bpe"
    directory.mkdir()
    for name in ("vocab.json", "merges.txt"):
        (directory / name).write_bytes((bpe_files / name).read_bytes())
    (directory / "tokenizer_config.json").write_text(
        json.dumps({"add_prefix_space": add_prefix_space, "model_max_length": 512})
    )
    ours = load_tokenizer(directory)
    hf = _hf_roberta(bpe_files, add_prefix_space=add_prefix_space)
    assert ours.scheme == "bpe" and not ours.has_token_type_ids
    assert (ours.cls_token_id, ours.pad_token_id, ours.sep_token_id, ours.mask_token_id) == (
        0, 1, 2, 4,
    )  # fmt: skip

    texts = SENTENCES + ["Paris is <mask>."]
    keys = ["input_ids", "attention_mask", "offset_mapping", "special_tokens_mask"]
    got = ours(texts, return_offsets=True, return_special_tokens_mask=True)
    want = hf(texts, padding=True, return_offsets_mapping=True, return_special_tokens_mask=True)
    assert "token_type_ids" not in got
    _assert_same(got, want, keys)

    got = ours(SENTENCES, PAIRS, max_length=9, return_offsets=True)
    want = hf(SENTENCES, PAIRS, padding=True, truncation=True, max_length=9,
              return_offsets_mapping=True)  # fmt: skip
    _assert_same(got, want, ["input_ids", "attention_mask", "offset_mapping"])

    for text in texts:
        ids = ours.encode(text)
        assert ids == hf.encode(text)
        assert ours.decode(ids) == hf.decode(ids, skip_special_tokens=True)
    # The <mask> token absorbs the space before it, as in RoBERTa.
    assert ours.encode("is <mask>", add_special_tokens=False) == (
        ours.encode("is", add_special_tokens=False) + [ours.mask_token_id]
    )


def test_offsets_point_into_the_original_strings(tmp_path, bpe_files, wordpiece_vocab):
    wp = load_tokenizer(_wordpiece_dir(tmp_path, wordpiece_vocab))
    text, pair = "Café Zürich", "Ångström"
    out = wp(text, pair, return_offsets=True, return_tensors=None)
    tokens = wp.convert_ids_to_tokens(out["input_ids"][0])
    types = out["token_type_ids"][0]
    for tok, (start, end), seg in zip(tokens, out["offset_mapping"][0], types):
        if tok in ("[CLS]", "[SEP]"):
            assert (start, end) == (0, 0)
            continue
        source = text if seg == 0 else pair
        piece = _strip_accents(source[start:end].lower())
        assert piece, tok
        assert tok == "[UNK]" or tok.removeprefix("##") == piece


# --- tokenizer.json and saving ---------------------------------------------------------------


def test_save_pretrained_round_trip_wordpiece(tmp_path, wordpiece_vocab):
    source = _wordpiece_dir(
        tmp_path, wordpiece_vocab, {"do_lower_case": True, "model_max_length": 64}
    )
    ours = load_tokenizer(source)
    saved = ours.save_pretrained(tmp_path / "saved")
    assert {p.name for p in saved.iterdir()} == {
        "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt",
    }  # fmt: skip
    assert (saved / "vocab.txt").read_bytes() == wordpiece_vocab.read_bytes()

    reloaded = load_tokenizer(saved)  # now from tokenizer.json
    auto = transformers.AutoTokenizer.from_pretrained(saved)
    assert reloaded.model_max_length == auto.model_max_length == 64
    assert auto.mask_token_id == ours.mask_token_id and auto.pad_token_id == ours.pad_token_id
    keys = ["input_ids", "attention_mask", "token_type_ids"]
    expected = ours(SENTENCES, PAIRS)
    _assert_same(reloaded(SENTENCES, PAIRS), expected, keys)
    _assert_same(expected, auto(SENTENCES, PAIRS, padding=True, truncation=True), keys)


def test_save_pretrained_round_trip_bpe(tmp_path, bpe_files):
    ours = load_tokenizer(bpe_files)
    saved = ours.save_pretrained(tmp_path / "saved")
    assert not (saved / "vocab.txt").exists()
    reloaded = load_tokenizer(saved)
    auto = transformers.AutoTokenizer.from_pretrained(saved)
    assert not reloaded.has_token_type_ids
    texts = SENTENCES + ["Paris is <mask>."]
    expected = ours(texts)
    _assert_same(reloaded(texts), expected, ["input_ids", "attention_mask"])
    theirs = auto(texts, padding=True)
    assert "token_type_ids" not in theirs
    _assert_same(expected, theirs, ["input_ids", "attention_mask"])


def test_trained_tokenizer_json_directory(tmp_path):
    """A tokenizer.json written by the tokenizers library itself, with a config beside it."""
    backend = BackendTokenizer(models.WordPiece(unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.train_from_iterator(CORPUS, trainers.WordPieceTrainer(
        vocab_size=200, special_tokens=WORDPIECE_SPECIALS, show_progress=False))  # fmt: skip
    backend.enable_truncation(4)  # baked-in state the wrapper must ignore
    backend.enable_padding(length=50)
    directory = tmp_path / "tj"
    directory.mkdir()
    backend.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 1e30}))

    ours = load_tokenizer(directory)
    assert ours.model_max_length is None
    out = ours(["hello world", "the quick brown fox jumps"])
    # No post-processor in the file: no special tokens, no baked-in truncation or padding.
    backend.no_truncation()
    backend.no_padding()
    assert out["input_ids"][1].tolist() == backend.encode("the quick brown fox jumps").ids
    assert out["input_ids"].shape == (2, len(backend.encode("the quick brown fox jumps").ids))


# --------------------------------------------------------------------------- token types, errors


@pytest.mark.parametrize(
    ("config", "override", "expected"),
    [
        (None, None, True),
        ({"model_type": "bert", "type_vocab_size": 2}, None, True),
        ({"model_type": "distilbert", "vocab_size": 300}, None, False),
        ({"model_type": "distilbert", "type_vocab_size": 2}, None, False),
        ({"model_type": "roberta", "type_vocab_size": 1}, None, False),
        ({"model_type": "distilbert"}, True, True),
        ({"model_type": "bert", "type_vocab_size": 2}, False, False),
    ],
)
def test_token_type_ids_follow_model_config(tmp_path, wordpiece_vocab, config, override, expected):
    directory = _wordpiece_dir(tmp_path, wordpiece_vocab, config=config)
    ours = load_tokenizer(directory, return_token_type_ids=override)
    assert ours.has_token_type_ids is expected
    assert ("token_type_ids" in ours("a", "b")) is expected


def test_bpe_without_config_has_no_token_types_and_default_specials(bpe_files):
    ours = load_tokenizer(bpe_files)
    assert not ours.has_token_type_ids
    assert (ours.cls_token, ours.sep_token, ours.pad_token, ours.mask_token) == (
        "<s>", "</s>", "<pad>", "<mask>",
    )  # fmt: skip
    assert ours.all_special_ids == [0, 2, 1, 4, 3]


def test_special_tokens_from_special_tokens_map(tmp_path, wordpiece_vocab):
    directory = _wordpiece_dir(tmp_path, wordpiece_vocab)
    # Roles re-pointed at other vocabulary entries: ids must follow the map, not the defaults.
    (directory / "special_tokens_map.json").write_text(
        json.dumps({"cls_token": "[SEP]", "sep_token": {"content": "[CLS]", "lstrip": False}})
    )
    ours = load_tokenizer(directory)
    assert (ours.cls_token_id, ours.sep_token_id) == (3, 2)
    assert ours.encode("x")[0] == 3 and ours.encode("x")[-1] == 2


def test_missing_files_raise_tokenizer_not_found(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "vocab.json").write_text("{}")  # without merges.txt: not enough
    with pytest.raises(TokenizerNotFoundError) as info:
        load_tokenizer(tmp_path)
    assert isinstance(info.value, ValueError)
    message = str(info.value)
    for name in ("tokenizer.json", "vocab.txt", "vocab.json", "merges.txt", str(tmp_path)):
        assert name in message


def test_wrapper_accepts_a_backend_directly(wordpiece_vocab):
    backend = BackendTokenizer(models.WordPiece.from_file(str(wordpiece_vocab), unk_token="[UNK]"))
    tok = Tokenizer(backend, model_max_length=int(1e30))
    assert tok.model_max_length is None and tok.has_token_type_ids
    assert tok.vocab_size == len(wordpiece_vocab.read_text(encoding="utf-8").splitlines())
    with pytest.raises(ValueError, match="roles"):
        Tokenizer(backend, special_tokens={"bos": "<s>"})
