"""Reading Hugging Face tokenizer files into a `tokenizers` backend: WordPiece from ``vocab.txt``,
byte-level BPE from ``vocab.json`` + ``merges.txt``, SentencePiece model files (through
`bertfamily.tokenization.spm`), and the special tokens of ``tokenizer_config.json``,
``special_tokens_map.json``, ``added_tokens_decoder`` and ``tokenizer.json`` resolved the way
transformers resolves them. `load_tokenizer` (in `bertfamily.tokenization.tokenizer`) calls these.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import tokenizers
from tokenizers import AddedToken, decoders, models, normalizers, pre_tokenizers, processors

from ..errors import InputError, TokenizerFileError
from ..files import read_json
from . import spm

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
# model types whose configs have no segment table (MPNetConfig and ModernBertConfig have no
# type_vocab_size at all)
_NO_SEGMENT_MODEL_TYPES = frozenset({"distilbert", "mpnet", "modernbert"})


def _build_wordpiece(
    vocab_file: Path,
    tok_config: Mapping[str, Any],
    specials: dict[str, AddedToken],
    jieba: bool = False,
) -> tuple[tokenizers.Tokenizer, dict[str, Any]]:
    """BERT's WordPiece pipeline from ``vocab.txt`` (one token per line, id = line number).
    ``jieba``: RoFormer's (transformers' RoFormerTokenizer): the normaliser keeps CJK
    characters together for the jieba words that the caller's pre-tokenizer cuts."""
    names = {role: specials[role] for role in ROLES}
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
        clean_text=True,
        handle_chinese_chars=chinese and not jieba,
        strip_accents=strip_accents,
        lowercase=lower,
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
        "tokenizer_class": "RoFormerTokenizer" if jieba else "BertTokenizer",
        "do_lower_case": lower,
        "strip_accents": strip_accents,
        "tokenize_chinese_chars": chinese,
    }
    return backend, hf_config


def _build_byte_level_bpe(
    directory: Path, tok_config: Mapping[str, Any], specials: dict[str, AddedToken]
) -> tuple[tokenizers.Tokenizer, dict[str, Any]]:
    """RoBERTa's byte-level BPE pipeline from ``vocab.json`` + ``merges.txt``."""
    names = {role: specials[role] for role in ROLES}
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


# SentencePiece model files, in the order a directory is searched.
_SPM_FILES = tuple(dict.fromkeys(row.file for row in spm.FAMILIES.values()))


# The order in which transformers adds missing role tokens (bos, eos, unk, sep, pad, cls, mask;
# bos is cls and eos is sep in the SentencePiece families).
_ADD_ORDER = ("cls", "sep", "unk", "pad", "mask")


def _sentencepiece_source(directory: Path, family: str | None) -> tuple[Path, str] | None:
    """The SentencePiece model file to read and its family, or None when the directory has
    no model file, or only one of a family `spm.FAMILIES` does not hold (other files may
    then serve; `_refuse_sentencepiece` says why when none does).

    Raises:
        TokenizerFileError: the family's own file is missing but another model file is there.
    """
    present = [name for name in _SPM_FILES if (directory / name).is_file()]
    if not present:
        return None
    if family is None:
        family = spm.FILE_FAMILIES[present[0]]
    row = spm.FAMILIES.get(family)
    if row is None:
        return None
    if row.file not in present:
        raise TokenizerFileError(
            f"{directory / present[0]}: the directory's tokenizer family {family!r} reads "
            f"{row.file}, which is not there"
        )
    return directory / row.file, family


def _refuse_sentencepiece(directory: Path, family: str | None) -> None:
    """Raise when the directory's only tokenizer is a SentencePiece model we cannot place.

    Raises:
        TokenizerFileError: naming the file, its family and the supported families.
    """
    present = [name for name in _SPM_FILES if (directory / name).is_file()]
    if present:
        supported = ", ".join(f"{name} ({row.file})" for name, row in spm.FAMILIES.items())
        raise TokenizerFileError(
            f"{directory / present[0]}: a SentencePiece model of tokenizer family {family!r}, "
            f"which bertfamily cannot build; supported families: {supported}. Save the "
            "tokenizer with transformers (tokenizer.json) to load it here"
        )


