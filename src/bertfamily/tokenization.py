"""Tokenizers for local Hugging Face model directories, built on the ``tokenizers`` library only.

``load_tokenizer(path)`` reads, in order of preference:

1. ``tokenizer.json`` (any model the ``tokenizers`` library can serialise);
2. ``vocab.txt``: BERT-style WordPiece, rebuilt from ``tokenizers`` components;
3. ``vocab.json`` + ``merges.txt``: RoBERTa-style byte-level BPE, rebuilt likewise.

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
from typing import Any, Literal

import numpy as np
import tokenizers
from tokenizers import AddedToken, decoders, models, normalizers, pre_tokenizers, processors

from .files import atomic_directory, write_text_atomic

__all__ = ["Tokenizer", "TokenizerFileError", "TokenizerNotFoundError", "load_tokenizer"]

logger = logging.getLogger(__name__)

TOKENIZER_FILE = "tokenizer.json"
WORDPIECE_VOCAB_FILE = "vocab.txt"
BPE_VOCAB_FILE = "vocab.json"
BPE_MERGES_FILE = "merges.txt"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
SPECIAL_TOKENS_MAP_FILE = "special_tokens_map.json"
MODEL_CONFIG_FILE = "config.json"

# The roles a BERT-family tokenizer needs; each maps to one token string.
ROLES = ("cls", "sep", "pad", "mask", "unk")

# Defaults by scheme, used when the directory's json files do not name a token.
_WORDPIECE_DEFAULTS = {
    "cls": "[CLS]", "sep": "[SEP]", "pad": "[PAD]", "mask": "[MASK]", "unk": "[UNK]",
}  # fmt: skip
_BPE_DEFAULTS = {
    "cls": "<s>", "sep": "</s>", "pad": "<pad>", "mask": "<mask>", "unk": "<unk>",
}  # fmt: skip

# transformers writes model_max_length = int(1e30) when a checkpoint does not set one.
_ABSURD_MAX_LENGTH = 10**9

# model_types whose models have no token-type (segment) embedding even though their
# tokenizer may emit type ids: DistilBERT dropped BERT's segment embeddings.
_NO_SEGMENT_MODEL_TYPES = frozenset({"distilbert"})

Padding = bool | Literal["longest", "max_length", "do_not_pad"]
ReturnTensors = Literal["pt", "np"] | None


# Truncating a long text: it is first cut by characters, so that time and memory per input
# are bounded by the length limit, not by the text (a 10 MB line would otherwise be tokenised
# whole, then truncated). The cut keeps ``limit * CHARS_PER_TOKEN`` characters, ending at a
# whitespace so no word is split; if that prefix has fewer than ``limit`` tokens (text with
# very long words or runs of whitespace), the cut grows x4, up to ``MAX_CHARS_PER_TOKEN``.
# Whenever the kept prefix has at least ``limit`` tokens, the result equals tokenising the
# whole text and truncating it.
CHARS_PER_TOKEN = 64
MAX_CHARS_PER_TOKEN = 1024
_BOUNDARY_SEARCH = 256  # characters searched back from the cut for a whitespace


class TokenizerNotFoundError(ValueError):
    """A directory holds none of the files a tokenizer can be built from."""


class TokenizerFileError(ValueError):
    """A tokenizer file (``tokenizer.json``, ``vocab.txt``, ``vocab.json``/``merges.txt``,
    ``tokenizer_config.json``, ``special_tokens_map.json``, ``config.json``) is unreadable or
    malformed, or ``vocab.txt`` lists a token twice; the message names the file."""


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
    """

    def __init__(
        self,
        backend: tokenizers.Tokenizer,
        *,
        special_tokens: Mapping[str, str | AddedToken] | None = None,
        model_max_length: int | None = None,
        return_token_type_ids: bool | None = None,
        hf_config: Mapping[str, Any] | None = None,
    ) -> None:
        self.backend = backend
        self.backend.no_truncation()
        self.backend.no_padding()
        self._lock = threading.Lock()

        defaults = _BPE_DEFAULTS if self.scheme == "bpe" else _WORDPIECE_DEFAULTS
        given = dict(special_tokens or {})
        unknown = set(given) - set(ROLES)
        if unknown:
            raise ValueError(f"unknown special-token roles {sorted(unknown)}; known: {ROLES}")
        self._special: dict[str, AddedToken] = {
            role: _as_added_token(given.get(role, defaults[role])) for role in ROLES
        }
        self._model_max_length = _sane_max_length(model_max_length)
        self._has_token_type_ids = (
            self.scheme == "wordpiece" if return_token_type_ids is None else return_token_type_ids
        )
        self.hf_config = dict(hf_config or {})

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
    def _truncation(self, max_length: int | None) -> Iterator[None]:
        """Set longest-first truncation on the backend for one call, then restore it."""
        with self._lock:
            previous = self.backend.truncation
            if max_length is None:
                self.backend.no_truncation()
            else:
                self.backend.enable_truncation(max_length, strategy="longest_first")
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
        max_length: int | None = None,
        truncation: bool = True,
        padding: Padding = True,
        return_offsets: bool = False,
        return_tensors: ReturnTensors = "pt",
        return_special_tokens_mask: bool = False,
        return_truncated: bool = False,
    ) -> dict[str, Any]:
        """Encode a batch of texts (or text pairs) with special tokens added.

        With truncation on, a text longer than ``max_length * CHARS_PER_TOKEN`` characters is
        cut by characters (at a whitespace) before it is tokenised, so time and memory per
        input are bounded by ``max_length``; the tokens kept are those of the whole text
        whenever the kept prefix still holds ``max_length`` tokens (it grows until it does,
        up to ``MAX_CHARS_PER_TOKEN`` characters per token). Misspelt keywords raise
        ``TypeError`` naming them.

        Args:
            text: one string or a list of B strings.
            text_pair: ``None``, or as many second segments as ``text`` (``[SEP]``-joined
                after it, token type 1).
            max_length: the length limit in tokens, special tokens included; defaults to
                ``model_max_length``. Used for truncation and for ``padding="max_length"``.
            truncation: cut over-long inputs to ``max_length``, longest segment first. No
                truncation when ``max_length`` and ``model_max_length`` are both ``None``.
            padding: ``True``/``"longest"``: right-pad to the longest in the batch;
                ``"max_length"``: to ``max_length`` (or the longest, if longer);
                ``False``/``"do_not_pad"``: no padding (tensors then need equal lengths).
            return_offsets: also return ``offset_mapping``.
            return_tensors: ``"pt"`` (torch), ``"np"`` (numpy) or ``None`` (lists).
            return_special_tokens_mask: also return ``special_tokens_mask``.
            return_truncated: also return ``truncated``.

        Returns:
            A dict with
            ``input_ids`` (B, T) int64;
            ``attention_mask`` (B, T) int64, 1 = real token, 0 = padding;
            ``token_type_ids`` (B, T) int64, segment 0/1, only if ``has_token_type_ids``;
            ``offset_mapping`` (B, T, 2) int64 if asked: [start, end) character offsets into
            the string the token came from (``text`` or ``text_pair``), (0, 0) for special
            and padding tokens;
            ``special_tokens_mask`` (B, T) int64 if asked: 1 = special or padding token;
            ``truncated`` (B,) int64 if asked: 1 = the input was longer than ``max_length``
            and was cut.
            Always batched, also for a single string.

        Raises:
            ValueError: empty batch, ``text``/``text_pair`` lengths differ, unknown
                ``padding``/``return_tensors``, ``padding="max_length"`` without a length,
                padding needed but no pad token, or unequal lengths with tensors asked for.
        """
        texts = [text] if isinstance(text, str) else list(text)
        if not texts:
            raise ValueError("cannot encode an empty batch")
        if text_pair is None:
            inputs: list[Any] = texts
        else:
            pairs = [text_pair] if isinstance(text_pair, str) else list(text_pair)
            if len(pairs) != len(texts):
                raise ValueError(f"got {len(texts)} texts but {len(pairs)} text pairs")
            inputs = list(zip(texts, pairs))
        if padding not in (True, False, "longest", "max_length", "do_not_pad"):
            raise ValueError(f"unknown padding {padding!r}")
        if return_tensors not in ("pt", "np", None):
            raise ValueError(f"unknown return_tensors {return_tensors!r}; use 'pt', 'np' or None")

        limit = max_length if max_length is not None else self.model_max_length
        cut = [False] * len(inputs)
        if truncation and limit is not None:
            with self._truncation(None):
                inputs, cut = self._cut_long_inputs(inputs, limit)
        with self._truncation(limit if truncation else None):
            encodings = self.backend.encode_batch(inputs, add_special_tokens=True)
        truncated = [int(c or bool(e.overflowing)) for c, e in zip(cut, encodings)]
        if any(truncated):
            logger.debug(
                "%d of %d inputs were longer than %s tokens and were truncated",
                sum(truncated),
                len(truncated),
                limit,
            )

        fields: dict[str, list[list[Any]]] = {
            "input_ids": [e.ids for e in encodings],
            "attention_mask": [e.attention_mask for e in encodings],
        }
        if self.has_token_type_ids:
            fields["token_type_ids"] = [e.type_ids for e in encodings]
        if return_offsets:
            fields["offset_mapping"] = [[list(o) for o in e.offsets] for e in encodings]
        if return_special_tokens_mask:
            fields["special_tokens_mask"] = [e.special_tokens_mask for e in encodings]

        lengths = [len(e.ids) for e in encodings]
        if padding in (True, "longest", "max_length"):
            target = max(lengths)
            if padding == "max_length":
                if limit is None:
                    raise ValueError("padding='max_length' needs max_length or model_max_length")
                target = max(target, limit)
            fields = self._pad(fields, target)
        elif return_tensors is not None and len(set(lengths)) > 1:
            raise ValueError(
                f"sequences have different lengths {sorted(set(lengths))} and padding is off; "
                "pass padding=True or return_tensors=None"
            )
        out = _to_tensors(fields, return_tensors)
        if return_truncated:
            out["truncated"] = _to_tensors({"truncated": [truncated]}, return_tensors)["truncated"][
                0
            ]
        return out

    def _cut_long_inputs(self, inputs: list[Any], limit: int) -> tuple[list[Any], list[bool]]:
        """Cut every text (or pair segment) longer than ``limit * CHARS_PER_TOKEN`` characters
        to a prefix ending before a whitespace that still holds at least ``limit`` tokens
        (growing the prefix x4 while it holds fewer, up to ``limit * MAX_CHARS_PER_TOKEN``
        characters). Call with the backend's truncation off. Returns the inputs and, per
        input, whether anything was cut."""
        # (input index, segment index or None, the whole text)
        todo = []
        for i, item in enumerate(inputs):
            segments = [(None, item)] if isinstance(item, str) else list(enumerate(item))
            todo += [(i, j, t) for j, t in segments if len(t) > limit * CHARS_PER_TOKEN]
        if not todo:
            return inputs, [False] * len(inputs)
        out = list(inputs)
        cut = [False] * len(inputs)
        budget = limit * CHARS_PER_TOKEN
        while todo:
            prefixes = [_prefix_at_whitespace(t, budget) for _, _, t in todo]
            last = budget >= limit * MAX_CHARS_PER_TOKEN
            # the last round accepts every cut without counting
            encodings = (
                [None] * len(todo)
                if last
                else self.backend.encode_batch(prefixes, add_special_tokens=False)
            )
            retry = []
            for (i, j, text), prefix, enc in zip(todo, prefixes, encodings):
                if enc is not None:
                    if len(enc.ids) < limit:
                        retry.append((i, j, text))
                        continue
                    prefix = _tighten(prefix, enc.offsets, limit)
                if j is None:
                    out[i] = prefix
                else:
                    pair = list(out[i])
                    pair[j] = prefix
                    out[i] = tuple(pair)
                cut[i] = True
            budget *= 4
            todo = [(i, j, t) for i, j, t in retry if len(t) > budget]
        return out, cut

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
            raise ValueError(f"padding needed but pad token {self.pad_token!r} is not in the vocab")
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

        serialised = json.loads(self.backend.to_str())
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
                raise ValueError(
                    "WordPiece vocabulary ids are not contiguous; cannot write vocab.txt"
                )
            write_text_atomic(out / WORDPIECE_VOCAB_FILE, "".join(t + "\n" for t, _ in by_id))


