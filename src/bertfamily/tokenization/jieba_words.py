"""RoFormer's jieba word pre-tokenisation, as a ``tokenizers`` custom pre-tokenizer.

transformers' RoFormer tokenizer (``RoFormerTokenizer``, ``tokenization_utils.JiebaPreTokenizer``)
splits text into jieba words before WordPiece (Su et al. 2021 pretrained
``junnyu/roformer_chinese_base`` on a vocabulary of characters *and* jieba words): every jieba
word (precise mode, no HMM for unseen words) that is in the vocabulary stays one piece; any
other word is split as BERT would (each CJK character alone, then at whitespace). Its
normaliser therefore leaves CJK characters together (``handle_chinese_chars=False``).

The segmenter is rjieba (jieba-rs, what transformers imports) when it is installed
(``pip install rjieba``), else jieba (the ``chinese`` extra), whose precise mode gives the
same words from the same dictionary. A custom pre-tokenizer cannot be serialised:
``tokenizer.json`` stores BERT's pre-tokenizer in its place and ``tokenizer_config.json`` names
``RoFormerTokenizer``, which puts jieba back (transformers does the same).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Container, Iterator

import tokenizers
from tokenizers import NormalizedString, PreTokenizedString, normalizers, pre_tokenizers

logger = logging.getLogger(__name__)

# (text) -> (word, start, end) character spans covering the text
Segmenter = Callable[[str], Iterator[tuple[str, int, int]]]


def jieba_segmenter() -> tuple[str, Segmenter]:
    """(name, segmenter): rjieba's ``tokenize(text, hmm=False)`` when importable, else jieba's
    ``tokenize(text, HMM=False)`` (precise mode, no HMM for words outside the dictionary)."""
    try:
        import rjieba
    except ImportError:
        from ..runtime import require

        jieba = require("jieba", "chinese", "RoFormer's tokenizer (jieba word pre-tokenisation)")
        jieba.setLogLevel(logging.WARNING)  # its dictionary-loading lines
        return "jieba", lambda text: jieba.tokenize(text, HMM=False)
    return "rjieba", lambda text: iter(rjieba.tokenize(text, hmm=False))


class JiebaWords:
    """The pre-tokenizer object (``pre_tokenize`` is the protocol of ``tokenizers``' custom
    pre-tokenizers).

    Args:
        vocab: the WordPiece vocabulary (anything with ``in``): jieba words in it stay whole.
        segmenter: `jieba_segmenter`'s second value (None = that).
    """

    def __init__(self, vocab: Container[str], segmenter: Segmenter | None = None) -> None:
        self.vocab = vocab
        self.segment = segmenter or jieba_segmenter()[1]
        # BERT's split of a word outside the vocabulary: CJK characters apart, at whitespace
        self._bert_split = normalizers.BertNormalizer(
            clean_text=False, handle_chinese_chars=True, strip_accents=False, lowercase=False
        )

    def _split(self, index: int, text: NormalizedString) -> list[NormalizedString]:
        pieces = []
        for word, start, end in self.segment(str(text)):
            if word in self.vocab:
                pieces.append(text[start:end])
                continue
            # characters of the word one by one (or its whitespace-free runs), in place
            for part in self._bert_split.normalize_str(word).split():
                pieces.append(text[start : start + len(part)])
                start += len(part)
        return pieces

    def pre_tokenize(self, pretok: PreTokenizedString) -> None:
        """Split every piece of ``pretok`` into words (the ``tokenizers`` protocol)."""
        pretok.split(self._split)


def install_jieba(backend: tokenizers.Tokenizer) -> str:
    """Make ``backend`` pre-tokenise with jieba words over its own vocabulary; returns the
    segmenter's name ("rjieba" or "jieba")."""
    name, segmenter = jieba_segmenter()
    words = JiebaWords(backend.get_vocab(), segmenter)
    backend.pre_tokenizer = pre_tokenizers.PreTokenizer.custom(words)
    logger.debug("RoFormer jieba pre-tokenisation with %s", name)
    return name


def serialised_without_jieba(backend: tokenizers.Tokenizer) -> str:
    """``backend.to_str()`` with BERT's pre-tokenizer in the custom one's place, the form
    ``tokenizer.json`` keeps (transformers' RoFormerTokenizer saves the same); the backend
    is restored. Callers hold the lock that guards the backend."""
    pre = backend.pre_tokenizer
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    try:
        return backend.to_str()
    finally:
        backend.pre_tokenizer = pre
