"""Train a tokenizer on a corpus with the ``tokenizers`` library, in the Hugging Face layout.

Three schemes, those of the families' released tokenizers:

- ``"wordpiece"`` (BERT family): BERT normaliser (lower-casing and accent stripping optional,
  CJK characters split one per token), BERT pre-tokeniser, WordPiece with ``##`` continuation
  pieces; special tokens ``[PAD]=0 [UNK] [CLS] [SEP] [MASK]``.
- ``"bpe"`` (RoBERTa, Longformer, DeBERTa): byte-level BPE over the 256-byte alphabet, words
  start with ``Ġ``; ``<s>=0 <pad>=1 </s>=2 <unk>=3 <mask>=4``.
- ``"unigram"`` (ALBERT): Unigram LM over ``▁``-prefixed words, trained by SentencePiece;
  ``<pad>=0 <unk>=1 [CLS]=2 [SEP]=3 [MASK]=4``.

The result is a `bertfamily.tokenization.Tokenizer`; ``save_pretrained`` writes a directory
that `load_tokenizer` and ``transformers.AutoTokenizer`` both load.

Reproducible: the same corpus and options give a byte-identical ``tokenizer.json`` (tested).
``tokenizers``' own ``WordPieceTrainer`` does not (huggingface/tokenizers#1794): it numbers the
``##`` continuation characters in the iteration order of a randomly seeded hash map of the
words, and merges of equal count are tied by those numbers, so ids and even merges change from
run to run. `train_tokenizer` therefore trains WordPiece as the same BPE with its continuation
characters made ordinary alphabet symbols (which the trainer sorts), see `_train_wordpiece`.
Unigram is trained by SentencePiece on one thread (`_train_unigram`): ``tokenizers``'
UnigramTrainer sums its EM statistics in hash-map order, which changes the scores and the order
of pieces from run to run.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import tokenizers
from tokenizers import (
    AddedToken,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
    trainers,
)

from ..errors import InputError
from .tokenizer import Tokenizer

__all__ = ["TOKENIZER_KINDS", "train_tokenizer"]

logger = logging.getLogger(__name__)

TOKENIZER_KINDS = ("wordpiece", "bpe", "unigram")

_SPECIALS = {
    "wordpiece": {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"},
    "bpe": {"cls": "<s>", "pad": "<pad>", "sep": "</s>", "unk": "<unk>", "mask": "<mask>"},
    "unigram": {"pad": "<pad>", "unk": "<unk>", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"},
}


def check_corpus_files(files: Iterable[str | Path]) -> None:
    """Raise `ValueError` (naming the file) unless every one of ``files`` exists, is a readable
    UTF-8 file and holds some text: a mistyped path must never be learnt from as a string
    (`data.text_input.iter_input_lines`: a `DataError` naming the file and the bad line)."""
    from ..data.text_input import iter_input_lines  # the one reader of text inputs

    for f in files:
        path = Path(f)
        has_text = any(line.strip() for _, line in iter_input_lines(path, what="corpus file"))
        if not has_text:
            raise InputError(f"corpus file {path} is empty (no text on any line)")


def _is_path(text: str, exists: bool = False) -> bool:
    """Whether a string names a file (or, with ``exists``, anything): a line of text too long
    for a file name is text, not an error."""
    try:
        return Path(text).exists() if exists else Path(text).is_file()
    except (OSError, ValueError):  # name too long, NUL byte
        return False


def _texts(corpus: Iterable[str] | str | Path | list[str | Path]) -> Iterable[str]:
    if isinstance(corpus, Path) or (isinstance(corpus, str) and _is_path(corpus, exists=True)):
        corpus = [corpus]
    if (
        isinstance(corpus, list)
        and corpus
        and all(isinstance(c, Path) or (isinstance(c, str) and _is_path(c)) for c in corpus)
    ):
        check_corpus_files(corpus)

        def lines():
            for f in corpus:
                with open(f, encoding="utf-8") as fh:
                    yield from (x for x in fh if x.strip())

        return lines()
    return corpus


_SYMBOLS_START = 0xF0000  # supplementary private use areas A and B: no whitespace, no text
_SYMBOLS_END = 0x10FFFE


def _train_wordpiece(
    backend: tokenizers.Tokenizer,
    texts: Iterable[str],
    vocab_size: int,
    min_frequency: int,
    special_tokens: list[str],
) -> dict[str, int]:
    """WordPiece vocabulary (token → id) learnt by BPE merges, deterministically.

    The vocabulary is that of ``tokenizers.trainers.WordPieceTrainer`` (which trains BPE with a
    ``##`` continuation prefix, merges by pair count; Schuster & Nakajima 2012 as used by BERT,
    Devlin et al. 2019 §3): the specials, the alphabet of word-initial characters, the
    alphabet of ``##`` continuation characters, then one token per merge. Each (character,
    word-initial or not) is written as its own private-use code point, numbered in sorted order,
    so the BPE trainer's alphabet (sorted by code point) holds the continuation characters too
    and every id, and every tie between merges of equal count, is the same on every run.

    Args:
        backend: the tokenizer whose normaliser and pre-tokeniser split the text into words.
        texts: the training text, one string per line or document.
        vocab_size: target vocabulary size, specials included.
        min_frequency: a pair must occur this often to be merged.
        special_tokens: the specials, given ids 0, 1, ... in this order.

    Raises:
        ValueError: the corpus holds more distinct characters than the private use planes
            (131,068).
    """
    words: Counter[str] = Counter()
    normalizer, pre_tokenizer = backend.normalizer, backend.pre_tokenizer
    for text in texts:
        words.update(w for w, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(text)))
    chars = {c for w in words for c in w}  # every character is also a word-initial token
    symbols = sorted({(False, c) for c in chars} | {(True, c) for w in words for c in w[1:]})
    if len(symbols) > _SYMBOLS_END - _SYMBOLS_START:
        raise InputError(f"the corpus has too many distinct characters ({len(symbols)})")
    code = {s: chr(_SYMBOLS_START + i) for i, s in enumerate(symbols)}
    piece = {v: ("##" if cont else "") + c for (cont, c), v in code.items()}
    bpe = tokenizers.Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=special_tokens,
        initial_alphabet=[code[False, c] for c in sorted(chars)],
        show_progress=False,
    )

    def coded():
        for w, n in sorted(words.items()):
            yield " ".join(["".join(code[i > 0, c] for i, c in enumerate(w))] * n)

    bpe.train_from_iterator(coded(), trainer=trainer)
    specials = set(special_tokens)
    vocab: dict[str, int] = {}
    for token, i in sorted(bpe.get_vocab(with_added_tokens=False).items(), key=lambda t: t[1]):
        if token in specials:
            vocab[token] = i
        else:  # a merged token keeps its first symbol's prefix and drops the others'
            vocab[piece[token[0]] + "".join(piece[s].removeprefix("##") for s in token[1:])] = i
    return vocab


_SPM_MAX_BYTES = 1 << 15  # longest line given to the SentencePiece trainer (longer: cut at spaces)


def _spm_lines(backend: tokenizers.Tokenizer, texts: Iterable[str]) -> Iterable[str]:
    """Normalised lines, each word after one space, none longer than ``_SPM_MAX_BYTES``
    (SentencePiece skips longer ones)."""
    for text in texts:
        line = backend.normalizer.normalize_str(text).strip()
        while len(line.encode("utf-8")) > _SPM_MAX_BYTES:
            cut = line.rfind(" ", 0, _SPM_MAX_BYTES // 4) if " " in line else -1
            cut = cut if cut > 0 else _SPM_MAX_BYTES // 4
            yield line[:cut]
            line = line[cut:].lstrip()
        if line:  # every word after a space, i.e. "▁"-prefixed, as Metaspace will split it
            yield " " + " ".join(line.split())


def _train_unigram(
    backend: tokenizers.Tokenizer, texts: Iterable[str], vocab_size: int, specials: list[str]
) -> list[tuple[str, float]]:
    """Unigram LM pieces and log-probabilities (Kudo 2018, "Subword Regularization" §3.2),
    trained by SentencePiece itself (the trainer of ALBERT's released tokenizer) on the
    normalised text, single-threaded: deterministic, unlike ``tokenizers``' UnigramTrainer, whose
    EM sums over a randomly ordered hash map of the words, so scores, and the order of pieces
    of near-equal score, change from run to run.

    Words are split at whitespace and start with ``▁`` (as the ``Metaspace`` pre-tokeniser
    does); every character of the text is kept (``character_coverage=1``); ``vocab_size`` is an
    upper bound (a small corpus gives fewer pieces). ``specials`` take ids 0, 1, ... in order
    (the second, ``<unk>``, is the unknown piece).

    Raises:
        ValueError: the trainer refuses the corpus or the size (e.g. fewer pieces allowed than
            the corpus has characters).
    """
    import io

    import sentencepiece as spm

    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(_spm_lines(backend, texts)),
            model_writer=model,
            model_type="unigram",
            vocab_size=vocab_size,
            hard_vocab_limit=False,
            character_coverage=1.0,
            normalization_rule_name="identity",
            add_dummy_prefix=False,
            remove_extra_whitespaces=False,
            split_by_unicode_script=False,
            shuffle_input_sentence=False,
            max_sentence_length=_SPM_MAX_BYTES,
            num_threads=1,
            pad_id=0,
            pad_piece=specials[0],
            unk_id=1,
            unk_piece=specials[1],
            bos_id=-1,
            eos_id=-1,
            control_symbols=specials[2:],
            minloglevel=2,
        )
    except RuntimeError as e:
        raise InputError(f"cannot train a Unigram tokenizer of {vocab_size} pieces: {e}") from None
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(model.getvalue())
    return [(p.piece, p.score) for p in proto.pieces]


def train_tokenizer(
    corpus: Iterable[str] | str | Path | list[str | Path],
    kind: str = "wordpiece",
    vocab_size: int = 30522,
    *,
    lowercase: bool = True,
    strip_accents: bool | None = None,
    min_frequency: int = 2,
    model_max_length: int = 512,
    output_dir: str | Path | None = None,
) -> Tokenizer:
    """Train a tokenizer.

    Args:
        corpus: text files (a path or list of paths, read line by line) or an iterable of
            strings.
        kind: "wordpiece" | "bpe" | "unigram".
        vocab_size: target vocabulary size, special tokens included.
        lowercase: lower-case before tokenising (WordPiece, Unigram; byte-level BPE keeps
            case, as RoBERTa does, unless this is True and kind is "bpe" → still cased).
        strip_accents: remove accents (None: follow ``lowercase``, as BERT does).
        min_frequency: a pair/piece must occur this often to be merged (WordPiece, BPE).
        model_max_length: written to tokenizer_config.json.
        output_dir: when given, ``save_pretrained`` there.

    Returns:
        The trained `Tokenizer`.

    Raises:
        ValueError: unknown kind, or ``vocab_size`` too small for the specials and alphabet.
    """
    if kind not in TOKENIZER_KINDS:
        raise InputError(f"kind must be one of {TOKENIZER_KINDS}, got {kind!r}")
    if vocab_size < 10:
        raise InputError(f"vocab_size must be >= 10, got {vocab_size}")
    specials = _SPECIALS[kind]
    special_list = list(specials.values())
    accents = lowercase if strip_accents is None else strip_accents
    if kind == "wordpiece":
        backend = tokenizers.Tokenizer(models.WordPiece(unk_token=specials["unk"]))
        backend.normalizer = normalizers.BertNormalizer(
            clean_text=True, handle_chinese_chars=True, strip_accents=accents, lowercase=lowercase
        )
        backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        backend.decoder = decoders.WordPiece(prefix="##")
        trainer = None
        hf = {
            "tokenizer_class": "BertTokenizer",
            "do_lower_case": lowercase,
            "strip_accents": strip_accents,
            "tokenize_chinese_chars": True,
        }
    elif kind == "bpe":
        backend = tokenizers.Tokenizer(models.BPE(unk_token=None, fuse_unk=False))
        backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        backend.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            special_tokens=special_list,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        )
        hf = {
            "tokenizer_class": "RobertaTokenizer",
            "add_prefix_space": False,
            "trim_offsets": True,
        }
    else:
        steps = [normalizers.Replace("``", '"'), normalizers.Replace("''", '"')]
        if accents:
            steps += [normalizers.NFKD(), normalizers.StripAccents()]
        if lowercase:
            steps.append(normalizers.Lowercase())
        backend = tokenizers.Tokenizer(models.Unigram())
        backend.normalizer = normalizers.Sequence(steps)
        backend.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁")
        backend.decoder = decoders.Metaspace(replacement="▁")
        trainer = None
        hf = {"tokenizer_class": "PreTrainedTokenizerFast", "do_lower_case": lowercase}

    if trainer is None and kind == "unigram":
        pieces = _train_unigram(backend, _texts(corpus), vocab_size, special_list)
        backend.model = models.Unigram(pieces, unk_id=special_list.index(specials["unk"]))
    elif trainer is None:
        vocab = _train_wordpiece(backend, _texts(corpus), vocab_size, min_frequency, special_list)
        backend.model = models.WordPiece(vocab, unk_token=specials["unk"])
    else:
        backend.train_from_iterator(_texts(corpus), trainer=trainer)
    cls, sep = specials["cls"], specials["sep"]
    if kind == "bpe":
        backend.post_processor = processors.RobertaProcessing(
            (sep, backend.token_to_id(sep)),
            (cls, backend.token_to_id(cls)),
            trim_offsets=True,
            add_prefix_space=False,
        )
    else:
        backend.post_processor = processors.TemplateProcessing(
            single=f"{cls}:0 $A:0 {sep}:0",
            pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1",
            special_tokens=[(cls, backend.token_to_id(cls)), (sep, backend.token_to_id(sep))],
        )
    roles = {r: AddedToken(t, special=True, normalized=False) for r, t in specials.items()}
    if kind == "bpe":  # RoBERTa's <mask> swallows the space before it
        roles["mask"] = AddedToken(specials["mask"], lstrip=True, special=True, normalized=False)
    backend.add_special_tokens(list(roles.values()))
    tok = Tokenizer(
        backend,
        special_tokens=roles,
        model_max_length=model_max_length,
        return_token_type_ids=kind != "bpe",
        hf_config=hf,
    )
    logger.info("trained a %s tokenizer with %d tokens", kind, tok.vocab_size)
    if output_dir is not None:
        tok.save_pretrained(output_dir)
    return tok
