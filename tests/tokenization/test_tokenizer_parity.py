"""Issue 14: special-token flags read from every tokenizer file, and transformers' truncation
strategies, strides and overflowing windows; each checked against transformers' fast
tokenizer on the same directory."""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from tokenizers import AddedToken, decoders, models, pre_tokenizers, trainers
from tokenizers import Tokenizer as BackendTokenizer

from bertfamily.tokenization import load_tokenizer
from hf_compat import hf_roberta_tokenizer

transformers = pytest.importorskip("transformers")

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "I love you and you love me, said the fox to the dog.",
    "Paris is the capital of France and Berlin is the capital of Germany.",
    "A question is followed by a context that holds the answer.",
] * 5
BPE_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
MASK_TEXTS = [
    "I <mask> you",
    "I<mask>you",
    "Paris is <mask>.",
    "  <mask>  and   <mask>",
    "<mask> at the start",
    "two masks <mask> <mask> end",
]
BERT_MASK_TEXTS = [t.replace("<mask>", "[MASK]") for t in MASK_TEXTS]
ROBERTA_MAP = {
    "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "sep_token": "</s>",
    "pad_token": "<pad>", "cls_token": "<s>", "mask_token": "<mask>",
}  # fmt: skip


@pytest.fixture(scope="module")
def bpe_model(tmp_path_factory) -> Path:
    """vocab.json + merges.txt of a tiny byte-level BPE trained on CORPUS."""
    backend = BackendTokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        show_progress=False,
        special_tokens=BPE_SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    backend.train_from_iterator(CORPUS, trainer)
    directory = tmp_path_factory.mktemp("bpe_model")
    backend.model.save(str(directory))
    return directory


def _bpe_dir(tmp_path: Path, bpe_model: Path, name: str, files: dict[str, object]) -> Path:
    directory = tmp_path / name
    directory.mkdir()
    for f in ("vocab.json", "merges.txt"):
        shutil.copy(bpe_model / f, directory / f)
    for f, content in files.items():
        (directory / f).write_text(json.dumps(content))
    return directory


def _ids_and_offsets(ours, hf, texts, pairs=None) -> None:
    """Ours equals transformers' on every text: ids, offsets, special-token mask."""
    for i, text in enumerate(texts):
        pair = None if pairs is None else pairs[i]
        got = ours(text, pair, return_offsets_mapping=True, return_special_tokens_mask=True,
                   return_tensors=None, truncation=False)  # fmt: skip
        want = hf(text, pair, return_offsets_mapping=True, return_special_tokens_mask=True)
        assert got["input_ids"][0] == want["input_ids"], text
        assert [tuple(o) for o in got["offset_mapping"][0]] == [
            tuple(o) for o in want["offset_mapping"]
        ], text
        assert got["special_tokens_mask"][0] == want["special_tokens_mask"], text


# --------------------------------------------------------------------------- item 1: flags


def test_roberta_plain_string_mask_absorbs_the_space_before_it(tmp_path, bpe_model):
    """The issue's input: special_tokens_map.json names the mask as a plain string."""
    directory = _bpe_dir(tmp_path, bpe_model, "roberta", {
        "special_tokens_map.json": ROBERTA_MAP, "config.json": {"model_type": "roberta"},
    })  # fmt: skip
    ours = load_tokenizer(directory)
    tokens = ours.convert_ids_to_tokens(ours.encode("I <mask> you"))
    assert tokens == ["<s>", "I", "<mask>", "Ġyou", "</s>"]  # was <s> I Ġ <mask> Ġyou </s>
    # RoBERTa's tokenizer class makes a plain-string mask AddedToken(lstrip=True) (transformers
    # 4, and the released roberta-base files); transformers 5's RobertaTokenizer built from
    # vocab.json + merges.txt dropped that default, so the reference gets the token explicitly.
    hf = hf_roberta_tokenizer(
        directory,
        mask_token=AddedToken("<mask>", lstrip=True, rstrip=False, special=True),
    )
    _ids_and_offsets(ours, hf, MASK_TEXTS)
    # The flag survives a save: transformers and we reload the same tokenizer.
    saved = ours.save_pretrained(tmp_path / "saved")
    mask = json.loads((saved / "special_tokens_map.json").read_text())["mask_token"]
    assert mask["lstrip"] is True
    _ids_and_offsets(load_tokenizer(saved), transformers.AutoTokenizer.from_pretrained(saved),
                     MASK_TEXTS)  # fmt: skip