def _build_sentencepiece(
    path: Path,
    row: spm.SpmFamily,
    tok_config: Mapping[str, Any],
    specials: dict[str, AddedToken],
    extra: Sequence[AddedToken],
) -> tokenizers.Tokenizer:
    """A family's pipeline over a SentencePiece model file (`spm.build_backend`), with its
    role tokens (``specials``, then ``extra`` added tokens) and post-processor.

    Raises:
        TokenizerFileError: the file is not a SentencePiece unigram/BPE model, or an option of
            ``tokenizer_config.json`` is not a boolean.
    """
    options = {}
    for key, default in row.options.items():
        value = tok_config.get(key, default)
        if not isinstance(value, bool):
            raise TokenizerFileError(
                f"{path.parent / TOKENIZER_CONFIG_FILE}: {key} must be true or false, got {value!r}"
            )
        options[key] = value
    try:
        model = spm.read_model(path)
        backend = spm.build_backend(model, row, options)
    except (OSError, ValueError) as e:
        raise TokenizerFileError(
            f"{path} is not a SentencePiece model bertfamily can read: {e}"
        ) from None
    _add_tokens(backend, [specials[role] for role in _ADD_ORDER] + list(extra))
    cls, sep = specials["cls"].content, specials["sep"].content
    backend.post_processor = spm.post_processor(
        row, (cls, backend.token_to_id(cls)), (sep, backend.token_to_id(sep))
    )
    return backend


def _model_uses_token_types(model_config: Mapping[str, Any], *, default: bool) -> bool:
    """Whether the model behind a tokenizer has a segment (token type) embedding."""
    if model_config.get("model_type") in _NO_SEGMENT_MODEL_TYPES:
        return False
    type_vocab_size = model_config.get("type_vocab_size")
    if type_vocab_size is None:
        return default
    return int(type_vocab_size) >= 2


def _read_json(path: Path) -> dict[str, Any]:
    """A JSON object file, ``{}`` when absent.

    Raises:
        TokenizerFileError: unreadable, not UTF-8 JSON, or not a JSON object.
    """
    if not path.is_file():
        return {}
    return read_json(path, error=TokenizerFileError)  # bounded: size, depth, UTF-8, an object


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
        out[role] = value
    return out


# Families whose tokenizer class turns a plain-string mask token into one that absorbs the
# space before it (``AddedToken(mask, lstrip=True)``), as RoBERTa's released tokenizer does
# ("Paris is <mask>."); other families' plain-string special tokens have no flags.
_MASK_LSTRIP_FAMILIES = frozenset(
    {"roberta", "longformer", "deberta", "mpnet", "camembert", "xlmroberta", "bart", "albert"}
)


# Families known to give their mask token no flags (a BPE vocabulary of one of these
# families does not get RoBERTa's default).
_PLAIN_MASK_FAMILIES = frozenset(
    {"bert", "distilbert", "electra", "debertav2", "mobilebert", "squeezebert", "gpt2"}
)


_GENERIC_TOKENIZER_CLASSES = frozenset({"PreTrainedTokenizerFast", "TokenizersBackend"})


def _family(tok_config: Mapping[str, Any], model_config: Mapping[str, Any]) -> str | None:
    """The tokenizer family: ``tokenizer_class`` of ``tokenizer_config.json`` without its
    ``Tokenizer``/``Fast`` suffix, else ``model_type`` of ``config.json``; lower case, without
    ``-``/``_`` (``"roberta"``, ``"debertav2"``, ``"xlmroberta"``); None when neither names one."""
    name = tok_config.get("tokenizer_class")
    if isinstance(name, str) and name not in _GENERIC_TOKENIZER_CLASSES:
        name = name.removesuffix("Fast").removesuffix("Tokenizer")
    else:
        name = model_config.get("model_type")
    if not isinstance(name, str) or not name:
        return None
    return name.lower().replace("-", "").replace("_", "")


