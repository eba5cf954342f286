"""SentencePiece model files (``spiece.model``, ``spm.model``, ``sentencepiece.bpe.model``) as
``tokenizers`` pipelines, equal to the fast tokenizers that transformers converts from them.

A SentencePiece ``.model`` file is one serialised ``ModelProto`` (sentencepiece's
``src/sentencepiece_model.proto``): the pieces with their scores and types, the trainer's
settings (model type, unknown piece) and the normaliser's precompiled character map. It is read
here with a small protobuf wire-format reader (`read_model`), so neither ``sentencepiece`` nor
``protobuf`` is needed at run time; the tokenisation itself is the ``tokenizers`` library's
``Unigram`` or ``BPE`` model.

Each supported family is one `SpmFamily` row of `FAMILIES` (data only): its file name, how its
vocabulary is laid out over the SentencePiece pieces, its normaliser steps, the
``tokenizer_config.json`` options it honours, its role tokens and its post-processor. Every row
follows transformers' ``convert_slow_tokenizer.py`` (``AlbertConverter``,
``DebertaV2Converter``, ``XLMRobertaConverter``, ``CamembertConverter``), whose output is what
the released ``tokenizer.json`` files of these checkpoints hold.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tokenizers
from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers, processors

__all__ = [
    "FAMILIES",
    "FILE_FAMILIES",
    "SpmFamily",
    "SpmModel",
    "SpmPiece",
    "build_backend",
    "post_processor",
    "read_model",
]

logger = logging.getLogger(__name__)

METASPACE = "\u2581"  # "▁": SentencePiece's visible space, the start of a word

# ModelProto.SentencePiece.Type (sentencepiece_model.proto)
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
# TrainerSpec.ModelType
UNIGRAM, BPE, WORD, CHAR = 1, 2, 3, 4
_MODEL_TYPE_NAMES = {UNIGRAM: "unigram", BPE: "bpe", WORD: "word", CHAR: "char"}

# ALBERT's original tokenizer re-splits a piece that ends in "<digit>," ("1," -> "1" ","); the
# converter gets the same effect by lowering such pieces' scores by this much.
_NUMBER_COMMA_PENALTY = 100.0


# --------------------------------------------------------------------------- the model file


@dataclass(frozen=True)
class SpmPiece:
    """One piece of a SentencePiece model: its string, log-probability score (Unigram) or
    negated merge rank (BPE), and type (``NORMAL``, ``UNKNOWN``, ``CONTROL``,
    ``USER_DEFINED``, ``UNUSED``, ``BYTE``)."""

    piece: str
    score: float
    type: int = NORMAL


@dataclass(frozen=True)
class SpmModel:
    """The parts of a ``ModelProto`` that a ``tokenizers`` pipeline needs.

    Attributes:
        pieces: the V pieces; a piece's id is its position.
        model_type: ``UNIGRAM`` (1) or ``BPE`` (2) (``WORD``/``CHAR`` are refused on reading).
        unk_id: id of the unknown piece.
        unk_piece: its string.
        byte_fallback: the model spells unknown characters as byte pieces (the converted fast
            tokenizers do not; they give the unknown piece, as transformers does).
        precompiled_charsmap: the normaliser's compiled rules (e.g. ``nmt_nfkc``), possibly
            empty.
    """

    pieces: tuple[SpmPiece, ...]
    model_type: int = UNIGRAM
    unk_id: int = 0
    unk_piece: str = "<unk>"
    byte_fallback: bool = False
    precompiled_charsmap: bytes = b""

    @property
    def model_type_name(self) -> str:
        """``"unigram"`` or ``"bpe"``."""
        return _MODEL_TYPE_NAMES[self.model_type]


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """A base-128 varint at ``pos``: (value, next position). Raises ValueError when cut off."""
    value = shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("a varint runs past the end of the data")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise ValueError("a varint is longer than 10 bytes")


def _fields(data: bytes) -> dict[int, list[Any]]:
    """Decode one protobuf message (wire format: a sequence of ``key = field << 3 | wire
    type`` and values) into field number -> values in order: ints for varints, ``bytes`` for
    length-delimited fields, little-endian 4/8-byte ``bytes`` for fixed32/fixed64.

    Raises:
        ValueError: a malformed key, a value that runs past the end, or a group (wire types
            3/4, which ``ModelProto`` never uses).
    """
    out: dict[int, list[Any]] = {}
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise ValueError(f"field number 0 at byte {pos}")
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 2:
            size, pos = _varint(data, pos)
            if pos + size > len(data):
                raise ValueError(f"field {number} claims {size} bytes; only {len(data) - pos} left")
            value, pos = data[pos : pos + size], pos + size
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            if pos + size > len(data):
                raise ValueError(f"field {number} is cut off")
            value, pos = data[pos : pos + size], pos + size
        else:
            raise ValueError(f"unsupported wire type {wire} for field {number}")
        out.setdefault(number, []).append(value)
    return out


def _last(fields: Mapping[int, list[Any]], number: int, default: Any) -> Any:
    values = fields.get(number)
    return values[-1] if values else default  # protobuf: the last occurrence wins


def _int32(value: int) -> int:
    """A varint holding an int32 (negative values are sign-extended to 64 bits)."""
    return value - (1 << 64) if value >= 1 << 63 else value


def _text(value: Any, what: str) -> str:
    if not isinstance(value, bytes):
        raise ValueError(f"{what} is not a string")
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{what} is not UTF-8: {e}") from None


def read_model(path: str | Path) -> SpmModel:
    """Read a SentencePiece ``.model`` file (a serialised ``ModelProto``).

    Field numbers from sentencepiece's ``sentencepiece_model.proto``: ``ModelProto``
    1 pieces, 2 trainer_spec, 3 normalizer_spec; ``SentencePiece`` 1 piece, 2 score (float),
    3 type (default ``NORMAL``); ``TrainerSpec`` 3 model_type (default ``UNIGRAM``),
    35 byte_fallback, 40 unk_id (default 0), 45 unk_piece (default ``"<unk>"``);
    ``NormalizerSpec`` 2 precompiled_charsmap.

    Raises:
        OSError: the file cannot be read.
        ValueError: not a SentencePiece model (malformed protobuf, no pieces, an empty or
            repeated piece, an unknown id outside the vocabulary), or a ``WORD``/``CHAR``
            model (the message says which).
    """
    data = Path(path).read_bytes()
    if not data:
        raise ValueError("the file is empty")
    top = _fields(data)
    pieces = []
    for index, raw in enumerate(top.get(1, [])):
        if not isinstance(raw, bytes):
            raise ValueError(f"piece {index} is not a message")
        entry = _fields(raw)
        piece = _text(_last(entry, 1, b""), f"piece {index}")
        score_bytes = _last(entry, 2, b"\0\0\0\0")
        if not isinstance(score_bytes, bytes) or len(score_bytes) != 4:
            raise ValueError(f"the score of piece {index} is not a float")
        kind = _last(entry, 3, NORMAL)
        if not piece or not isinstance(kind, int) or not NORMAL <= kind <= BYTE:
            raise ValueError(f"piece {index} ({piece!r}) is empty or has an unknown type {kind!r}")
        pieces.append(SpmPiece(piece, struct.unpack("<f", score_bytes)[0], kind))
    if not pieces:
        raise ValueError("no pieces (not a SentencePiece model)")
    seen: dict[str, int] = {}
    for index, p in enumerate(pieces):
        if p.piece in seen:
            raise ValueError(f"piece {p.piece!r} appears twice (ids {seen[p.piece]} and {index})")
        seen[p.piece] = index

    trainer = _fields(_last(top, 2, b""))
    normalizer = _fields(_last(top, 3, b""))
    model_type = _last(trainer, 3, UNIGRAM)
    if model_type not in (UNIGRAM, BPE):
        name = _MODEL_TYPE_NAMES.get(model_type, str(model_type))
        raise ValueError(f"a {name!r} model; only unigram and bpe models are supported")
    unk_id = _int32(_last(trainer, 40, 0))
    if not 0 <= unk_id < len(pieces):
        raise ValueError(f"unk_id {unk_id} is outside the {len(pieces)} pieces")
    charsmap = _last(normalizer, 2, b"")
    if not isinstance(charsmap, bytes):
        raise ValueError("precompiled_charsmap is not bytes")
    return SpmModel(
        pieces=tuple(pieces),
        model_type=model_type,
        unk_id=unk_id,
        unk_piece=_text(_last(trainer, 45, b"<unk>"), "unk_piece"),
        byte_fallback=bool(_last(trainer, 35, 0)),
        precompiled_charsmap=charsmap,
    )


# --------------------------------------------------------------------------- the families


@dataclass(frozen=True)
class SpmFamily:
    """How one family turns its SentencePiece file into a tokenizer (data only).

    Attributes:
        file: the model file's name in a checkpoint directory.
        head: (token, score) entries placed before the pieces (fairseq's dictionary).
        skip: leading pieces dropped (the head replaces them).
        tail: tokens appended after the pieces (score 0).
        unk_id: the unknown token's id in the laid-out vocabulary; ``None``: the model's own.
        number_comma_penalty: lower the score of pieces ending in ``<digit>,`` (ALBERT).
        normalizer: the normaliser's steps, in order (see `_normalizer_steps`).
        options: the ``tokenizer_config.json`` booleans the family honours, with defaults.
        split_by_punct: isolate punctuation before the Metaspace split when the option
            ``split_by_punct`` is on (DeBERTa-v2).
        specials: role -> default token string.
        pair_template: ``"segments"`` (``[CLS] A [SEP] B [SEP]``, B has token type 1) or
            ``"doubled_sep"`` (``<s> A </s> </s> B </s>``, all token type 0).
        token_type_ids: whether encodings carry token_type_ids when no ``config.json`` says.
    """

    file: str
    normalizer: tuple[str, ...]
    specials: Mapping[str, str]
    pair_template: str
    token_type_ids: bool
    head: tuple[tuple[str, float], ...] = ()
    skip: int = 0
    tail: tuple[str, ...] = ()
    unk_id: int | None = None
    number_comma_penalty: bool = False
    options: Mapping[str, bool] = field(default_factory=dict)
    split_by_punct: bool = False


_BERT_ROLES = {"cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"}
_FAIRSEQ_ROLES = {"cls": "<s>", "sep": "</s>", "pad": "<pad>", "mask": "<mask>", "unk": "<unk>"}
_FAIRSEQ_NORMALIZER = ("precompiled", "strip_right", "spaces_to_metaspace")

# Keys: `tokenization._family` names (tokenizer_class without Tokenizer/Fast, else model_type;
# lower case, no "-"/"_").
FAMILIES: dict[str, SpmFamily] = {
    # google-research/albert: spiece.model, <pad>=0 <unk>=1 [CLS]=2 [SEP]=3 [MASK]=4.
    "albert": SpmFamily(
        file="spiece.model",
        normalizer=("latex_quotes", "strip_accents", "lowercase", "precompiled", "spaces"),
        options={"do_lower_case": True, "keep_accents": False},
        number_comma_penalty=True,
        specials={**_BERT_ROLES, "pad": "<pad>", "unk": "<unk>"},
        pair_template="segments",
        token_type_ids=True,
    ),
    # microsoft/deberta-v3-*: spm.model, [PAD]=0 [CLS]=1 [SEP]=2 [UNK]=3.
    "debertav2": SpmFamily(
        file="spm.model",
        normalizer=("lowercase", "strip", "precompiled", "spaces"),
        options={"do_lower_case": False, "split_by_punct": False},
        split_by_punct=True,
        specials={**_BERT_ROLES, "pad": "[PAD]", "unk": "[UNK]"},
        pair_template="segments",
        token_type_ids=True,
    ),
    # fairseq's dictionary over the SentencePiece model: <s>=0 <pad>=1 </s>=2 <unk>=3, piece
    # i >= 3 at i + 1, <mask> last (XLM-R, Conneau et al. 2020).
    "xlmroberta": SpmFamily(
        file="sentencepiece.bpe.model",
        head=(("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)),
        skip=3,
        tail=("<mask>",),
        unk_id=3,
        normalizer=_FAIRSEQ_NORMALIZER,
        specials=_FAIRSEQ_ROLES,
        pair_template="doubled_sep",
        token_type_ids=False,
    ),
    # CamemBERT's fairseq dictionary: four placeholders, a never-chosen <unk>NOTUSED, then the
    # pieces from id 1 on at i + 4, <mask> last.
    "camembert": SpmFamily(
        file="sentencepiece.bpe.model",
        head=(
            ("<s>NOTUSED", 0.0),
            ("<pad>", 0.0),
            ("</s>NOTUSED", 0.0),
            ("<unk>", 0.0),
            ("<unk>NOTUSED", -100.0),
        ),
        skip=1,
        tail=("<mask>",),
        unk_id=3,
        normalizer=_FAIRSEQ_NORMALIZER,
        specials=_FAIRSEQ_ROLES,
        pair_template="doubled_sep",
        token_type_ids=False,
    ),
}

# The family of a directory that names none, by the model file it holds.
FILE_FAMILIES = {
    "spiece.model": "albert",
    "spm.model": "debertav2",
    "sentencepiece.bpe.model": "xlmroberta",
}


def _normalizer_steps(
    step: str, options: Mapping[str, bool], charsmap: bytes
) -> list[normalizers.Normalizer]:
    """The ``tokenizers`` normalisers of one named step (empty when an option turns it off)."""
    if step == "latex_quotes":  # ``x'' -> "x" (ALBERT's preprocess_text)
        return [normalizers.Replace("``", '"'), normalizers.Replace("''", '"')]
    if step == "strip_accents":
        return [] if options["keep_accents"] else [normalizers.NFKD(), normalizers.StripAccents()]
    if step == "lowercase":
        return [normalizers.Lowercase()] if options["do_lower_case"] else []
    if step == "precompiled":
        return [normalizers.Precompiled(charsmap)] if charsmap else []
    if step == "strip":
        return [normalizers.Strip(left=True, right=True)]
    if step == "strip_right":
        return [normalizers.Strip(left=False, right=True)]
    if step == "spaces":
        return [normalizers.Replace(Regex(" {2,}"), " ")]
    if step == "spaces_to_metaspace":
        return [normalizers.Replace(Regex(" {2,}"), METASPACE)]
    raise ValueError(f"unknown normalizer step {step!r}")


def _ends_in_number_comma(piece: str) -> bool:
    """A piece such as ``"1,"`` or ``"▁20,"``: ALBERT never emits it whole."""
    return len(piece) >= 2 and piece[-1] == "," and piece[-2].isdigit()


def _vocabulary(model: SpmModel, family: SpmFamily) -> list[tuple[str, float]]:
    """The family's (token, score) list: ``head``, the pieces from ``skip`` on, ``tail``."""
    scores = [
        (p.piece, p.score - _NUMBER_COMMA_PENALTY)
        if family.number_comma_penalty and _ends_in_number_comma(p.piece)
        else (p.piece, p.score)
        for p in model.pieces[family.skip :]
    ]
    return [*family.head, *scores, *((t, 0.0) for t in family.tail)]


def _bpe_merges(model: SpmModel, vocab: list[tuple[str, float]]) -> list[tuple[str, str]]:
    """BPE merges from piece scores, as transformers derives them for a SentencePiece BPE
    model: every split of a vocabulary entry into two pieces of the model is a merge ranked by
    the entry's score (highest first), then by the longer left part, then the longer right
    part; ties keep the vocabulary's order, and within one entry the order of the parts' ids.
    (A SentencePiece BPE model stores no merge list: a piece's score is minus its merge
    step, so the score order is the merge order.)"""
    piece_ids = {p.piece: i for i, p in enumerate(model.pieces)}
    candidates = []
    for token, score in dict(vocab).items():  # a repeated token keeps its last score
        splits = [
            (token[:k], token[k:]) for k in range(1, len(token))
            if token[:k] in piece_ids and token[k:] in piece_ids
        ]  # fmt: skip
        splits.sort(key=lambda lr: (piece_ids[lr[0]], piece_ids[lr[1]]))
        candidates += [(score, len(left), len(right), left, right) for left, right in splits]
    # highest key first; sorted() is stable with reverse=True, so ties keep candidate order
    ranked = sorted(candidates, key=lambda c: c[:3], reverse=True)
    return [(left, right) for *_, left, right in ranked]


def build_backend(
    model: SpmModel, family: SpmFamily, options: Mapping[str, bool]
) -> tokenizers.Tokenizer:
    """The family's ``tokenizers`` pipeline over a SentencePiece model, without role tokens
    and post-processor (the caller adds those).

    Model: ``Unigram`` over the laid-out (token, score) list, or ``BPE`` over its ids with
    merges from the scores (`_bpe_merges`); unknown characters give the unknown token (no byte
    fallback, as transformers' converted tokenizers). Normaliser: the family's steps.
    Pre-tokeniser: ``Metaspace`` (spaces become ``▁``, one is prepended to every text;
    DeBERTa-v2 with ``split_by_punct`` isolates punctuation first). The model's control and
    user-defined pieces become added tokens matched on the raw text (control ones special), in
    id order.

    Args:
        model: the model file's contents (`read_model`).
        family: a row of `FAMILIES`.
        options: a value for every key of ``family.options``.

    Raises:
        ValueError: a BPE merge whose parts are not in the vocabulary (the ``tokenizers``
            library's message).
    """
    vocab = _vocabulary(model, family)
    unk_id = model.unk_id if family.unk_id is None else family.unk_id
    if model.byte_fallback:
        logger.warning(
            "this SentencePiece model uses byte fallback; like transformers' converted "
            "tokenizer, unknown characters give the unknown token instead of byte pieces"
        )
    if model.model_type == UNIGRAM:
        backend = tokenizers.Tokenizer(models.Unigram(vocab, unk_id=unk_id, byte_fallback=False))
    else:
        ids = {token: i for i, (token, _) in enumerate(vocab)}
        try:
            bpe = models.BPE(
                ids,
                _bpe_merges(model, vocab),
                unk_token=vocab[unk_id][0],
                fuse_unk=True,
                byte_fallback=False,
            )
        except Exception as e:  # the library raises a bare Exception
            raise ValueError(f"the BPE pieces do not form a merge table: {e}") from None
        backend = tokenizers.Tokenizer(bpe)

    steps = [n for step in family.normalizer for n in _normalizer_steps(
        step, options, model.precompiled_charsmap
    )]  # fmt: skip
    backend.normalizer = normalizers.Sequence(steps)
    metaspace = pre_tokenizers.Metaspace(replacement=METASPACE, prepend_scheme="always")
    if family.split_by_punct and options.get("split_by_punct"):
        backend.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Punctuation(behavior="isolated"), metaspace]
        )
    else:
        backend.pre_tokenizer = metaspace
    backend.decoder = decoders.Metaspace(replacement=METASPACE, prepend_scheme="always")
    backend.add_tokens(
        [
            AddedToken(p.piece, normalized=False, special=p.type == CONTROL)
            for p in model.pieces
            if p.type in (CONTROL, USER_DEFINED)
        ]
    )
    return backend


def post_processor(
    family: SpmFamily, cls: tuple[str, int], sep: tuple[str, int]
) -> processors.TemplateProcessing:
    """The family's special-token layout: ``segments`` gives ``CLS A SEP`` and
    ``CLS A SEP B SEP`` (B and its SEP token type 1); ``doubled_sep`` gives ``CLS A SEP`` and
    ``CLS A SEP SEP B SEP`` (all type 0, fairseq's sentence-pair layout).

    Args:
        family: a row of `FAMILIES`.
        cls: (token, id) of the first token.
        sep: (token, id) of the separator.
    """
    c, s = cls[0], sep[0]
    if family.pair_template == "segments":
        single, pair = f"{c}:0 $A:0 {s}:0", f"{c}:0 $A:0 {s}:0 $B:1 {s}:1"
    else:
        single, pair = f"{c}:0 $A:0 {s}:0", f"{c}:0 $A:0 {s}:0 {s}:0 $B:0 {s}:0"
    return processors.TemplateProcessing(
        single=single, pair=pair, special_tokens=[cls, sep] if c != s else [cls]
    )