@pytest.mark.parametrize(
    "family", [("tokenizer_config.json", {"tokenizer_class": "RobertaTokenizer"}),
               ("config.json", {"model_type": "longformer"}),
               ("tokenizer_config.json", {"tokenizer_class": "DebertaTokenizer"})],
)  # fmt: skip
def test_family_default_for_a_plain_string_mask(tmp_path, bpe_model, family):
    directory = _bpe_dir(tmp_path, bpe_model, "d", {
        "special_tokens_map.json": ROBERTA_MAP, family[0]: family[1],
    })  # fmt: skip
    ours = load_tokenizer(directory)
    assert ours.encode("I <mask>", add_special_tokens=False) == ours.encode(
        "I", add_special_tokens=False
    ) + [ours.mask_token_id]
    # transformers 5 builds these classes from vocab.json + merges.txt without the default, so
    # the reference is given the token explicitly (see the test above).
    hf = hf_roberta_tokenizer(
        directory,
        mask_token=AddedToken("<mask>", lstrip=True, rstrip=False, special=True),
    )
    _ids_and_offsets(ours, hf, MASK_TEXTS)


def test_bpe_of_a_plain_mask_family_keeps_the_space(tmp_path, bpe_model):
    # A family that gives its mask no flags (GPT-2 style BPE): the space stays a token.
    directory = _bpe_dir(tmp_path, bpe_model, "gpt2ish", {
        "special_tokens_map.json": ROBERTA_MAP, "config.json": {"model_type": "gpt2"},
    })  # fmt: skip
    ours = load_tokenizer(directory)
    assert ours.convert_ids_to_tokens(ours.encode("I <mask> you", add_special_tokens=False)) == [
        "I", "Ġ", "<mask>", "Ġyou",
    ]  # fmt: skip


@pytest.mark.parametrize(
    "flags",
    [
        {"lstrip": True, "rstrip": False},
        {"lstrip": False, "rstrip": True},
        {"lstrip": True, "rstrip": True},
        {"lstrip": False, "rstrip": False},
    ],
)
def test_dict_form_flags_in_special_tokens_map(tmp_path, bpe_model, flags):
    mask = {"content": "<mask>", "single_word": False, "normalized": False, **flags}
    directory = _bpe_dir(tmp_path, bpe_model, "d", {
        "special_tokens_map.json": {**ROBERTA_MAP, "mask_token": mask},
        "config.json": {"model_type": "roberta"},
    })  # fmt: skip
    _ids_and_offsets(load_tokenizer(directory),
                     transformers.AutoTokenizer.from_pretrained(directory), MASK_TEXTS)  # fmt: skip


def test_added_tokens_decoder_wins_over_special_tokens_map(tmp_path, bpe_model):
    decoder = {
        str(i): {"content": t, "lstrip": False, "rstrip": False, "normalized": False,
                 "single_word": False, "special": True}
        for i, t in enumerate(BPE_SPECIALS)
    }  # fmt: skip
    decoder["4"]["rstrip"] = True  # the mask swallows the space after it, not before
    directory = _bpe_dir(tmp_path, bpe_model, "d", {
        "tokenizer_config.json": {"tokenizer_class": "RobertaTokenizer", "mask_token": "<mask>",
                                  "added_tokens_decoder": decoder},
        "special_tokens_map.json": {**ROBERTA_MAP, "mask_token": {"content": "<mask>",
                                                                  "lstrip": True}},
    })  # fmt: skip
    ours = load_tokenizer(directory)
    tokens = ours.convert_ids_to_tokens(ours.encode("I <mask> you", add_special_tokens=False))
    assert tokens == ["I", "Ġ", "<mask>", "you"]
    _ids_and_offsets(ours, transformers.AutoTokenizer.from_pretrained(directory), MASK_TEXTS)


def test_tokenizer_json_flags_and_extra_added_tokens(tmp_path, bpe_model):
    """A RoBERTa directory saved by transformers (tokenizer.json with added_tokens), with a
    non-special added token that is single_word."""
    hf = hf_roberta_tokenizer(
        bpe_model,
        mask_token=AddedToken("<mask>", lstrip=True, rstrip=False, special=True),
    )
    hf.add_tokens([AddedToken("foxdog", single_word=True, normalized=False)])
    directory = tmp_path / "saved"
    hf.save_pretrained(directory)
    ours = load_tokenizer(directory)
    reloaded = transformers.AutoTokenizer.from_pretrained(directory)
    texts = MASK_TEXTS + ["a foxdog b", "afoxdog b", "foxdogs"]
    _ids_and_offsets(ours, reloaded, texts)
    assert len(ours) == len(reloaded)