def _mask_lstrip(family: str | None, *, default: bool) -> bool:
    """Whether a plain-string mask token absorbs the space to its left: by family, else
    ``default`` (True for a byte-level BPE vocabulary, RoBERTa's scheme)."""
    if family in _MASK_LSTRIP_FAMILIES:
        return True
    if family in _PLAIN_MASK_FAMILIES:
        return False
    return default


def _added_tokens_decoder(
    path: Path, tok_config: Mapping[str, Any]
) -> dict[str, AddedToken] | None:
    """``tokenizer_config.json``'s ``added_tokens_decoder`` (id -> AddedToken dict) as content
    -> AddedToken, or None when the file has none.

    Raises:
        TokenizerFileError: not an object of objects with a string ``content``.
    """
    decoder = tok_config.get("added_tokens_decoder")
    if decoder is None:
        return None
    if not isinstance(decoder, Mapping) or not all(
        isinstance(v, Mapping) and isinstance(v.get("content"), str) for v in decoder.values()
    ):
        raise TokenizerFileError(
            f"{path}: added_tokens_decoder must map ids to objects with a string 'content'"
        )
    return {v["content"]: _token_from_dict(v, special=False) for v in decoder.values()}


def _tokenizer_json_added(backend: tokenizers.Tokenizer) -> dict[str, AddedToken]:
    """The ``added_tokens`` of a loaded ``tokenizer.json``, content -> AddedToken."""
    return {t.content: t for t in backend.get_added_tokens_decoder().values()}


def _resolve_specials(
    role_values: Mapping[str, str | Mapping[str, Any]],
    stored: Mapping[str, AddedToken],
    mask_lstrip: bool,
    defaults: Mapping[str, str] | None = None,
) -> tuple[dict[str, AddedToken], list[AddedToken]]:
    """Each role's token with its flags, by transformers' precedence: the flags stored for that
    content (``added_tokens_decoder``, else ``tokenizer.json``'s ``added_tokens``), else the
    role's own object form (``special_tokens_map.json`` over ``tokenizer_config.json``), else
    the family's defaults for a plain string (the mask of a lstrip family: ``lstrip=True``;
    everything else: no flags). Roles no file names get the strings of ``defaults`` (when
    given; otherwise they are left out).

    Returns the roles and the stored tokens that are no role's (to be added as they are)."""
    roles: dict[str, AddedToken] = {}
    for role in ROLES:
        value = role_values.get(role)
        if value is None:
            if defaults is None:
                continue
            value = defaults[role]
        content = value if isinstance(value, str) else value["content"]
        if content in stored:
            roles[role] = stored[content]
        elif isinstance(value, Mapping):
            roles[role] = _token_from_dict(value, special=True)
        else:
            lstrip = role == "mask" and mask_lstrip
            roles[role] = AddedToken(content, lstrip=lstrip, special=True, normalized=False)
    taken = {t.content for t in roles.values()}
    extra = [t for content, t in stored.items() if content not in taken]
    return roles, extra


def _add_tokens(backend: tokenizers.Tokenizer, tokens: Sequence[AddedToken]) -> None:
    """Add (or update the flags of) ``tokens``: special ones as special tokens."""
    special = [t for t in tokens if t.special]
    plain = [t for t in tokens if not t.special]
    if special:
        backend.add_special_tokens(special)
    if plain:
        backend.add_tokens(plain)


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


def _token_from_dict(value: Mapping[str, Any], *, special: bool) -> AddedToken:
    """An AddedToken from its JSON object form; ``special`` when the object does not say
    (True for a role's token, as transformers forces it); ``normalized`` defaults to
    ``not special``, as in ``tokenizers``."""
    special = bool(value.get("special", special))
    return AddedToken(
        value["content"],
        single_word=bool(value.get("single_word", False)),
        lstrip=bool(value.get("lstrip", False)),
        rstrip=bool(value.get("rstrip", False)),
        normalized=bool(value.get("normalized", not special)),
        special=special,
    )


def _sane_max_length(value: Any) -> int | None:
    if value is None or float(value) >= _ABSURD_MAX_LENGTH:
        return None
    if isinstance(value, bool) or int(value) < 1:
        raise InputError(f"model_max_length must be a positive integer, got {value!r}")
    return int(value)


