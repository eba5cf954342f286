"""Tokenizers for local Hugging Face model directories, built on the ``tokenizers`` library only.

``load_tokenizer(path)`` reads, in order of preference:

1. ``tokenizer.json`` (any model the ``tokenizers`` library can serialise);
2. a SentencePiece model: ``spiece.model`` (ALBERT), ``spm.model`` (DeBERTa-v2/v3) or
   ``sentencepiece.bpe.model`` (XLM-RoBERTa, CamemBERT), rebuilt as transformers' converted
   fast tokenizer of the family (`spm`);
3. ``vocab.txt``: BERT-style WordPiece, rebuilt from ``tokenizers`` components;
4. ``vocab.json`` + ``merges.txt``: RoBERTa-style byte-level BPE, rebuilt likewise.

Special tokens, ``model_max_length`` and the normaliser options come from
``special_tokens_map.json`` / ``tokenizer_config.json``; whether ``token_type_ids`` are
returned comes from the model's ``config.json``. The result, ``Tokenizer``, encodes batches into
right-padded int64 arrays and writes itself back in a form that ``transformers.AutoTokenizer``
loads with identical ids.

Shapes: B batch, T sequence length (after truncation and padding).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import tokenizers
from tokenizers import AddedToken, models

from ..errors import ArgumentTypeError, InputError, TokenizerFileError, TokenizerNotFoundError
from ..files import atomic_directory, write_text_atomic
from ..resources.resolve import resolve_model
from . import spm
from .call_options import (
    _UNSUPPORTED_HF_ARGUMENTS,
    Padding,
    ReturnTensors,
    Truncation,
    _call_strategy,
    _int_list,
    _to_tensors,
    _windows,
)
from .cutting import (
    prefix_at_whitespace,
    remap_offsets,
    scan_cut,
    tighten,
    truncation_problem,
    unreadable_input,
)
from .hf_files import (  # noqa: F401  (file names: public constants of this module too)
    _ABSURD_MAX_LENGTH,
    _BPE_DEFAULTS,
    _HF_PASSTHROUGH,
    _NO_SEGMENT_MODEL_TYPES,
    _SPM_FILES,
    _WORDPIECE_DEFAULTS,
    BPE_MERGES_FILE,
    BPE_VOCAB_FILE,
    MODEL_CONFIG_FILE,
    ROLES,
    SPECIAL_TOKENS_MAP_FILE,
    TOKENIZER_CONFIG_FILE,
    TOKENIZER_FILE,
    WORDPIECE_VOCAB_FILE,
    _add_tokens,
    _added_tokens_decoder,
    _as_added_token,
    _build_byte_level_bpe,
    _build_sentencepiece,
    _build_wordpiece,
    _family,
    _mask_lstrip,
    _model_uses_token_types,
    _read_json,
    _read_wordpiece_vocab,
    _refuse_sentencepiece,
    _resolve_specials,
    _sane_max_length,
    _sentencepiece_source,
    _specials_from,
    _token_from_dict,
    _token_to_json,
    _tokenizer_json_added,
    check_pipeline_bounds,
)
from .jieba_words import install_jieba, serialised_without_jieba

__all__ = [
    "Tokenizer",
    "TokenizerFileError",
    "TokenizerNotFoundError",
    "load_tokenizer",
    "tokenizer_from_directory",
]

logger = logging.getLogger(__name__)

# Truncating a long text: it is first cut by characters, so that time and memory per input
# are bounded by the length limit, not by the text (a 10 MB line would otherwise be tokenised
# whole, then truncated). The cut keeps ``limit * CHARS_PER_TOKEN`` characters, ending at a
# whitespace so no word is split; if that prefix has fewer than ``limit`` tokens (a run of
# spaces, a hex blob, DNA), the text is read on window by window and only the windows that give
# tokens are kept (`cutting.scan_cut`), up to ``limit * MAX_CHARS_PER_TOKEN`` characters kept.
# The tokens kept are those of tokenising the whole text and truncating it.
CHARS_PER_TOKEN = 64


# --------------------------------------------------------------------------- the wrapper


class Tokenizer:
    """A thin wrapper around a ``tokenizers.Tokenizer`` (``.backend``) for encoder models.

    The wrapper owns the backend's truncation and padding state: it clears both on
    construction and sets truncation only for the duration of one call, under a lock, so
    nothing leaks between calls. Padding is done here, in numpy.

    Args:
        backend: the ``tokenizers.Tokenizer`` (normaliser, pre-tokeniser, model,
            post-processor that adds the special tokens, decoder).
        special_tokens: role (``"cls"``, ``"sep"``, ``"pad"``, ``"mask"``, ``"unk"``) -> token
            string or ``AddedToken``. Missing roles get the scheme's defaults
            (``[CLS]``... for WordPiece and others, ``<s>``... for BPE).
        model_max_length: the longest input the model accepts (in tokens, special tokens
            included), or ``None`` for no limit.
        return_token_type_ids: whether ``__call__`` returns ``token_type_ids``. ``None``:
            only for WordPiece models.
        hf_config: extra ``tokenizer_config.json`` fields that ``save_pretrained`` writes so
            that ``transformers`` rebuilds the same tokenizer (``tokenizer_class``,
            ``do_lower_case``, ``add_prefix_space``...).
        jieba: pre-tokenise with jieba words, as transformers' RoFormerTokenizer does
            (`jieba_words`; ``hf_config`` then names that class).
    """

    def __init__(
        self,
        backend: tokenizers.Tokenizer,
        *,
        special_tokens: Mapping[str, str | AddedToken] | None = None,
        model_max_length: int | None = None,
        return_token_type_ids: bool | None = None,
        hf_config: Mapping[str, Any] | None = None,
        jieba: bool = False,
    ) -> None:
        self.backend = backend
        self.jieba = jieba
        if jieba:
            install_jieba(backend)
        self.backend.no_truncation()
        self.backend.no_padding()
        self._lock = threading.Lock()

        defaults = _BPE_DEFAULTS if self.scheme == "bpe" else _WORDPIECE_DEFAULTS
        given = dict(special_tokens or {})
        unknown = set(given) - set(ROLES)
        if unknown:
            raise InputError(f"unknown special-token roles {sorted(unknown)}; known: {ROLES}")
        self._special: dict[str, AddedToken] = {
            role: _as_added_token(given.get(role, defaults[role])) for role in ROLES
        }
        self._model_max_length = _sane_max_length(model_max_length)
        self._has_token_type_ids = (
            self.scheme == "wordpiece" if return_token_type_ids is None else return_token_type_ids
        )
        self.hf_config = dict(hf_config or {})
        if jieba:
            self.hf_config["tokenizer_class"] = "RoFormerTokenizer"

    @classmethod
    def from_pretrained(
        cls, path: str | os.PathLike[str], *, return_token_type_ids: bool | None = None
    ) -> Tokenizer:
        """Same as ``load_tokenizer(path, ...)``."""
        return load_tokenizer(path, return_token_type_ids=return_token_type_ids)

    def __repr__(self) -> str:
        return (
            f"Tokenizer(scheme={self.scheme!r}, vocab_size={self.vocab_size}, "
            f"model_max_length={self.model_max_length}, "
            f"has_token_type_ids={self.has_token_type_ids})"
        )

    def __len__(self) -> int:
        return self.vocab_size

    # ------------------------------------------------------------------ properties

    @property
    def scheme(self) -> str:
        """``"wordpiece"``, ``"bpe"``, ``"unigram"`` or ``"wordlevel"``: the backend's model."""
        return type(self.backend.model).__name__.lower()

    @property
    def vocab_size(self) -> int:
        """Number of ids the tokenizer can produce, added tokens included."""
        return self.backend.get_vocab_size(with_added_tokens=True)

    @property
    def model_max_length(self) -> int | None:
        """Longest input in tokens the model takes, or None when not known."""
        return self._model_max_length

    @property
    def has_token_type_ids(self) -> bool:
        """Whether encodings include token_type_ids (segment ids)."""
        return self._has_token_type_ids

    @property
    def special_tokens(self) -> dict[str, str]:
        """Role -> token string."""
        return {role: tok.content for role, tok in self._special.items()}

    def _role_id(self, role: str) -> int | None:
        return self.backend.token_to_id(self._special[role].content)

    @property
    def cls_token(self) -> str:
        """The token string of the ``cls`` role."""
        return self._special["cls"].content

    @property
    def sep_token(self) -> str:
        """The token string of the ``sep`` role."""
        return self._special["sep"].content

    @property
    def pad_token(self) -> str:
        """The token string of the ``pad`` role."""
        return self._special["pad"].content

    @property
    def mask_token(self) -> str:
        """The token string of the ``mask`` role."""
        return self._special["mask"].content

    @property
    def unk_token(self) -> str:
        """The token string of the ``unk`` role."""
        return self._special["unk"].content

    @property
    def cls_token_id(self) -> int | None:
        """Id of the ``cls`` token, or None when it is not in the vocabulary."""
        return self._role_id("cls")

    @property
    def sep_token_id(self) -> int | None:
        """Id of the ``sep`` token, or None when it is not in the vocabulary."""
        return self._role_id("sep")

    @property
    def pad_token_id(self) -> int | None:
        """Id of the ``pad`` token, or None when it is not in the vocabulary."""
        return self._role_id("pad")

    @property
    def mask_token_id(self) -> int | None:
        """Id of the ``mask`` token, or None when it is not in the vocabulary."""
        return self._role_id("mask")

    @property
    def unk_token_id(self) -> int | None:
        """Id of the ``unk`` token, or None when it is not in the vocabulary."""
        return self._role_id("unk")

    @property
    def all_special_ids(self) -> list[int]:
        """Ids of the role tokens that exist in the vocabulary, in role order, no repeats."""
        ids = (self._role_id(role) for role in ROLES)
        return list(dict.fromkeys(i for i in ids if i is not None))

    # ------------------------------------------------------------------ encoding

    @contextmanager
    def _truncation(
        self, max_length: int | None, strategy: str = "longest_first", stride: int = 0, side="right"
    ) -> Iterator[None]:
        """Set truncation on the backend for one call, then restore it."""
        with self._lock:
            previous = self.backend.truncation
            if max_length is None:
                self.backend.no_truncation()
            else:
                self.backend.enable_truncation(
                    max_length, stride=stride, strategy=strategy, direction=side
                )
            try:
                yield
            finally:
                if previous is None:
                    self.backend.no_truncation()
                else:
                    self.backend.enable_truncation(**previous)

    def __call__(
        self,
        text: str | Sequence[str],
        text_pair: str | Sequence[str] | None = None,
        *,
        add_special_tokens: bool = True,
        max_length: int | None = None,
        truncation: Truncation = True,
        stride: int = 0,
        padding: Padding = True,
        return_tensors: ReturnTensors = "pt",
        return_token_type_ids: bool | None = None,
        return_attention_mask: bool = True,
        return_offsets_mapping: bool = False,
        return_overflowing_tokens: bool = False,
        return_special_tokens_mask: bool = False,
        return_length: bool = False,
        return_offsets: bool = False,
        return_truncated: bool = False,
        truncation_side: str = "right",
        **unsupported: Any,
    ) -> dict[str, Any]:
        """Encode a batch of texts (or text pairs), with transformers' argument names and
        results (equal to a fast ``transformers`` tokenizer on the same directory).

        With truncation on and no overflowing windows asked for, a text longer than
        ``max_length * CHARS_PER_TOKEN`` characters is cut by characters (at a whitespace)
        before it is tokenised, so time and memory per input are bounded by ``max_length``;
        the tokens kept are those of the whole text (after a token-poor stretch, such as a run
        of spaces or a hex blob, the text is read on window by window, keeping only what
        gives tokens; offsets still point into the text given). Only the segments the
        strategy may cut are cut.

        Args:
            text: one string or a list of B strings.
            text_pair: ``None``, or as many second segments as ``text`` (joined after it by
                the special tokens, token type 1).
            add_special_tokens: add ``[CLS]``/``[SEP]`` (``<s>``/``</s>``).
            max_length: the length limit in tokens, special tokens included; defaults to
                ``model_max_length``. Used for truncation and for ``padding="max_length"``.
            truncation: ``True``/``"longest_first"``: cut the longer segment token by token;
                ``"only_first"``/``"only_second"``: cut only that segment (a ``ValueError``
                when that is not enough); ``False``/``"do_not_truncate"``: no cut. No
                truncation when ``max_length`` and ``model_max_length`` are both ``None``.
            stride: with ``return_overflowing_tokens``, tokens shared by consecutive windows.
            padding: ``True``/``"longest"``: right-pad to the longest row of the batch;
                ``"max_length"``: each row to ``max_length`` (rows already longer are kept as
                they are: tensors then need truncation);
                ``False``/``"do_not_pad"``: no padding (tensors then need equal lengths).
            return_tensors: ``"pt"`` (torch), ``"np"`` (numpy) or ``None`` (lists).
            return_token_type_ids: return ``token_type_ids``; ``None``: iff
                ``has_token_type_ids``.
            return_attention_mask: return ``attention_mask``.
            return_offsets_mapping (alias ``return_offsets``): also return ``offset_mapping``.
            return_overflowing_tokens: return every window of a truncated input as a row of its
                own (consecutive windows share ``stride`` tokens), and
                ``overflow_to_sample_mapping`` (rows,): the input each row comes from.
            return_special_tokens_mask: also return ``special_tokens_mask``.
            return_length: also return ``length`` (rows,): tokens per row, padding included
                (as transformers counts).
            return_truncated: also return ``truncated`` (rows,).
            truncation_side: ``"right"`` cuts a segment's end, ``"left"`` its start (no
                character pre-cut then; TEI's ``truncation_direction``).

        Returns:
            A dict with, for R rows (B, or more with overflowing windows),
            ``input_ids`` (R, T) int64;
            ``token_type_ids`` (R, T) int64, segment 0/1, if asked (see above);
            ``attention_mask`` (R, T) int64, 1 = real token, 0 = padding;
            ``offset_mapping`` (R, T, 2) int64 if asked: [start, end) character offsets into
            the string the token came from (``text`` or ``text_pair``), (0, 0) for special
            and padding tokens;
            ``special_tokens_mask`` (R, T) int64 if asked: 1 = special or padding token;
            ``overflow_to_sample_mapping`` (R,) if asked;
            ``length`` (R,) if asked;
            ``truncated`` (R,) int64 if asked: 1 = the row's input was longer than
            ``max_length`` and was cut.
            Always batched, also for a single string.

        Raises:
            ValueError: empty batch, ``text``/``text_pair`` lengths differ, unknown
                ``padding``/``truncation``/``return_tensors``, ``"only_second"`` on a single
                text that must be cut, a truncation the strategy cannot make (the segment it
                may cut is too short, or ``stride`` is not below the room left for it), a
                negative ``stride``,
                ``padding="max_length"`` without a length, padding needed but no pad token,
                or unequal lengths with tensors asked for.
            TypeError: an argument this tokenizer does not take (a misspelling, or one of
                transformers' that it does not support, such as ``is_split_into_words``).
        """
        inputs = self._batch_inputs(text, text_pair, unsupported)
        strategy = _call_strategy(padding, return_tensors, truncation, truncation_side, stride)
        return_offsets_mapping = return_offsets_mapping or return_offsets
        if return_token_type_ids is None:
            return_token_type_ids = self.has_token_type_ids

        if max_length is not None:  # checked here: the Rust side would index or overflow
            if (
                isinstance(max_length, bool)
                or not hasattr(max_length, "__index__")
                or (max_length < 0)
            ):
                raise InputError(f"max_length must be None or an integer >= 0, got {max_length!r}")
            max_length = min(int(max_length), _ABSURD_MAX_LENGTH)  # longer than any input: no cut
        limit = max_length if max_length is not None else self.model_max_length
        if limit is None:
            strategy = None
        cut, remaps = [False] * len(inputs), {}
        if strategy is not None and not return_overflowing_tokens and truncation_side == "right":
            with self._truncation(None):
                inputs, cut, remaps = self._cut_long_inputs(inputs, limit, strategy)
        encodings = self._encode(
            inputs, limit, strategy, stride, add_special_tokens, truncation_side
        )
        rows, sample, truncated = _windows(encodings, cut, return_overflowing_tokens, limit)

        fields: dict[str, list[list[Any]]] = {"input_ids": [e.ids for e in rows]}
        if return_token_type_ids:
            fields["token_type_ids"] = [e.type_ids for e in rows]
        if return_attention_mask:
            fields["attention_mask"] = [e.attention_mask for e in rows]
        if return_offsets_mapping:  # offsets in the texts given, also where a scan cut them
            fields["offset_mapping"] = [
                remap_offsets(e.offsets, e.sequence_ids, remaps[sample[k]])
                if sample[k] in remaps
                else [list(o) for o in e.offsets]
                for k, e in enumerate(rows)
            ]
        if return_special_tokens_mask:
            fields["special_tokens_mask"] = [e.special_tokens_mask for e in rows]

        fields, lengths = self._padded(fields, padding, limit, return_tensors)
        out = _to_tensors(fields, return_tensors)
        flat = {}
        if return_overflowing_tokens:
            flat["overflow_to_sample_mapping"] = sample
        if return_length:
            flat["length"] = lengths
        if return_truncated:
            flat["truncated"] = truncated
        for key, values in flat.items():
            out[key] = _to_tensors({key: [values]}, return_tensors)[key][0]
        return out

    @staticmethod
    def _batch_inputs(
        text: str | Sequence[str], text_pair: str | Sequence[str] | None, unsupported: dict
    ) -> list[Any]:
        """`__call__`'s inputs as a batch: B strings, or B (text, text_pair) tuples.

        Raises:
            TypeError: ``unsupported`` keyword arguments were given.
            ValueError: an empty batch, or ``text`` and ``text_pair`` of different lengths.
        """
        if unsupported:
            names = sorted(unsupported)
            known = [n for n in names if n in _UNSUPPORTED_HF_ARGUMENTS]
            raise ArgumentTypeError(
                f"Tokenizer.__call__() got unexpected keyword argument(s) {names}"
                + (f"; {known} (transformers) are not supported" if known else "")
            )
        texts = [text] if isinstance(text, str) else list(text)
        if not texts:
            raise InputError("cannot encode an empty batch")
        if text_pair is None:
            return texts
        pairs = [text_pair] if isinstance(text_pair, str) else list(text_pair)
        if len(pairs) != len(texts):
            raise InputError(f"got {len(texts)} texts but {len(pairs)} text pairs")
        return list(zip(texts, pairs))

    def _padded(
        self,
        fields: dict[str, list[list[Any]]],
        padding: Padding,
        limit: int | None,
        return_tensors: ReturnTensors,
    ) -> tuple[dict[str, list[list[Any]]], list[int]]:
        """``fields`` padded as ``padding`` asks, and the tokens per row (padding included,
        as transformers counts).

        Raises:
            ValueError: ``padding="max_length"`` without a length, or rows of unequal lengths
                with tensors asked for.
        """
        lengths = [len(ids) for ids in fields["input_ids"]]
        if padding in (True, "longest", "max_length"):
            target = max(lengths)
            if padding == "max_length":
                if limit is None:
                    raise InputError("padding='max_length' needs max_length or model_max_length")
                target = limit  # rows already longer are kept as they are, as in transformers
            fields = self._pad(fields, target)
            lengths = [max(n, target) for n in lengths]  # transformers: the padded length
        if return_tensors is not None and len(set(lengths)) > 1:
            raise InputError(
                f"sequences have different lengths {sorted(set(lengths))} after padding="
                f"{padding!r}; pass padding=True, truncation, or return_tensors=None"
            )
        return fields, lengths

    def _encode(
        self,
        inputs: list[Any],
        limit: int | None,
        strategy: str | None,
        stride: int,
        add_special_tokens: bool,
        direction: str = "right",
    ) -> list[tokenizers.Encoding]:
        """``encode_batch`` under one call's truncation; the backend's truncation errors
        become ValueErrors that give the numbers, and its TypeError for a text it cannot
        read (a lone surrogate: undecodable bytes of a command-line argument) an InputError
        naming the input (`unreadable_input`)."""
        try:
            return self._encode_batch(
                inputs, limit, strategy, stride, add_special_tokens, direction
            )
        except TypeError:
            problem = unreadable_input(inputs)
            if problem is None:
                raise
            raise InputError(problem) from None

    def _encode_batch(
        self,
        inputs: list[Any],
        limit: int | None,
        strategy: str | None,
        stride: int,
        add_special_tokens: bool,
        direction: str,
    ) -> list[tokenizers.Encoding]:
        if strategy is None:
            with self._truncation(None):
                return self.backend.encode_batch(inputs, add_special_tokens=add_special_tokens)
        special = (
            self.backend.post_processor.num_special_tokens_to_add(isinstance(inputs[0], tuple))
            if add_special_tokens and self.backend.post_processor is not None
            else 0
        )
        if limit <= special:
            raise InputError(
                f"max_length={limit} leaves no room for text after {special} special tokens"
            )
        try:
            with self._truncation(limit, strategy, stride, direction):
                return self.backend.encode_batch(inputs, add_special_tokens=add_special_tokens)
        except BaseException as e:  # a bare Exception, or a Rust panic (a stride too long)
            is_panic = type(e).__name__ == "PanicException"
            if not (isinstance(e, Exception) or is_panic) or not (
                "runcat" in str(e) or "stride" in str(e)
            ):
                raise
            with self._truncation(None):
                detail = truncation_problem(self.backend, inputs, limit, strategy, stride, special)
            raise InputError(
                f"cannot truncate to max_length={limit} with truncation={strategy!r}, "
                f"stride={stride}: {detail} ({e})"
            ) from None

    def _cut_long_inputs(
        self, inputs: list[Any], limit: int, strategy: str = "longest_first"
    ) -> tuple[list[Any], list[bool], dict[int, dict[int, list[tuple[int, ...]]]]]:
        """Cut every text (or pair segment that ``strategy`` may truncate) longer than
        ``limit * CHARS_PER_TOKEN`` characters to a prefix ending before a whitespace that
        still holds at least ``limit`` tokens; a text whose prefix holds fewer (a long run of
        spaces, a hex blob) is scanned on window by window (`cutting.scan_cut`), so the kept
        tokens are those of the whole text. Call with the backend's truncation off. Returns
        the inputs, per input whether tokens were cut, and the offset anchors of the scanned
        texts (input → segment → anchors, for `cutting.remap_offsets`)."""
        cuttable = {"longest_first": (0, 1), "only_first": (0,), "only_second": (1,)}[strategy]
        window = limit * CHARS_PER_TOKEN
        todo = []  # (input index, segment index or None, the whole text)
        for i, item in enumerate(inputs):
            if isinstance(item, str):
                segments = [(None, item)] if 0 in cuttable else []
            else:
                segments = [(j, t) for j, t in enumerate(item) if j in cuttable]
            todo += [(i, j, t) for j, t in segments if len(t) > window]
        out, cut, remaps = list(inputs), [False] * len(inputs), {}
        if not todo:
            return out, cut, remaps
        prefixes = [prefix_at_whitespace(t, window) for _, _, t in todo]
        encodings = self.backend.encode_batch(prefixes, add_special_tokens=False)
        for (i, j, text), prefix, enc in zip(todo, prefixes, encodings):
            if len(enc.ids) >= limit:
                new, anchors, was_cut = tighten(prefix, enc.offsets, limit), None, True
            else:  # token-poor: read on, window by window
                new, anchors, was_cut = scan_cut(
                    text, limit, window, self._encode_plain, self._drops_whitespace()
                )
                remaps.setdefault(i, {})[j or 0] = anchors
            out[i] = new if j is None else tuple(new if k == j else t for k, t in enumerate(out[i]))
            cut[i] = cut[i] or was_cut
        return out, cut, remaps

    def _encode_plain(self, text: str) -> tokenizers.Encoding:
        return self.backend.encode(text, add_special_tokens=False)

    def _drops_whitespace(self) -> bool:
        """Whether whitespace alone gives no token (BERT; not byte-level BPE)."""
        if getattr(self, "_ws_free", None) is None:
            self._ws_free = not self._encode_plain(" \t\n  \u3000").ids
        return self._ws_free

    def pad_rows(
        self, fields: dict[str, list[list[Any]]], target: int
    ) -> dict[str, list[list[Any]]]:
        """Right-pad every row of every field (``input_ids``, ``attention_mask``,
        ``token_type_ids``, ...; unpadded lists) to ``target`` tokens.

        Raises:
            InputError: padding is needed and the vocabulary has no pad token.
        """
        return self._pad(fields, target)

    def _pad(self, fields: dict[str, list[list[Any]]], target: int) -> dict[str, list[list[Any]]]:
        """Right-pad every row of every field to ``target`` tokens."""
        fill = {
            "input_ids": self.pad_token_id,
            "attention_mask": 0,
            "token_type_ids": 0,
            "offset_mapping": [0, 0],
            "special_tokens_mask": 1,
        }
        if fill["input_ids"] is None and any(len(r) < target for r in fields["input_ids"]):
            raise InputError(f"padding needed but pad token {self.pad_token!r} is not in the vocab")
        return {
            key: [row + [fill[key]] * (target - len(row)) for row in rows]
            for key, rows in fields.items()
        }

    def encode(
        self, text: str, text_pair: str | None = None, add_special_tokens: bool = True
    ) -> list[int]:
        """Ids of one text (or pair), untruncated."""
        with self._truncation(None):
            return self.backend.encode(text, text_pair, add_special_tokens=add_special_tokens).ids

    def decode(
        self, ids: Sequence[int] | np.ndarray | Any, skip_special_tokens: bool = True
    ) -> str:
        """Text of a 1-D id sequence (list, numpy array or torch tensor)."""
        return self.backend.decode(_int_list(ids), skip_special_tokens=skip_special_tokens)

    def tokenize(self, text: str) -> list[str]:
        """Token strings of ``text`` without special tokens."""
        return self.backend.encode(text, add_special_tokens=False).tokens

    def convert_ids_to_tokens(self, ids: int | Sequence[int]) -> str | None | list[str | None]:
        """Token string(s) for id(s); ``None`` for ids outside the vocabulary."""
        if hasattr(ids, "tolist"):  # numpy array or torch tensor, possibly 0-d
            ids = ids.tolist()
        if isinstance(ids, (int, np.integer)):
            return self.backend.id_to_token(int(ids))
        return [self.backend.id_to_token(i) for i in _int_list(ids)]

    def convert_tokens_to_ids(self, tokens: str | Sequence[str]) -> int | None | list[int | None]:
        """Id(s) for token string(s); the unknown token's id for tokens not in the vocab."""
        if isinstance(tokens, str):
            found = self.backend.token_to_id(tokens)
            return self.unk_token_id if found is None else found
        return [self.convert_tokens_to_ids(t) for t in tokens]  # type: ignore[misc]

    # ------------------------------------------------------------------ saving

    def save_pretrained(self, directory: str | os.PathLike[str]) -> Path:
        """Write ``tokenizer.json``, ``tokenizer_config.json``, ``special_tokens_map.json``
        (and ``vocab.txt`` for WordPiece) into ``directory``, all-or-nothing: the files are
        written into a copy of the directory (other files, such as the model's weights, are
        kept) that replaces it only when every file is written (`files.atomic_directory`).

        Both ``load_tokenizer(directory)`` and ``transformers.AutoTokenizer`` load the result
        with the same ids. Returns the directory.

        Raises:
            ValueError: WordPiece ids that are not contiguous (``directory`` is unchanged).
        """
        final = Path(directory)
        with atomic_directory(final, keep_existing=True) as out:
            self._write_files(out)
        logger.info("saved tokenizer to %s", final)
        return final

    def _write_files(self, out: Path) -> None:
        """Write the tokenizer files into directory ``out``."""

        with self._lock:  # the backend's jieba step is swapped out while it is serialised
            text = serialised_without_jieba(self.backend) if self.jieba else self.backend.to_str()
        serialised = json.loads(text)
        serialised["truncation"] = None  # the wrapper, not the file, decides these
        serialised["padding"] = None
        write_text_atomic(
            out / TOKENIZER_FILE, json.dumps(serialised, ensure_ascii=False, indent=2)
        )

        special_map = {f"{role}_token": _token_to_json(tok) for role, tok in self._special.items()}
        if self.scheme == "bpe":
            # transformers' RoBERTa tokenizer also has bos/eos roles; they are cls/sep there.
            special_map["bos_token"] = special_map["cls_token"]
            special_map["eos_token"] = special_map["sep_token"]
        write_text_atomic(out / SPECIAL_TOKENS_MAP_FILE, json.dumps(special_map, indent=2))

        config: dict[str, Any] = {"tokenizer_class": "PreTrainedTokenizerFast", **self.hf_config}
        config.update(special_map)
        if self.model_max_length is not None:
            config["model_max_length"] = self.model_max_length
        config["model_input_names"] = ["input_ids"] + (
            ["token_type_ids"] if self.has_token_type_ids else []
        ) + ["attention_mask"]  # fmt: skip
        write_text_atomic(out / TOKENIZER_CONFIG_FILE, json.dumps(config, indent=2))

        if self.scheme == "wordpiece":
            vocab = self.backend.get_vocab(with_added_tokens=False)
            by_id = sorted(vocab.items(), key=lambda kv: kv[1])
            if [i for _, i in by_id] != list(range(len(by_id))):
                raise InputError(
                    "WordPiece vocabulary ids are not contiguous; cannot write vocab.txt"
                )
            write_text_atomic(out / WORDPIECE_VOCAB_FILE, "".join(t + "\n" for t, _ in by_id))


