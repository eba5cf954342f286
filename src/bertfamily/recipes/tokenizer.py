"""Train a tokenizer on a corpus with the ``tokenizers`` library, in the Hugging Face layout.

Three schemes, those of the families' released tokenizers:

- ``"wordpiece"`` (BERT family): BERT normaliser (lower-casing and accent stripping optional,
  CJK characters split one per token), BERT pre-tokeniser, WordPiece with ``##`` continuation
  pieces; special tokens ``[PAD]=0 [UNK] [CLS] [SEP] [MASK]``.
- ``"bpe"`` (RoBERTa, Longformer, DeBERTa): byte-level BPE over the 256-byte alphabet, words
  start with ``Ġ``; ``<s>=0 <pad>=1 </s>=2 <unk>=3 <mask>=4``.
- ``"unigram"`` (ALBERT): SentencePiece-style Unigram LM over ``▁``-prefixed words;
  ``<pad>=0 <unk>=1 [CLS]=2 [SEP]=3 [MASK]=4``.

The result is a `bertfamily.tokenization.Tokenizer`; ``save_pretrained`` writes a directory
that `load_tokenizer` and ``transformers.AutoTokenizer`` both load.
"""

from __future__ import annotations

import logging
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

from ..tokenization import Tokenizer

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
    UTF-8 file and holds some text: a mistyped path must never be learnt from as a string."""
    for f in files:
        path = Path(f)
        if not path.is_file():
            why = "it is a directory" if path.is_dir() else "it does not exist"
            raise ValueError(f"cannot read corpus file {path}: {why}")
        try:
            with open(path, encoding="utf-8") as fh:
                has_text = any(line.strip() for line in fh)
        except (OSError, UnicodeDecodeError) as e:
            raise ValueError(f"cannot read corpus file {path}: {e}") from e
        if not has_text:
            raise ValueError(f"corpus file {path} is empty (no text on any line)")


def _texts(corpus: Iterable[str] | str | Path | list[str | Path]) -> Iterable[str]:
    if isinstance(corpus, Path) or (isinstance(corpus, str) and Path(corpus).exists()):
        corpus = [corpus]
    if (
        isinstance(corpus, list)
        and corpus
        and all(isinstance(c, Path) or (isinstance(c, str) and Path(c).is_file()) for c in corpus)
    ):
        check_corpus_files(corpus)

        def lines():
            for f in corpus:
                with open(f, encoding="utf-8") as fh:
                    yield from (x for x in fh if x.strip())

        return lines()
    return corpus


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
        raise ValueError(f"kind must be one of {TOKENIZER_KINDS}, got {kind!r}")
    if vocab_size < 10:
        raise ValueError(f"vocab_size must be >= 10, got {vocab_size}")
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
        trainer = trainers.WordPieceTrainer(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            special_tokens=special_list,
            continuing_subword_prefix="##",
        )
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
        trainer = trainers.UnigramTrainer(
            vocab_size=vocab_size, special_tokens=special_list, unk_token=specials["unk"]
        )
        hf = {"tokenizer_class": "PreTrainedTokenizerFast", "do_lower_case": lowercase}

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