def test_bert_special_tokens_have_no_flags(minilm_dir, tmp_path):
    ours = load_tokenizer(minilm_dir)
    hf = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    _ids_and_offsets(ours, hf, BERT_MASK_TEXTS + ["[CLS] x [SEP] y [PAD]"])
    # vocab.txt only, special tokens named as plain strings: still no flags.
    directory = tmp_path / "bert"
    directory.mkdir()
    for name in ("vocab.txt", "special_tokens_map.json", "config.json"):
        shutil.copy(minilm_dir / name, directory / name)
    _ids_and_offsets(load_tokenizer(directory),
                     transformers.AutoTokenizer.from_pretrained(directory),
                     BERT_MASK_TEXTS)  # fmt: skip


def test_bert_added_tokens_decoder_flags(minilm_dir, tmp_path):
    directory = tmp_path / "bert"
    directory.mkdir()
    for name in ("vocab.txt", "config.json"):
        shutil.copy(minilm_dir / name, directory / name)
    config = json.loads((minilm_dir / "tokenizer_config.json").read_text())
    config["added_tokens_decoder"] = {
        str(i): {"content": t, "lstrip": t == "[MASK]", "rstrip": t == "[MASK]",
                 "normalized": False, "single_word": False, "special": True}
        for i, t in [(0, "[PAD]"), (100, "[UNK]"), (101, "[CLS]"), (102, "[SEP]"), (103, "[MASK]")]
    }  # fmt: skip
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    ours = load_tokenizer(directory)
    hf = transformers.AutoTokenizer.from_pretrained(directory)
    _ids_and_offsets(ours, hf, BERT_MASK_TEXTS)


# --------------------------------------------------------------------------- item 2: truncation

QUESTION = "what is the name of the very long question that has words"
CONTEXT = (
    "the context is a long paragraph with many many words so that it must be cut into "
    "several windows, each of which shares some tokens with the one before it."
)
SINGLES = [QUESTION, CONTEXT, "short", "", "I love you"]
PAIRS = [
    (QUESTION, CONTEXT),
    ("short q", CONTEXT),
    (CONTEXT, "short answer here"),
    ("a", "b"),
    ("", CONTEXT),
]
STRATEGIES = [True, "longest_first", "only_first", "only_second", False, "do_not_truncate"]
KEYS = ["input_ids", "token_type_ids", "attention_mask", "offset_mapping",
        "special_tokens_mask", "overflow_to_sample_mapping", "length"]  # fmt: skip


def test_only_second_keeps_the_question_whole(minilm_dir):
    """The issue's input: a 12-token question, only_second, max_length 16."""
    ours = load_tokenizer(minilm_dir)
    question = "who wrote the novel that was published in the year eighteen thirteen"
    assert len(ours.tokenize(question)) == 12
    got = ours(question, CONTEXT, truncation="only_second", max_length=16, return_tensors=None)
    ids = got["input_ids"][0]
    assert len(ids) == 16
    assert ids[1:13] == ours.encode(question, add_special_tokens=False)  # whole (was 10 tokens)
    assert got["token_type_ids"][0].count(1) == 16 - 12 - 2  # one context token + [SEP]


def _compare(ours, hf, inputs, kwargs) -> str:
    """``ok`` when ours equals transformers' on ``inputs``; ``error`` when both refuse."""
    texts = [x if isinstance(x, str) else x[0] for x in inputs]
    pairs = None if isinstance(inputs[0], str) else [x[1] for x in inputs]
    common = dict(return_offsets_mapping=True, return_special_tokens_mask=True,
                  return_length=True, **kwargs)  # fmt: skip
    try:
        want = hf(texts, pairs, **common)
    except BaseException as e:  # the tokenizers library's bare Exception, or a Rust panic
        if not isinstance(e, Exception) and type(e).__name__ != "PanicException":
            raise
        with pytest.raises(ValueError, match="cannot truncate|needs text pairs|no room"):
            ours(texts, pairs, return_tensors=None, **common)
        return f"error: {e}"
    got = ours(texts, pairs, return_tensors=None, return_token_type_ids="token_type_ids" in want,
               **common)  # fmt: skip
    assert sorted(got) == sorted(k for k in want.keys()), kwargs
    for key in got:
        g, w = got[key], want[key]
        if key == "offset_mapping":
            g = [[tuple(o) for o in row] for row in g]
            w = [[tuple(o) for o in row] for row in w]
        assert g == list(w), (key, kwargs)
    return "ok"


def _grid(ours, hf, lengths) -> dict[str, int]:
    outcomes: dict[str, int] = {"ok": 0, "error": 0}
    for inputs, strategy, max_length, stride, overflow, padding in itertools.product(
        [SINGLES, PAIRS], STRATEGIES, lengths, [0, 2, 5], [False, True],
        [True, "max_length", False],
    ):  # fmt: skip
        if stride and not overflow:
            continue
        kwargs = dict(truncation=strategy, max_length=max_length, stride=stride,
                      return_overflowing_tokens=overflow, padding=padding)  # fmt: skip
        result = _compare(ours, hf, inputs, kwargs)
        outcomes[result.split(":")[0]] += 1
    return outcomes