# --------------------------------------------------------------------------- loading


def load_tokenizer(
    path: str | os.PathLike[str], *, return_token_type_ids: bool | None = None
) -> Tokenizer:
    """Build the tokenizer of a local Hugging Face model directory.

    Args:
        path: a directory with ``tokenizer.json``, or ``vocab.txt`` (WordPiece), or
            ``vocab.json`` + ``merges.txt`` (byte-level BPE); optionally
            ``tokenizer_config.json``, ``special_tokens_map.json`` and ``config.json``.
        return_token_type_ids: override; by default ``token_type_ids`` are returned iff the
            directory's ``config.json`` has ``type_vocab_size >= 2`` and a model type with
            segment embeddings, or, without ``config.json``, for WordPiece only.

    Raises:
        TokenizerNotFoundError: the directory (or path) holds none of those files.
        TokenizerFileError: one of the files is unreadable or malformed (not JSON, a JSON
            value of the wrong type, a ``tokenizer.json`` the ``tokenizers`` library refuses),
            or ``vocab.txt`` lists a token twice; the message names the file.
    """
    directory = Path(path)
    tok_config = _read_json(directory / TOKENIZER_CONFIG_FILE)
    specials = _specials_from(directory / TOKENIZER_CONFIG_FILE, tok_config)
    specials.update(
        _specials_from(
            directory / SPECIAL_TOKENS_MAP_FILE, _read_json(directory / SPECIAL_TOKENS_MAP_FILE)
        )
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
        # transformers adds configured special tokens the file lacks; so do we.
        missing = [t for t in specials.values() if backend.token_to_id(t.content) is None]
        if missing:
            backend.add_special_tokens(missing)
        hf_config = {k: tok_config[k] for k in _HF_PASSTHROUGH if k in tok_config}
        source = TOKENIZER_FILE
    elif (directory / WORDPIECE_VOCAB_FILE).is_file():
        backend, hf_config = _build_wordpiece(
            directory / WORDPIECE_VOCAB_FILE, tok_config, specials
        )
        source = WORDPIECE_VOCAB_FILE
    elif (directory / BPE_VOCAB_FILE).is_file() and (directory / BPE_MERGES_FILE).is_file():
        backend, hf_config = _build_byte_level_bpe(directory, tok_config, specials)
        source = f"{BPE_VOCAB_FILE} + {BPE_MERGES_FILE}"
    else:
        raise TokenizerNotFoundError(
            f"no tokenizer in {str(directory)!r}: looked for {TOKENIZER_FILE}, "
            f"{WORDPIECE_VOCAB_FILE}, or {BPE_VOCAB_FILE} + {BPE_MERGES_FILE}"
        )

    if return_token_type_ids is None:
        model_config = _read_json(directory / MODEL_CONFIG_FILE)
        try:
            return_token_type_ids = _model_uses_token_types(
                model_config, default=isinstance(backend.model, models.WordPiece)
            )
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
    )
    logger.debug("loaded %r from %s/%s", tokenizer, directory, source)
    return tokenizer