# --------------------------------------------------------------------------- loading


def load_tokenizer(
    path: str | os.PathLike[str], *, return_token_type_ids: bool | None = None
) -> Tokenizer:
    """Build the tokenizer of a model: a local directory, a bertfamily resource name or a model
    id in the local Hugging Face cache, resolved once by `bertfamily.resources.resolve_model`
    (the names every ``--model`` option takes); then as `tokenizer_from_directory`.

    Raises:
        ModelNotFoundError: a name that is no directory, resource or cached id.
        TokenizerNotFoundError, TokenizerFileError: see `tokenizer_from_directory`.
    """
    return tokenizer_from_directory(
        resolve_model(path), return_token_type_ids=return_token_type_ids
    )


def tokenizer_from_directory(
    directory: str | os.PathLike[str],
    *,
    return_token_type_ids: bool | None = None,
    model_config: Mapping[str, Any] | None = None,
) -> Tokenizer:
    """Build the tokenizer of a resolved local Hugging Face model directory.

    Args:
        directory: a directory with ``tokenizer.json``, or a SentencePiece model (``spiece.model``,
            ``spm.model`` or ``sentencepiece.bpe.model``), or ``vocab.txt`` (WordPiece), or
            ``vocab.json`` + ``merges.txt`` (byte-level BPE); optionally
            ``tokenizer_config.json``, ``special_tokens_map.json`` and ``config.json``. A
            SentencePiece model's family is ``tokenizer_config.json``'s ``tokenizer_class``,
            else ``config.json``'s ``model_type``, else the file's name (`spm.FILE_FAMILIES`).
        return_token_type_ids: override; by default ``token_type_ids`` are returned iff the
            directory's ``config.json`` has ``type_vocab_size >= 2`` and a model type with
            segment embeddings, or, without ``config.json``: as ``tokenizer_config.json``'s
            ``model_input_names`` say for ``tokenizer.json``, by family for a SentencePiece
            model (ALBERT, DeBERTa-v2: yes), for WordPiece only otherwise.
        model_config: the directory's parsed ``config.json`` when the caller has read it
            (else it is read here, if present).

    Raises:
        TokenizerNotFoundError: the directory (or path) holds none of those files.
        TokenizerFileError: one of the files is unreadable or malformed (not JSON, a JSON
            value of the wrong type, a ``tokenizer.json`` the ``tokenizers`` library refuses,
            a ``.model`` file that is not a SentencePiece unigram/BPE model, a non-boolean
            ``do_lower_case``/``keep_accents``/``split_by_punct``), ``vocab.txt`` lists a
            token twice, or the directory's only tokenizer is a SentencePiece model of a
            family that is not supported (or not the file that family reads); the message
            names the file.
    """
    directory = Path(directory)
    tok_config = _read_json(directory / TOKENIZER_CONFIG_FILE)
    special_map = _read_json(directory / SPECIAL_TOKENS_MAP_FILE)
    if model_config is None:
        model_config = _read_json(directory / MODEL_CONFIG_FILE)
    role_values = _specials_from(directory / TOKENIZER_CONFIG_FILE, tok_config)
    decoder = _added_tokens_decoder(directory / TOKENIZER_CONFIG_FILE, tok_config)
    if decoder is None:
        # transformers reads special_tokens_map.json only when tokenizer_config.json has no
        # added_tokens_decoder; its roles then override tokenizer_config.json's.
        role_values.update(_specials_from(directory / SPECIAL_TOKENS_MAP_FILE, special_map))
    family = _family(tok_config, model_config)
    # transformers' RoFormerTokenizer (the class named, or model_type roformer's default) splits
    # text into jieba words before WordPiece; its tokenizer.json stores BERT's pre-tokenizer in
    # that step's place (`jieba_words`)
    named = tok_config.get("tokenizer_class")
    jieba = (
        str(named).startswith("RoFormerTokenizer")
        if named
        else isinstance(model_config, dict) and model_config.get("model_type") == "roformer"
    )
    try:
        model_max_length = _sane_max_length(tok_config.get("model_max_length"))
    except (TypeError, ValueError, OverflowError) as e:
        raise TokenizerFileError(
            f"{directory / TOKENIZER_CONFIG_FILE}: model_max_length "
            f"{tok_config.get('model_max_length')!r} is not a number: {e}"
        ) from None

    if (directory / TOKENIZER_FILE).is_file():
        try:
            backend = tokenizers.Tokenizer.from_file(str(directory / TOKENIZER_FILE))
        except Exception as e:  # the library raises a bare Exception for every bad file
            raise TokenizerFileError(
                f"{directory / TOKENIZER_FILE} is not a tokenizer the tokenizers library can "
                f"read: {e}"
            ) from None
        check_pipeline_bounds(backend, directory / TOKENIZER_FILE)
        stored = decoder if decoder is not None else _tokenizer_json_added(backend)
        mask_lstrip = _mask_lstrip(family, default=isinstance(backend.model, models.BPE))
        specials, extra = _resolve_specials(role_values, stored, mask_lstrip)
        # transformers adds the configured special tokens (with the flags resolved above) and
        # the tokens of added_tokens_decoder; adding a token the file has updates its flags.
        _add_tokens(backend, list(specials.values()) + (extra if decoder is not None else []))
        hf_config = {k: tok_config[k] for k in _HF_PASSTHROUGH if k in tok_config}
        source = TOKENIZER_FILE
        names = tok_config.get("model_input_names")
        token_types = (
            "token_type_ids" in names
            if isinstance(names, list)
            else isinstance(backend.model, models.WordPiece)
        )
    elif (found := _sentencepiece_source(directory, family)) is not None:
        spm_path, spm_family = found
        row = spm.FAMILIES[spm_family]
        specials, extra = _resolve_specials(
            role_values, decoder or {}, _mask_lstrip(spm_family, default=True), row.specials
        )
        backend = _build_sentencepiece(spm_path, row, tok_config, specials, extra)
        hf_config = {}  # saved as a plain tokenizer.json, which transformers loads as it is
        source = spm_path.name
        token_types = row.token_type_ids
    elif (directory / WORDPIECE_VOCAB_FILE).is_file():
        specials, extra = _resolve_specials(
            role_values, decoder or {}, _mask_lstrip(family, default=False), _WORDPIECE_DEFAULTS
        )
        backend, hf_config = _build_wordpiece(
            directory / WORDPIECE_VOCAB_FILE, tok_config, specials, jieba=jieba
        )
        _add_tokens(backend, extra)
        source = WORDPIECE_VOCAB_FILE
        token_types = True
    elif (directory / BPE_VOCAB_FILE).is_file() and (directory / BPE_MERGES_FILE).is_file():
        specials, extra = _resolve_specials(
            role_values, decoder or {}, _mask_lstrip(family, default=True), _BPE_DEFAULTS
        )
        backend, hf_config = _build_byte_level_bpe(directory, tok_config, specials)
        _add_tokens(backend, extra)
        source = f"{BPE_VOCAB_FILE} + {BPE_MERGES_FILE}"
        token_types = False
    else:
        _refuse_sentencepiece(directory, family)
        raise TokenizerNotFoundError(
            f"no tokenizer in {str(directory)!r}: looked for {TOKENIZER_FILE}, "
            f"{', '.join(_SPM_FILES)}, {WORDPIECE_VOCAB_FILE}, or {BPE_VOCAB_FILE} + "
            f"{BPE_MERGES_FILE}"
        )

    if return_token_type_ids is None:
        try:
            return_token_type_ids = _model_uses_token_types(model_config, default=token_types)
        except (TypeError, ValueError) as e:
            raise TokenizerFileError(
                f"{directory / MODEL_CONFIG_FILE}: type_vocab_size "
                f"{model_config.get('type_vocab_size')!r} is not an integer: {e}"
            ) from None
    tokenizer = Tokenizer(
        backend,
        special_tokens=specials,
        model_max_length=model_max_length,
        return_token_type_ids=return_token_type_ids,
        hf_config=hf_config,
        jieba=jieba and isinstance(backend.model, models.WordPiece),
    )
    logger.debug("loaded %r from %s/%s", tokenizer, directory, source)
    return tokenizer
