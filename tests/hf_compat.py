"""Reference tokenizers built the same way under transformers 4.x and 5.x.

transformers 5 takes the vocabulary files of its fast tokenizers as ``vocab=`` / ``merges=``
(and silently ignores ``vocab_file=``, building a 5-token vocabulary); transformers 4 takes
``vocab_file=`` / ``merges_file=`` and converts from the slow tokenizer. Every test that builds a
reference tokenizer from files goes through here, so the parity tests run under both majors.
"""

from __future__ import annotations

import json
from pathlib import Path

import transformers

TRANSFORMERS_MAJOR = int(transformers.__version__.split(".")[0])


def hf_bert_tokenizer(vocab: Path, **kwargs):
    """`BertTokenizerFast` from a WordPiece ``vocab.txt``; the length check guards against a
    vocabulary argument that was ignored."""
    key = "vocab" if TRANSFORMERS_MAJOR >= 5 else "vocab_file"
    hf = transformers.BertTokenizerFast(**{key: str(vocab)}, **kwargs)
    assert len(hf) == len(Path(vocab).read_text(encoding="utf-8").splitlines())
    return hf


def hf_roberta_tokenizer(directory: Path, **kwargs):
    """`RobertaTokenizerFast` from ``vocab.json`` + ``merges.txt`` in ``directory``."""
    vocab, merges = str(Path(directory) / "vocab.json"), str(Path(directory) / "merges.txt")
    if TRANSFORMERS_MAJOR >= 5:
        hf = transformers.RobertaTokenizerFast(vocab=vocab, merges=merges, **kwargs)
    else:
        hf = transformers.RobertaTokenizerFast(vocab_file=vocab, merges_file=merges, **kwargs)
    size = len(json.loads((Path(directory) / "vocab.json").read_text(encoding="utf-8")))
    assert len(hf) >= size
    return hf