def test_truncation_grid_wordpiece_minilm(minilm_dir):
    ours = load_tokenizer(minilm_dir)
    hf = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    outcomes = _grid(ours, hf, [8, 16, 24, 64])
    assert outcomes["ok"] > 200 and outcomes["error"] > 10, outcomes


def test_truncation_grid_roberta_bpe(tmp_path, bpe_model):
    directory = _bpe_dir(tmp_path, bpe_model, "roberta", {
        "special_tokens_map.json": ROBERTA_MAP,
        "tokenizer_config.json": {"tokenizer_class": "RobertaTokenizer"},
    })  # fmt: skip
    ours = load_tokenizer(directory)
    hf = transformers.AutoTokenizer.from_pretrained(directory)
    outcomes = _grid(ours, hf, [8, 16, 40])
    assert outcomes["ok"] > 150 and outcomes["error"] > 10, outcomes


def test_overflowing_windows_are_tensors_with_a_sample_mapping(minilm_dir):
    ours = load_tokenizer(minilm_dir)
    hf = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    kw = dict(truncation="only_second", max_length=24, stride=4, return_overflowing_tokens=True,
              padding="max_length", return_offsets_mapping=True)  # fmt: skip
    got = ours([QUESTION, "short q"], [CONTEXT, CONTEXT], return_tensors="pt", **kw)
    want = hf([QUESTION, "short q"], [CONTEXT, CONTEXT], return_tensors="pt", **kw)
    assert set(got) == set(want.keys())
    for key in got:
        assert got[key].tolist() == want[key].tolist(), key
    assert got["input_ids"].shape[0] > 2 and got["input_ids"].shape[1] == 24


def test_impossible_and_bad_requests_are_clear_errors(minilm_dir):
    ours = load_tokenizer(minilm_dir)
    long_question = " ".join(["word"] * 20)
    with pytest.raises(ValueError, match=r"first sequence alone has 20 tokens"):
        ours(long_question, CONTEXT, truncation="only_second", max_length=16)
    with pytest.raises(ValueError, match=r"second sequence alone has"):
        ours(long_question, CONTEXT, truncation="only_first", max_length=16)
    with pytest.raises(ValueError, match="needs text pairs"):
        ours(CONTEXT, truncation="only_second", max_length=16)
    with pytest.raises(ValueError, match="unknown truncation"):
        ours(CONTEXT, truncation="only_third")
    with pytest.raises(ValueError, match="stride"):
        ours(CONTEXT, stride=-1)
    with pytest.raises(ValueError, match="stride must be below"):
        ours(CONTEXT, max_length=8, stride=6, return_overflowing_tokens=True)
    with pytest.raises(TypeError, match=r"is_split_into_words.*not supported"):
        ours(["a", "b"], is_split_into_words=True)
    # Arguments taken: add_special_tokens, return_attention_mask, return_token_type_ids.
    out = ours("a b", add_special_tokens=False, return_attention_mask=False,
               return_token_type_ids=False, return_tensors=None)  # fmt: skip
    assert out == {"input_ids": [ours.encode("a b", add_special_tokens=False)]}


def test_long_text_character_cut_respects_the_strategy(minilm_dir):
    """The character pre-cut (for time) only cuts segments the strategy may truncate."""
    ours = load_tokenizer(minilm_dir)
    hf = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    huge = "word " * 5000
    for strategy, pair in [("only_second", ("short question", huge)),
                           ("only_first", (huge, "short answer")),
                           ("longest_first", (huge, huge))]:  # fmt: skip
        got = ours(*pair, truncation=strategy, max_length=32, return_tensors=None)
        want = hf(*pair, truncation=strategy, max_length=32)
        assert got["input_ids"][0] == want["input_ids"], strategy
        assert got["token_type_ids"][0] == want["token_type_ids"], strategy


def test_numpy_tensors_for_flat_fields(minilm_dir):
    ours = load_tokenizer(minilm_dir)
    out = ours([CONTEXT], max_length=16, stride=2, return_overflowing_tokens=True,
               return_tensors="np", return_truncated=True, return_length=True)  # fmt: skip
    assert out["overflow_to_sample_mapping"].dtype == np.int64
    assert out["truncated"].tolist() == [1] * out["input_ids"].shape[0]
    assert out["length"].tolist()[0] == 16
