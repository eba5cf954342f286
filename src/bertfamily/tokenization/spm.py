"""SentencePiece model files (``spiece.model``, ``spm.model``, ``sentencepiece.bpe.model``) as
``tokenizers`` pipelines, equal to the fast tokenizers that transformers converts from them.

A SentencePiece ``.model`` file is one serialised ``ModelProto`` (sentencepiece's
``src/sentencepiece_model.proto``): the pieces with their scores and types, the trainer's
settings (model type, unknown piece) and the normaliser's precompiled character map. It is read
with sentencepiece's own schema (`read_model`); the tokenisation itself is the ``tokenizers``
library's ``Unigram`` or ``BPE`` model.

Each supported family is one `SpmFamily` row of `FAMILIES` (data only): its file name, how its
vocabulary is laid out over the SentencePiece pieces, its normaliser steps, the
``tokenizer_config.json`` options it honours, its role tokens and its post-processor. Every row
follows transformers' ``convert_slow_tokenizer.py`` (``AlbertConverter``,
``DebertaV2Converter``, ``XLMRobertaConverter``, ``CamembertConverter``), whose output is what
the released ``tokenizer.json`` files of these checkpoints hold.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import tokenizers
from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers, processors

from ..errors import InputError

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


def read_model(path: str | Path) -> SpmModel:
    """Read a SentencePiece ``.model`` file (a serialised ``ModelProto``) with sentencepiece's
    own protobuf schema (``sentencepiece.sentencepiece_model_pb2``).

    Raises:
        OSError: the file cannot be read.
        ValueError: not a SentencePiece model (malformed protobuf, no pieces, an empty or
            repeated piece, an unknown id outside the vocabulary), or a ``WORD``/``CHAR``
            model (the message says which).
    """
    from google.protobuf.message import DecodeError
    from sentencepiece import sentencepiece_model_pb2

    data = Path(path).read_bytes()
    if not data:
        raise InputError("the file is empty")
    proto = sentencepiece_model_pb2.ModelProto()
    try:
        proto.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as e:  # RuntimeError: the upb backend
        raise InputError(f"not a SentencePiece model (malformed protobuf: {e})") from None
    pieces = []
    for index, entry in enumerate(proto.pieces):
        if not entry.piece or not NORMAL <= entry.type <= BYTE:
            raise InputError(
                f"piece {index} ({entry.piece!r}) is empty or has an unknown type {entry.type!r}"
            )
        pieces.append(SpmPiece(entry.piece, float(entry.score), int(entry.type)))
    if not pieces:
        raise InputError("no pieces (not a SentencePiece model)")
    seen: dict[str, int] = {}
    for index, p in enumerate(pieces):
        if p.piece in seen:
            raise InputError(f"piece {p.piece!r} appears twice (ids {seen[p.piece]} and {index})")
        seen[p.piece] = index
    trainer = proto.trainer_spec
    model_type = int(trainer.model_type)
    if model_type not in (UNIGRAM, BPE):
        name = _MODEL_TYPE_NAMES.get(model_type, str(model_type))
        raise InputError(f"a {name!r} model; only unigram and bpe models are supported")
    unk_id = int(trainer.unk_id)
    if not 0 <= unk_id < len(pieces):
        raise InputError(f"unk_id {unk_id} is outside the {len(pieces)} pieces")
    return SpmModel(
        pieces=tuple(pieces),
        model_type=model_type,
        unk_id=unk_id,
        unk_piece=trainer.unk_piece,
        byte_fallback=bool(trainer.byte_fallback),
        precompiled_charsmap=bytes(proto.normalizer_spec.precompiled_charsmap),
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
        # "strip" last: sentencepiece's remove_extra_whitespaces drops whitespace at both ends
        # after its charsmap (a trailing tab or space is no extra "▁" piece)
        normalizer=("latex_quotes", "strip_accents", "lowercase", "precompiled", "spaces", "strip"),
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
    raise InputError(f"unknown normalizer step {step!r}")


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
            raise InputError(f"the BPE pieces do not form a merge table: {e}") from None
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
