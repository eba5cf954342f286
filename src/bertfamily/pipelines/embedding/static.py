"""Static embeddings: one stored vector per token, a text's vector the mean of its tokens'
vectors (Model2Vec, Tulkens & van Dongen 2024; sentence-transformers' ``StaticEmbedding``).

Two directory layouts hold them, and both run here as their own library runs them:

- **sentence-transformers** (``StaticEmbedding`` in ``modules.json``): ``model.safetensors``
  with ``embedding.weight`` (V, D) and ``tokenizer.json``. A text is tokenized without special
  tokens (cut at the truncation the ``tokenizer.json`` stores, if any) and its vector is the
  mean of its rows (an ``EmbeddingBag``); every token counts, ``[UNK]`` included; a
  ``Normalize`` module after it L2-normalises.
- **model2vec** (``StaticModel.save_pretrained``: ``config.json`` with ``model_type:
  model2vec``, ``model.safetensors`` with ``embeddings``, optionally per-token ``weights`` and
  a token ``mapping`` of a vocabulary-quantised model): the text is first cut to
  ``max_length × median token length`` characters, tokenized without special tokens and cut to
  ``max_length`` tokens (config.json's ``max_length``, default 512; null: no cut); the unknown
  token's id is dropped; the row of token ``t`` is ``embeddings[mapping[t]] · weights[t]``;
  config.json's ``normalize`` (default false) decides the L2 normalisation. (model2vec's own
  directory also carries a ``modules.json`` for sentence-transformers, which keeps ``[UNK]``:
  the two libraries differ on a text with unknown tokens, and here model2vec's rule runs.)

A text with no token left to average (empty, or, by model2vec's rule, of unknown tokens only)
is the zero vector, normalised or not, as both libraries return it (model2vec divides by the
norm + 1e-32, sentence-transformers' empty ``EmbeddingBag`` bag and ``Normalize`` give zeros;
the mean pooling here divides by max(count, 1e-9) and the normalisation by max(norm, 1e-12)):
never NaN.

The table runs as a trunk (`StaticEncoder`: ``last_hidden_state`` (B, T, D) = the rows of the
token ids) under `embed.SentenceEmbedder`'s one batch loop, mean pooling and normalisation.
`write_static` saves a directory in model2vec's layout, which both libraries load.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tokenizers
import torch
from torch import nn

from ...errors import (
    InputError,
    ModelDirectoryError,
    SentenceModulesError,
    TokenizerFileError,
    TokenizerNotFoundError,
)
from ...files import atomic_directory, atomic_write, write_text_atomic

__all__ = [
    "MODEL2VEC",
    "SENTENCE_TRANSFORMERS",
    "STATIC_MODULE",
    "StaticEncoder",
    "StaticTokenizer",
    "is_model2vec_directory",
    "load_static",
    "write_static",
]

MODEL2VEC = "model2vec"
SENTENCE_TRANSFORMERS = "sentence-transformers"
#: model2vec's default token limit of ``StaticModel.encode`` (its ``DEFAULT_MAX_LENGTH``).
MODEL2VEC_MAX_LENGTH = 512
NO_LIMIT = 1 << 30  # a token limit no text reaches: "no cut"
_ST_KEYS = {"embedding.weight"}
_M2V_KEYS = {"embeddings", "weights", "mapping"}
#: The module types model2vec writes in its modules.json (sentence-transformers' old paths).
STATIC_MODULE = "sentence_transformers.models.StaticEmbedding"
_ST_NORMALIZE = "sentence_transformers.models.Normalize"


def is_model2vec_directory(path: Path) -> bool:
    """Whether ``path`` is in model2vec's layout: ``config.json``, ``tokenizer.json`` and a
    ``model.safetensors`` that holds ``embeddings`` (what ``StaticModel.save_pretrained``
    writes; a file safetensors cannot read is left to the loader's errors)."""
    from safetensors import safe_open

    path = Path(path)
    files = ("config.json", "tokenizer.json", "model.safetensors")
    if not all((path / f).is_file() for f in files):
        return False
    try:
        with safe_open(str(path / "model.safetensors"), framework="pt") as f:
            return "embeddings" in f.keys()
    except Exception:  # safetensors raises several kinds for a bad file
        return False


@dataclass
class StaticConfig:
    """What the embedding engine reads of a trunk's config: the vector width and the input
    limit in tokens."""

    hidden_size: int
    max_sequence_length: int


class StaticOutput:
    """The trunk's output: ``last_hidden_state`` (B, T, D) float32."""

    def __init__(self, last_hidden_state: torch.Tensor) -> None:
        self.last_hidden_state = last_hidden_state


class StaticEncoder(nn.Module):
    """A static-embedding table as a trunk: token ids (B, T) int64 → their rows (B, T, D)
    float32. ``encoder`` is the module itself (the engine calls ``model.encoder``)."""

    def __init__(self, table: torch.Tensor, max_length: int | None) -> None:
        super().__init__()
        self.embedding = nn.Embedding.from_pretrained(table.float(), freeze=True)
        self.config = StaticConfig(table.shape[1], max_length or NO_LIMIT)

    @property
    def encoder(self) -> StaticEncoder:
        """The trunk the engine calls: this module."""
        return self

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> StaticOutput:
        """(B, T) ids → `StaticOutput` with (B, T, D) rows (the mask is the pooling's)."""
        return StaticOutput(self.embedding(input_ids.long()))


class StaticTokenizer:
    """The tokenizer of a static model: ``tokenizers`` without special tokens, cut and
    filtered by the directory's rule (`MODEL2VEC` or `SENTENCE_TRANSFORMERS`; see the
    module). Called as the engine's tokenizer (`inference.batches.tokenize_rows`)."""

    model_max_length = None
    all_special_ids: list[int] = []

    def __init__(self, backend: tokenizers.Tokenizer, rule: str) -> None:
        self.backend = backend
        self.rule = rule
        backend.no_padding()
        backend.no_truncation()
        vocab = sorted(backend.get_vocab().items(), key=lambda kv: kv[1])
        # model2vec cuts a text to max_length × this many characters before tokenizing
        self.median_token_length = int(np.median([len(t) for t, _ in vocab])) if vocab else 1
        self.unk_id = _unk_id(backend) if rule == MODEL2VEC else None

    def __len__(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    def __call__(
        self,
        texts: list[str],
        pairs: list[str] | None = None,
        *,
        max_length: int | None = None,
        padding: bool = True,
        return_tensors: str | None = "pt",
        return_truncated: bool = False,
        truncation_side: str = "right",
    ) -> dict[str, Any]:
        """Token ids of ``texts`` (no special tokens), cut to ``max_length`` tokens.

        Returns:
            ``input_ids`` and ``attention_mask`` (lists, or (B, T) int64 tensors padded with 0
            when ``padding`` and ``return_tensors="pt"``), and ``truncated`` if asked.

        Raises:
            InputError: text pairs (a static model embeds single texts).
        """
        if pairs is not None:
            raise InputError("a static embedding model embeds single texts, not pairs")
        texts = [texts] if isinstance(texts, str) else list(texts)
        limit = max_length if max_length is not None and max_length < NO_LIMIT else None
        cut_chars = [False] * len(texts)
        if limit is not None and self.rule == MODEL2VEC:
            keep = limit * self.median_token_length
            cut_chars = [len(t) > keep for t in texts]
            texts = [t[:keep] for t in texts]
        if limit is None:
            self.backend.no_truncation()
        else:
            self.backend.enable_truncation(limit, direction=truncation_side)
        try:
            encodings = self.backend.encode_batch(texts, add_special_tokens=False)
        finally:
            self.backend.no_truncation()
        ids = [e.ids for e in encodings]
        if self.unk_id is not None:
            ids = [[i for i in row if i != self.unk_id] for row in ids]
        out: dict[str, Any] = {"input_ids": ids, "attention_mask": [[1] * len(r) for r in ids]}
        if padding and return_tensors == "pt":
            out = {k: torch.tensor(v) for k, v in self.pad_rows(out, max(map(len, ids))).items()}
        if return_truncated:
            out["truncated"] = [bool(e.overflowing) or c for e, c in zip(encodings, cut_chars)]
        return out

    def pad_rows(self, fields: dict[str, list[list[Any]]], target: int) -> dict[str, list[list]]:
        """Right-pad every row to ``target`` with 0 (masked out of the mean)."""
        return {k: [list(r) + [0] * (target - len(r)) for r in v] for k, v in fields.items()}


def _unk_id(backend: tokenizers.Tokenizer) -> int | None:
    """The unknown token's id, which model2vec drops from every text (None: no such token)."""
    model = json.loads(backend.to_str())["model"]
    if "unk_token" in model:
        return backend.token_to_id(model["unk_token"]) if model["unk_token"] else None
    return model.get("unk_id")


def _read_state(directory: Path) -> dict[str, torch.Tensor]:
    """The tensors of ``model.safetensors`` (else ``pytorch_model.bin``, ``weights_only``):
    float or int8 rows, int64 mappings (which the encoders' weight check refuses).

    Raises:
        ModelDirectoryError: neither file, or one that cannot be read (names it).
    """
    from safetensors.torch import load_file

    for name in ("model.safetensors", "pytorch_model.bin"):
        file = directory / name
        if not file.is_file():
            continue
        try:
            if name.endswith(".safetensors"):
                return load_file(str(file))
            state = torch.load(file, map_location="cpu", weights_only=True)
        except Exception as e:  # both libraries raise several kinds for a bad file
            raise ModelDirectoryError(f"{file} cannot be read: {e}") from None
        if not isinstance(state, dict) or not all(
            isinstance(v, torch.Tensor) for v in state.values()
        ):
            raise ModelDirectoryError(f"{file} does not hold a dict of tensors")
        return state
    raise ModelDirectoryError(f"{directory} has no model.safetensors or pytorch_model.bin")


def _table(directory: Path) -> torch.Tensor:
    """The (V, D) float32 rows of every token id, the model2vec mapping and weights folded."""
    state = _read_state(directory)
    keys = set(state)
    # sentence-transformers also reads model2vec's names (folding mapping and weights)
    if keys != _ST_KEYS and ("embeddings" not in keys or not keys <= _M2V_KEYS):
        raise SentenceModulesError(
            f"{directory}: a static model stores {sorted(_ST_KEYS)} (sentence-transformers) or "
            f"{sorted(_M2V_KEYS)} (model2vec), found {sorted(keys)}"
        )
    table = state.get("embedding.weight", state.get("embeddings"))
    if table.ndim != 2 or not (table.dtype.is_floating_point or table.dtype == torch.int8):
        raise SentenceModulesError(
            f"{directory}: the embeddings must be a (V, D) float or int8 matrix, got "
            f"{tuple(table.shape)} {table.dtype}"
        )
    table = table.float()
    if "mapping" in state:
        mapping = state["mapping"].long()
        if (
            mapping.ndim != 1
            or len(mapping)
            and not 0 <= int(mapping.min()) <= int(mapping.max()) < len(table)
        ):
            raise SentenceModulesError(f"{directory}: the token mapping points outside the table")
        table = table[mapping]
    if "weights" in state:
        weights = state["weights"].float()
        if weights.shape != (len(table),):
            raise SentenceModulesError(
                f"{directory}: {len(weights)} token weights for {len(table)} tokens"
            )
        table = table * weights[:, None]
    return table.contiguous()


def load_static(
    module_dir: Path, rule: str, max_length: int | None = None
) -> tuple[StaticEncoder, StaticTokenizer]:
    """The trunk and tokenizer of a static module directory (``model.safetensors`` and
    ``tokenizer.json``), run by ``rule`` (`MODEL2VEC` or `SENTENCE_TRANSFORMERS`).

    Args:
        max_length: the token limit (model2vec's config ``max_length``); None: the
            ``tokenizer.json``'s stored truncation (sentence-transformers keeps it), else none.

    Raises:
        SentenceModulesError: weights under other names, not a (V, D) matrix, a mapping or
            weights that do not fit, or a table whose rows are not the vocabulary's size.
        TokenizerNotFoundError / TokenizerFileError: ``tokenizer.json`` missing or unreadable.
    """
    module_dir = Path(module_dir)
    file = module_dir / "tokenizer.json"
    if not file.is_file():
        raise TokenizerNotFoundError(f"{module_dir}: a static model needs tokenizer.json")
    try:
        backend = tokenizers.Tokenizer.from_file(str(file))
    except Exception as e:  # the library raises a bare Exception for every bad file
        raise TokenizerFileError(
            f"{file} is not a tokenizer the tokenizers library reads: {e}"
        ) from None
    if rule == SENTENCE_TRANSFORMERS and max_length is None and backend.truncation:
        max_length = backend.truncation["max_length"]
    table = _table(module_dir)
    vocab = backend.get_vocab_size(with_added_tokens=True)
    if len(table) != vocab:
        raise SentenceModulesError(
            f"{module_dir}: {len(table)} embedding rows for a vocabulary of {vocab} tokens"
        )
    return StaticEncoder(table, max_length), StaticTokenizer(backend, rule)


def vocabulary_tokenizer(backend: tokenizers.Tokenizer, keep: list[int]) -> str:
    """``backend`` as ``tokenizer.json`` text with only the token ids ``keep`` (ascending),
    renumbered 0.. in that order; no post-processor (static models add no special tokens), no
    padding, truncation at model2vec's 512 tokens (what it saves, so sentence-transformers
    cuts there too); a byte-level pre-tokenizer adds a prefix space (as model2vec's distill
    sets it: a text's first word is read as a word inside a text). WordPiece, BPE (merges that
    need a removed token dropped), WordLevel and Unigram models.

    Raises:
        InputError: another tokenizer model.
    """
    data = json.loads(backend.to_str())
    model = data["model"]
    new_id = {old: new for new, old in enumerate(keep)}
    kind = model.get("type")
    if kind in ("WordPiece", "BPE", "WordLevel"):
        gone = {t for t, i in model["vocab"].items() if i not in new_id}
        model["vocab"] = {t: new_id[i] for t, i in model["vocab"].items() if i in new_id}
        if kind == "BPE" and gone:  # a merge that makes or uses a removed token goes too
            merges = [m if isinstance(m, list) else m.split(" ") for m in model.get("merges", [])]
            model["merges"] = [
                m for m in merges if not (gone.intersection(m) or "".join(m) in gone)
            ]
    elif kind == "Unigram":
        model["vocab"] = [p for i, p in enumerate(model["vocab"]) if i in new_id]
        if model.get("unk_id") is not None:
            model["unk_id"] = new_id.get(model["unk_id"])
    else:
        raise InputError(f"cannot reduce the vocabulary of a {kind} tokenizer")
    data["added_tokens"] = [
        dict(t, id=new_id[t["id"]]) for t in data.get("added_tokens", []) if t["id"] in new_id
    ]
    data["post_processor"] = None
    data["padding"] = None
    _prefix_space(data.get("pre_tokenizer"))
    data["truncation"] = {
        "direction": "Right",
        "max_length": MODEL2VEC_MAX_LENGTH,
        "strategy": "LongestFirst",
        "stride": 0,
    }
    return json.dumps(data, ensure_ascii=False)


def _prefix_space(pre_tokenizer: dict | None) -> None:
    """Set ``add_prefix_space`` on every ByteLevel step of a pre-tokenizer (JSON), in place."""
    if not isinstance(pre_tokenizer, dict):
        return
    if pre_tokenizer.get("type") == "ByteLevel":
        pre_tokenizer["add_prefix_space"] = True
    for step in pre_tokenizer.get("pretokenizers") or []:
        _prefix_space(step)


def write_static(
    directory: str | Path,
    embeddings: np.ndarray,
    tokenizer_json: str,
    *,
    normalize: bool = True,
    config: dict[str, Any] | None = None,
) -> Path:
    """Save a static model in model2vec's layout, which model2vec (``StaticModel
    .from_pretrained``), sentence-transformers (``SentenceTransformer``: ``StaticEmbedding``
    then ``Normalize``) and `embed.SentenceEmbedder` load: ``model.safetensors``
    (``embeddings`` (V, D) float32), ``tokenizer.json``, ``config.json`` (``model_type:
    model2vec``, ``normalize``, ``max_length`` 512, ``hidden_dim``, ``embedding_dtype`` and
    ``config``'s fields), ``modules.json``. Written all-or-nothing (`files.atomic_directory`).

    Raises:
        InputError: ``embeddings`` not a finite (V, D) matrix, or V not the tokenizer's size.
    """
    from safetensors.numpy import save_file

    table = np.ascontiguousarray(embeddings, dtype=np.float32)
    backend = tokenizers.Tokenizer.from_str(tokenizer_json)
    if table.ndim != 2 or not np.isfinite(table).all():
        raise InputError(f"embeddings must be a finite (V, D) matrix, got shape {table.shape}")
    if len(table) != backend.get_vocab_size(with_added_tokens=True):
        raise InputError(
            f"{len(table)} embedding rows for {backend.get_vocab_size(True)} tokenizer tokens"
        )
    settings = {"model_type": MODEL2VEC, "architectures": ["StaticModel"], **(config or {})}
    settings |= {
        "hidden_dim": int(table.shape[1]),
        "normalize": bool(normalize),
        "max_length": MODEL2VEC_MAX_LENGTH,
        "embedding_dtype": "float32",
    }
    modules = [{"idx": 0, "name": "0", "path": ".", "type": STATIC_MODULE}]
    if normalize:
        modules.append({"idx": 1, "name": "1", "path": "1_Normalize", "type": _ST_NORMALIZE})
    with atomic_directory(Path(directory), keep_existing=False) as tmp:
        atomic_write(tmp / "model.safetensors", lambda p: save_file({"embeddings": table}, str(p)))
        write_text_atomic(tmp / "tokenizer.json", tokenizer_json)
        write_text_atomic(tmp / "config.json", json.dumps(settings, indent=2) + "\n")
        write_text_atomic(tmp / "modules.json", json.dumps(modules, indent=2) + "\n")
    return Path(directory)