# tokenizer_config.json fields that change how transformers rebuilds the backend; kept so
# that save_pretrained writes them back.
_HF_PASSTHROUGH = (
    "tokenizer_class",
    "do_lower_case",
    "strip_accents",
    "tokenize_chinese_chars",
    "add_prefix_space",
    "trim_offsets",
)


def _build_wordpiece(
    vocab_file: Path, tok_config: Mapping[str, Any], specials: dict[str, AddedToken]
) -> tuple[tokenizers.Tokenizer, dict[str, Any]]:
    """BERT's WordPiece pipeline from ``vocab.txt`` (one token per line, id = line number)."""
    names = {role: specials.get(role, _as_added_token(_WORDPIECE_DEFAULTS[role])) for role in ROLES}
    lower = bool(tok_config.get("do_lower_case", True))
    strip_accents = tok_config.get("strip_accents")  # None: follow lower-casing, as BERT does
    chinese = bool(tok_config.get("tokenize_chinese_chars", True))

    backend = tokenizers.Tokenizer(
        models.WordPiece(
            _read_wordpiece_vocab(vocab_file),
            unk_token=names["unk"].content,
            max_input_chars_per_word=100,
        )
    )
    backend.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=chinese, strip_accents=strip_accents, lowercase=lower
    )
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.decoder = decoders.WordPiece(prefix="##")
    backend.add_special_tokens(list(names.values()))  # never split, never lower-cased
    cls, sep = names["cls"].content, names["sep"].content
    backend.post_processor = processors.TemplateProcessing(
        single=f"{cls}:0 $A:0 {sep}:0",
        pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1",
        special_tokens=[(cls, backend.token_to_id(cls)), (sep, backend.token_to_id(sep))],
    )
    hf_config = {
        "tokenizer_class": "BertTokenizer",
        "do_lower_case": lower,
        "strip_accents": strip_accents,
        "tokenize_chinese_chars": chinese,
    }
    return backend, hf_config