def _as_added_token(token: str | AddedToken) -> AddedToken:
    if isinstance(token, AddedToken):
        return token
    return AddedToken(token, special=True, normalized=False)


def _token_to_json(token: AddedToken) -> str | dict[str, Any]:
    """A role's token for ``special_tokens_map.json``: a plain string unless a flag is set."""
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


# --------------------------------------------------------------------------- pipeline bounds

MAX_PIPELINE_STEPS = 32  # normalizers, and pre-tokenizers, in one tokenizer.json
MAX_NORMALIZER_EXPANSION = 64  # characters one input character may become (worst case)
# worst-case growth of the built-in normalizers (Unicode decompositions, CJK spacing, bytes);
# the rest keep or shrink the text
_GROWTH = {"NFD": 3, "NFKD": 3, "NFC": 3, "NFKC": 3, "Precompiled": 3, "ByteLevel": 4}


def _growth(step: Mapping[str, Any]) -> tuple[float, int]:
    """(worst-case characters per input character, leaf steps) of one serialised normaliser."""
    kind = step.get("type")
    if kind == "Sequence":
        factor, steps = 1.0, 0
        for inner in step.get("normalizers") or ():
            f, n = _growth(inner if isinstance(inner, Mapping) else {})
            factor, steps = factor * f, steps + n
        return factor, steps
    if kind == "BertNormalizer":
        return (3.0 if step.get("handle_chinese_chars", True) else 1.0), 1
    if kind == "Replace":
        pattern, content = step.get("pattern") or {}, str(step.get("content") or "")
        if isinstance(pattern.get("String"), str) and pattern["String"]:
            return max(1.0, len(content) / len(pattern["String"])), 1
        try:  # a pattern that can match nothing inserts the content between every character
            empty = re.compile(str(pattern.get("Regex", ""))).fullmatch("") is not None
        except re.error:
            empty = True
        return (1.0 + len(content) if empty else max(1.0, len(content))), 1
    return float(_GROWTH.get(kind, 1)), 1


def _leaf_steps(step: Any, key: str) -> int:
    """Leaf steps of a serialised (possibly nested) Sequence of pre-tokenizers."""
    if not isinstance(step, Mapping):
        return 0
    if step.get("type") == "Sequence":
        return sum(_leaf_steps(inner, key) for inner in step.get(key) or ())
    return 1


def check_pipeline_bounds(backend: tokenizers.Tokenizer, file: Path) -> None:
    """Refuse a tokenizer whose text pipeline could grow a short text into gigabytes: more
    than `MAX_PIPELINE_STEPS` normalizers or pre-tokenizers, or normalizers whose worst-case
    growth (the product over the chain: a ``Replace`` of ``p`` by ``c`` grows ``len(c) /
    len(p)``-fold, one whose pattern can match nothing ``1 + len(c)``-fold; Unicode forms and
    byte mapping a few-fold) exceeds `MAX_NORMALIZER_EXPANSION` characters per character. A
    chain of 16 ``Replace("a", "aa")`` rules (65,536-fold) is refused;
    every published BERT-family tokenizer is far inside the bound.

    Raises:
        TokenizerFileError: naming ``file``, the count or the growth.
    """
    data = json.loads(backend.to_str())
    normalizer = data.get("normalizer")
    growth, steps = _growth(normalizer) if isinstance(normalizer, Mapping) else (1.0, 0)
    pre = _leaf_steps(data.get("pre_tokenizer"), "pretokenizers")
    for what, count in (("normalizers", steps), ("pre-tokenizers", pre)):
        if count > MAX_PIPELINE_STEPS:
            raise TokenizerFileError(
                f"{file}: {count} {what} chained; at most {MAX_PIPELINE_STEPS} are accepted"
            )
    if growth > MAX_NORMALIZER_EXPANSION:
        raise TokenizerFileError(
            f"{file}: its normalizers can grow each character into up to {growth:,.0f} "
            f"(Replace rules feeding each other); at most {MAX_NORMALIZER_EXPANSION} are "
            "accepted, so a short text cannot take gigabytes"
        )
