"""Tokenization on `tokenizers`: the `Tokenizer` wrapper and `load_tokenizer` for Hugging Face
tokenizer files (`tokenizer`), SentencePiece model files (`spm`), and tokenizer training
(`training`: WordPiece, BPE, Unigram)."""

from .tokenizer import (
    Tokenizer,
    TokenizerFileError,
    TokenizerNotFoundError,
    load_tokenizer,
    tokenizer_from_directory,
)

__all__ = [
    "Tokenizer",
    "TokenizerFileError",
    "TokenizerNotFoundError",
    "load_tokenizer",
    "tokenizer_from_directory",
]