def _build_byte_level_bpe(
    directory: Path, tok_config: Mapping[str, Any], specials: dict[str, AddedToken]
) -> tuple[tokenizers.Tokenizer, dict[str, Any]]:
    """RoBERTa's byte-level BPE pipeline from ``vocab.json`` + ``merges.txt``."""
    names = {role: specials.get(role, _as_added_token(_BPE_DEFAULTS[role])) for role in ROLES}
    if "mask" not in specials:
        # RoBERTa's <mask> swallows the space before it ("Paris is <mask>.").
        names["mask"] = AddedToken(_BPE_DEFAULTS["mask"], lstrip=True, rstrip=False, special=True)
        specials["mask"] = names["mask"]
    add_prefix_space = bool(tok_config.get("add_prefix_space", False))
    trim_offsets = bool(tok_config.get("trim_offsets", True))

    try:
        bpe = models.BPE.from_file(
            str(directory / BPE_VOCAB_FILE),
            str(directory / BPE_MERGES_FILE),
            continuing_subword_prefix="",
            end_of_word_suffix="",
            fuse_unk=False,
        )
    except Exception as e:  # the library raises a bare Exception for every bad file
        raise TokenizerFileError(
            f"{directory / BPE_VOCAB_FILE} + {directory / BPE_MERGES_FILE}: not a byte-level BPE "
            f"vocabulary and merge list: {e}"
        ) from None
    backend = tokenizers.Tokenizer(bpe)
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens(list(names.values()))
    cls, sep = names["cls"].content, names["sep"].content
    backend.post_processor = processors.RobertaProcessing(
        (sep, backend.token_to_id(sep)),
        (cls, backend.token_to_id(cls)),
        trim_offsets=trim_offsets,
        add_prefix_space=add_prefix_space,
    )
    hf_config = {
        "tokenizer_class": "RobertaTokenizer",
        "add_prefix_space": add_prefix_space,
        "trim_offsets": trim_offsets,
    }
    return backend, hf_config


def _model_uses_token_types(model_config: Mapping[str, Any], *, default: bool) -> bool:
    """Whether the model behind a tokenizer has a segment (token type) embedding."""
    if model_config.get("model_type") in _NO_SEGMENT_MODEL_TYPES:
        return False
    type_vocab_size = model_config.get("type_vocab_size")
    if type_vocab_size is None:
        return default
    return int(type_vocab_size) >= 2


# --------------------------------------------------------------------------- helpers


def _read_json(path: Path) -> dict[str, Any]:
    """A JSON object file, ``{}`` when absent.

    Raises:
        TokenizerFileError: unreadable, not UTF-8 JSON, or not a JSON object.
    """
    if not path.is_file():
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise TokenizerFileError(f"{path} is not readable JSON: {e}") from None
    if not isinstance(value, dict):
        raise TokenizerFileError(f"{path} must hold a JSON object, got {type(value).__name__}")
    return value


def _specials_from(path: Path, config: Mapping[str, Any]) -> dict[str, AddedToken]:
    """The role tokens a ``tokenizer_config.json`` / ``special_tokens_map.json`` names.

    Raises:
        TokenizerFileError: a token that is neither a string nor an AddedToken object with a
            string ``content``.
    """
    out = {}
    for role in ROLES:
        value = config.get(f"{role}_token")
        if value is None:
            continue
        if not (
            isinstance(value, str)
            or (isinstance(value, Mapping) and isinstance(value.get("content"), str))
        ):
            raise TokenizerFileError(
                f"{path}: {role}_token must be a string or an object with a string "
                f"'content', got {value!r}"
            )
        out[role] = _from_json_token(value)
    return out


def _read_wordpiece_vocab(path: Path) -> dict[str, int]:
    """``vocab.txt``: one token per line, id = line number - 1, read as ``tokenizers`` and
    ``transformers`` do (line ends and trailing whitespace stripped).

    Raises:
        TokenizerFileError: not UTF-8 text, or a token listed twice (the message names the
            token and both line numbers: a duplicate would leave an id without a token).
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise TokenizerFileError(f"{path} is not readable UTF-8 text: {e}") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the final line end
    vocab: dict[str, int] = {}
    for index, line in enumerate(lines):
        token = line.rstrip()
        if token in vocab:
            raise TokenizerFileError(
                f"{path}: token {token!r} on line {index + 1} is already on line "
                f"{vocab[token] + 1}; every token must appear once"
            )
        vocab[token] = index
    if not vocab:
        raise TokenizerFileError(f"{path} lists no tokens")
    return vocab


def _sane_max_length(value: Any) -> int | None:
    if value is None or float(value) >= _ABSURD_MAX_LENGTH:
        return None
    if isinstance(value, bool) or int(value) < 1:
        raise ValueError(f"model_max_length must be a positive integer, got {value!r}")
    return int(value)


def _as_added_token(token: str | AddedToken) -> AddedToken:
    if isinstance(token, AddedToken):
        return token
    return AddedToken(token, special=True, normalized=False)


def _from_json_token(value: str | Mapping[str, Any]) -> AddedToken:
    """A special token as ``tokenizer_config.json`` spells it: a string or an AddedToken dict."""
    if isinstance(value, str):
        return _as_added_token(value)
    return AddedToken(
        value["content"],
        single_word=bool(value.get("single_word", False)),
        lstrip=bool(value.get("lstrip", False)),
        rstrip=bool(value.get("rstrip", False)),
        normalized=bool(value.get("normalized", False)),
        special=True,
    )


def _token_to_json(token: AddedToken) -> str | dict[str, Any]:
    """The inverse of ``_from_json_token``: a plain string unless a flag is set."""
    if not (token.lstrip or token.rstrip or token.single_word or token.normalized):
        return token.content
    return {
        "content": token.content,
        "single_word": token.single_word,
        "lstrip": token.lstrip,
        "rstrip": token.rstrip,
        "normalized": token.normalized,
        "special": True,
    }


def _int_list(ids: Any) -> list[int]:
    if hasattr(ids, "tolist"):  # numpy array or torch tensor
        ids = ids.tolist()
    return [int(i) for i in ids]


def _to_tensors(
    fields: dict[str, list[list[Any]]], return_tensors: ReturnTensors
) -> dict[str, Any]:
    if return_tensors is None:
        return fields
    arrays = {key: np.asarray(rows, dtype=np.int64) for key, rows in fields.items()}
    if return_tensors == "np":
        return arrays
    import torch  # deferred: tokenisation alone does not need torch

    return {key: torch.from_numpy(a) for key, a in arrays.items()}


def _tighten(prefix: str, offsets: list[tuple[int, int]], limit: int) -> str:
    """Shorten a prefix that holds at least ``limit`` tokens (``offsets``, in characters) to
    the end of the word holding its token number ``limit + 1``: the first ``limit + 1``
    tokens are unchanged (no word is split) and little more is left to tokenise again (a pair
    of long segments would otherwise give overflowing windows by the thousand)."""
    if len(offsets) <= limit:
        return prefix
    end = offsets[limit][1]
    while end < len(prefix) and not prefix[end].isspace():
        end += 1
    return prefix[:end]


def _prefix_at_whitespace(text: str, length: int) -> str:
    """``text[:length]``, shortened to end just before a whitespace when there is one in the
    last ``_BOUNDARY_SEARCH`` characters, so the cut splits no word."""
    for i in range(length, max(length - _BOUNDARY_SEARCH, 0), -1):
        if text[i].isspace():
            return text[:i]
    return text[:length]
