"""Late interaction (ColBERT): every token of a text becomes a vector; a query scores a document
by MaxSim (`heads.late_interaction.maxsim`).

ColBERT (Khattab & Zaharia 2020, §3.1–3.3) and ColBERTv2 (Santhanam et al. 2022) encode a text
as its encoder's last hidden state, projected token by token by a bias-free Linear H → D and
L2-normalised. Queries and documents differ only in their inputs (§3.2):

- a marker token after [CLS]: ``[Q] `` for queries, ``[D] `` for documents (added tokens of
  the tokenizer);
- queries are padded to ``query_length`` with [MASK] ("query augmentation"); the [MASK]
  tokens are encoded (and scored) but, unless ``attend_to_expansion_tokens``, no token
  attends to them;
- documents are cut to ``document_length`` and their punctuation tokens (``skiplist_words``)
  are dropped after encoding (§3.2, "filter out the embeddings corresponding to punctuation").

The directories read here are those PyLate's ``ColBERT.save`` writes: a sentence-transformers
``modules.json`` of one Transformer (at the root) and the Dense projection(s), and
``config_sentence_transformers.json`` with the settings above (`ColBERTSettings`). The
encoder, its tokenizer, dtype and kernels load through `SentenceEmbedder` (the one loader),
and every batch runs through the engine's loop (`inference.batches.run_batches`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import string
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ...checkpoints.io import inside, read_json_file
from ...errors import InputError, ModelDirectoryError, SentenceModulesError
from ...heads.late_interaction import maxsim
from ...inference.batches import (
    FEATURE_KEYS,
    TokenRows,
    eval_mode,
    run_batches,
    text_list,
    tokenize_rows,
)
from ...inference.limits import input_limit
from ...resources.resolve import resolve_model
from ..reranking.rerank import RankedDocument, check_top_k, ranked_documents
from .embed import SentenceEmbedder
from .sentence_modules import (
    MODEL_SETTINGS_FILE,
    MODULES_FILE,
    PoolingSpec,
    SentenceModules,
    _dense,
    _prompts,
    _settings,
)

__all__ = [
    "ColBERTEncoder",
    "ColBERTSettings",
    "encode_multivector",
    "is_colbert_directory",
    "maxsim_scores",
    "padded_matrices",
    "read_colbert",
]

#: The module types `ColBERTEncoder.save` writes (PyLate's).
_TRANSFORMER_TYPE = "sentence_transformers.models.Transformer"
_DENSE_TYPE = "pylate.models.Dense.Dense"
#: The keys of config_sentence_transformers.json that make a directory a ColBERT one.
_COLBERT_KEYS = ("query_prefix", "document_prefix", "query_length", "document_length")


@dataclass(frozen=True)
class ColBERTSettings:
    """How a ColBERT model builds its inputs (PyLate's ``config_sentence_transformers.json``;
    the defaults are PyLate's for a key the file lacks).

    Attributes:
        query_prefix: the query marker, a token of the tokenizer ("" = none).
        document_prefix: the document marker ("" = none).
        query_length: query tokens, marker and special tokens included; with
            ``do_query_expansion`` every query is padded to it with [MASK].
        document_length: the most document tokens, marker and special tokens included.
        do_query_expansion: pad queries with [MASK] to ``query_length`` (ColBERT §3.2).
        attend_to_expansion_tokens: let every token attend to the [MASK] tokens (False: they
            attend to the text but nothing attends to them, as in ColBERT). Only with
            ``do_query_expansion``.
        skiplist_words: tokens dropped from documents after encoding (punctuation).
    """

    query_prefix: str = "[Q] "
    document_prefix: str = "[D] "
    query_length: int = 32
    document_length: int = 180
    do_query_expansion: bool = True
    attend_to_expansion_tokens: bool = False
    skiplist_words: tuple[str, ...] = tuple(string.punctuation)

    @classmethod
    def from_json(cls, cfg: dict[str, Any], source: Path) -> ColBERTSettings:
        """The settings of a parsed config_sentence_transformers.json.

        Raises:
            SentenceModulesError: a value of the wrong type or out of range (names ``source``).
        """
        default = cls()
        values: dict[str, Any] = {}
        for key in ("query_prefix", "document_prefix"):
            value = cfg.get(key, getattr(default, key))
            if not isinstance(value, str):
                raise SentenceModulesError(f"{source}: {key} must be a string, got {value!r}")
            values[key] = value
        for key in ("query_length", "document_length"):
            value = cfg.get(key, getattr(default, key))
            if isinstance(value, bool) or not isinstance(value, int) or value < 3:
                raise SentenceModulesError(
                    f"{source}: {key} must be an integer >= 3 ([CLS], marker, [SEP]), got {value!r}"
                )
            values[key] = value
        for key in ("do_query_expansion", "attend_to_expansion_tokens"):
            value = cfg.get(key, getattr(default, key))
            if value is None:
                value = getattr(default, key)
            if not isinstance(value, bool):
                raise SentenceModulesError(f"{source}: {key} must be true or false, got {value!r}")
            values[key] = value
        words = cfg.get("skiplist_words", default.skiplist_words)
        if words is None:
            words = default.skiplist_words
        if not isinstance(words, list | tuple) or not all(isinstance(w, str) for w in words):
            raise SentenceModulesError(f"{source}: skiplist_words must be a list of strings")
        values["skiplist_words"] = tuple(words)
        if not values["do_query_expansion"]:  # PyLate: no expansion tokens to attend to
            values["attend_to_expansion_tokens"] = False
        return cls(**values)


def _colbert_files(path: Path) -> tuple[list[Any], dict[str, Any]] | None:
    """(modules.json entries, config_sentence_transformers.json) of a ColBERT directory, or
    None for any other directory."""
    modules_file, settings_file = path / MODULES_FILE, path / MODEL_SETTINGS_FILE
    if not modules_file.is_file() or not settings_file.is_file():
        return None
    try:
        entries = json.loads(modules_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(entries, list):
        return None
    settings = read_json_file(settings_file, "the sentence-transformers model settings")
    types = [e.get("type", "") if isinstance(e, dict) else "" for e in entries]
    pylate = any(t.startswith("pylate.") for t in types)
    if not pylate and not any(k in settings for k in _COLBERT_KEYS):
        return None
    return entries, settings


def is_colbert_directory(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a ColBERT directory as PyLate saves it: a ``modules.json`` with a
    PyLate module, or a ``config_sentence_transformers.json`` with ColBERT's settings
    (``query_prefix``, ``query_length``, ...)."""
    path = Path(path)
    return path.is_dir() and _colbert_files(path) is not None


def read_colbert(path: str | os.PathLike[str]) -> tuple[SentenceModules, ColBERTSettings]:
    """Read a ColBERT directory (PyLate's layout) into the encoder's modules and its settings.

    The modules must be one Transformer, then one or more Dense projections (sentence-
    transformers' or PyLate's ``Dense``, without residual), applied token by token; the
    result's `SentenceModules` has no pooling (its ``pooling`` is a placeholder).

    Raises:
        SentenceModulesError: not a ColBERT directory (says what it is instead), other
            modules, a Dense we cannot run, bad settings.
        ModelDirectoryError: a file that is not valid JSON.
    """
    path = Path(path)
    found = _colbert_files(path) if path.is_dir() else None
    if found is None:
        raise SentenceModulesError(
            f"{path} is not a ColBERT directory: it needs a modules.json and a "
            "config_sentence_transformers.json with ColBERT's settings (query_prefix, "
            "query_length, ...), as PyLate's ColBERT.save writes them"
        )
    entries, cfg = found
    modules_file = path / MODULES_FILE
    kinds = [e.get("type", "").rsplit(".", 1)[-1] if isinstance(e, dict) else "" for e in entries]
    if len(kinds) < 2 or kinds[0] != "Transformer" or any(k != "Dense" for k in kinds[1:]):
        raise SentenceModulesError(
            f"{modules_file}: modules {kinds}; a ColBERT model is one Transformer, then Dense "
            "projections"
        )
    dirs = [inside(path, e["path"], modules_file) if e.get("path") else path for e in entries]
    max_len, lower = _settings(dirs[0])
    dense = tuple(_dense(d) for d in dirs[1:])
    prompts, default = _prompts(path)
    modules = SentenceModules(
        dirs[0], PoolingSpec(normalize=True), dense, lower, prompts, default, None, max_len
    )
    if cfg.get("similarity_fn_name", "MaxSim") not in ("MaxSim", None):
        raise SentenceModulesError(
            f"{path / MODEL_SETTINGS_FILE}: similarity_fn_name is "
            f"{cfg['similarity_fn_name']!r}; a ColBERT model scores by MaxSim"
        )
    return modules, ColBERTSettings.from_json(cfg, path / MODEL_SETTINGS_FILE)


class ColBERTEncoder(nn.Module):
    """Text → token matrices of a ColBERT model directory (PyLate's layout), equal to PyLate's
    ``ColBERT.encode(..., is_query=True/False)`` (≤ 1e-5 in fp32): one (T_i, D) float32
    L2-normalised matrix per text. For inference (`encode`, `score`, `rank`) and training
    (`features` then `forward`, with gradients).

    The encoder, its tokenizer (with the ``[Q] ``/``[D] `` markers), dtype, kernels and thread
    policy are `SentenceEmbedder`'s (kept in ``embedder``); the projection is its Dense
    layers, applied to every token.

    Training: ``batch = encoder.features(texts, is_query=...)`` then
    ``vectors, keep = encoder(**batch, is_query=...)`` gives (B, T, D) unit vectors with
    gradients and the (B, T) mask MaxSim counts (`heads.late_interaction.maxsim`); `save`
    writes PyLate's layout. Queries whose [MASK] tokens nobody attends to run the trunk on the
    padded batch (the encoder's ``unpad`` switched off for that call), so one encoder must
    not encode such queries from two threads at once.

    Args:
        model_dir: a ColBERT directory (``pylate.models.ColBERT(...).save(dir)``), a fetched
            resource name, or ``org/name`` in the local Hugging Face cache.
        query_length: override of the directory's ``query_length``.
        document_length: override of the directory's ``document_length``.
        dtype: encoder parameter dtype (`SentenceEmbedder`'s: "auto" = fp32, "bf16", ...).
        device: torch device.
        revision: for a cache id, a branch, tag or commit.
        linear_kernel: the CPU kernel of the Linear layers (`SentenceEmbedder`'s).
        threads: torch intra-op threads (0 = the engine's thread policy).

    Attributes:
        settings: the `ColBERTSettings` in force (overrides applied, lengths capped by the
            model's position table).
        dimension: D, the width of every token vector.

    Raises:
        SentenceModulesError: not a ColBERT directory, or modules we cannot run.
        ModelDirectoryError: a marker that is not a token of the tokenizer, or no [MASK]
            token for query expansion.
        InputError: a length < 3.
        ModelNotFoundError / CheckpointError / TokenizerNotFoundError: see the loaders.
    """

    def __init__(
        self,
        model_dir: str | os.PathLike[str],
        *,
        query_length: int | None = None,
        document_length: int | None = None,
        dtype: str | torch.dtype | None = "auto",
        device: str | torch.device = "cpu",
        revision: str | None = None,
        linear_kernel: str = "auto",
        threads: int = 0,
    ) -> None:
        super().__init__()
        path = resolve_model(model_dir, revision)
        modules, settings = read_colbert(path)
        for name, value in (("query_length", query_length), ("document_length", document_length)):
            if value is not None and (isinstance(value, bool) or value < 3):
                raise InputError(f"{name} must be >= 3 ([CLS], marker, [SEP]), got {value!r}")
        self.embedder = SentenceEmbedder(
            path,
            dtype=dtype,
            device=device,
            linear_kernel=linear_kernel,
            threads=threads,
            sentence_modules=modules,
        )
        self.path = path
        self.eval()
        tok, config = self.embedder.tokenizer, self.embedder.model.config
        # the position table caps both lengths, as it caps every pipeline's input
        self.settings = ColBERTSettings(
            query_prefix=settings.query_prefix,
            document_prefix=settings.document_prefix,
            query_length=input_limit(config, tok, query_length or settings.query_length),
            document_length=input_limit(config, tok, document_length or settings.document_length),
            do_query_expansion=settings.do_query_expansion,
            attend_to_expansion_tokens=settings.attend_to_expansion_tokens,
            skiplist_words=settings.skiplist_words,
        )
        self.query_prefix_id = self._marker(settings.query_prefix)
        self.document_prefix_id = self._marker(settings.document_prefix)
        self.mask_token_id = tok.mask_token_id
        if settings.do_query_expansion and self.mask_token_id is None:
            raise ModelDirectoryError(
                f"{path}: query expansion pads queries with [MASK], and this tokenizer has no "
                "mask token"
            )
        # as PyLate (tokenizer.convert_tokens_to_ids): a word not in the vocabulary is [UNK]
        skip = {tok.convert_tokens_to_ids(w) for w in settings.skiplist_words}
        self.register_buffer(
            "skiplist_ids", torch.tensor(sorted(i for i in skip if i is not None)), persistent=False
        )
        self.skiplist_ids = self.skiplist_ids.to(self.embedder.device)
        self.dimension = self.embedder.dimension

    def _marker(self, text: str) -> int | None:
        if not text:
            return None
        found = self.embedder.tokenizer.backend.token_to_id(text)
        if found is None:
            raise ModelDirectoryError(
                f"{self.path}: the marker {text!r} is not a token of its tokenizer (PyLate's "
                "ColBERT.save adds it; was the tokenizer replaced?)"
            )
        return found

    @property
    def tokenizer(self):
        """The `tokenization.Tokenizer` (markers included)."""
        return self.embedder.tokenizer

    @property
    def device(self) -> torch.device:
        """Where the model runs."""
        return self.embedder.device

    # --- inputs -----------------------------------------------------------------------------

    def tokenize(self, texts: Sequence[str], *, is_query: bool) -> TokenRows:
        """The one tokenization of an `encode` (PyLate's ``ColBERT.tokenize``): the default
        prompt (if the directory names one) prepended, cut to the length less the marker, the
        marker inserted after [CLS]; queries padded to ``query_length`` with [MASK] when
        ``do_query_expansion`` (attention 0 on them unless ``attend_to_expansion_tokens``).

        Returns:
            `TokenRows` (unpadded, except the queries' [MASK] tokens).

        Raises:
            InputError: ``texts`` not strings.
        """
        s = self.settings
        texts = text_list(texts)
        prompts = self.embedder.prompts
        prefix = prompts.get(self.embedder.default_prompt_name or "", "") or ""
        marker = self.query_prefix_id if is_query else self.document_prefix_id
        length = s.query_length if is_query else s.document_length
        rows = tokenize_rows(
            self.tokenizer,
            [prefix + t for t in texts],
            max_length=length - (marker is not None),
        )
        if marker is not None:
            fill = {"input_ids": marker, "attention_mask": 1, "token_type_ids": 0}
            for key, values in rows.rows.items():
                for row in values:
                    row.insert(1, fill[key])
        if is_query and s.do_query_expansion:
            fill = {
                "input_ids": self.mask_token_id,
                "attention_mask": int(s.attend_to_expansion_tokens),
                "token_type_ids": 0,
            }
            for key, values in rows.rows.items():
                for row in values:
                    row.extend([fill[key]] * (length - len(row)))
        return rows

    def features(self, texts: Sequence[str], *, is_query: bool) -> dict[str, torch.Tensor]:
        """The encoder inputs of ``texts`` for a training step (`tokenize`, right-padded to
        the longest row): (B, T) int64 ``input_ids``, ``attention_mask`` (and
        ``token_type_ids``), on the model's device.

        Raises:
            InputError: no texts, or texts not strings.
        """
        rows = self.tokenize(_nonempty(texts), is_query=is_query)
        padded = self.tokenizer.pad_rows(rows.rows, max(rows.lengths))
        return {
            k: torch.tensor(v, dtype=torch.long, device=self.device)
            for k, v in padded.items()
            if k in FEATURE_KEYS
        }

    # --- the model --------------------------------------------------------------------------

    @contextlib.contextmanager
    def _keep_padding(self, attention_mask: torch.Tensor, is_query: bool) -> Iterator[None]:
        """Run the trunk on the padded batch when unattended [MASK] tokens must be encoded
        (the unpadded path computes no state for a token no one attends to)."""
        encoder = self.embedder.model.encoder
        expansion = is_query and self.settings.do_query_expansion
        if not expansion or bool(attention_mask.all()) or not encoder.unpad:
            yield
            return
        encoder.unpad = False
        try:
            yield
        finally:
            encoder.unpad = True

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        *,
        is_query: bool,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Token vectors of a batch (`features` or `tokenize` rows), with gradients when
        enabled.

        Args:
            input_ids: (B, T) int64, markers (and queries' [MASK] tokens) included.
            attention_mask: (B, T) 0/1, 1 = a token others attend to.
            token_type_ids: (B, T) int64 or None.
            is_query: queries (every token is kept, [MASK] included, under query expansion)
                or documents (padding and skiplist tokens are not kept).

        Returns:
            (vectors, keep): (B, T, D) float32 L2-normalised token vectors (ColBERT §3.1:
            encoder → Linear H → D → L2 norm), and (B, T) bool, True = a token that counts in
            MaxSim (`heads.late_interaction.maxsim`'s masks).
        """
        extra = {} if token_type_ids is None else {"token_type_ids": token_type_ids}
        with self._keep_padding(attention_mask, is_query):
            hidden = self.embedder.model.encoder(
                input_ids=input_ids, attention_mask=attention_mask, **extra
            ).last_hidden_state  # (B, T, H)
        vectors = self.embedder.dense(hidden.float())  # (B, T, D)
        vectors = torch.nn.functional.normalize(vectors, p=2, dim=-1)
        if is_query and self.settings.do_query_expansion:
            keep = torch.ones_like(input_ids, dtype=torch.bool)
        elif is_query:
            keep = attention_mask.bool()
        else:
            skip = torch.isin(input_ids, self.skiplist_ids.to(input_ids.device))
            keep = attention_mask.bool() & ~skip
        return vectors, keep

    # --- inference --------------------------------------------------------------------------

    @torch.inference_mode()
    def encode_tokenized(
        self,
        tokens: TokenRows,
        *,
        is_query: bool,
        batch_size: int = 32,
        max_batch_tokens: int | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> list[np.ndarray]:
        """One (T_i, D) float32 matrix per row of `tokenize`, in their order, through the
        engine's batch loop; T_i counts the kept tokens (see `forward`).

        Raises:
            NonFiniteOutputError: a NaN or infinite vector (rows named).
        """
        out: list[np.ndarray] = [np.zeros((0, self.dimension), np.float32)] * len(tokens)
        lengths = tokens.lengths

        def step(batch: dict[str, torch.Tensor]) -> tuple[np.ndarray, np.ndarray]:
            vectors, keep = self(**batch, is_query=is_query)
            return vectors.cpu().numpy(), keep.cpu().numpy()

        with eval_mode(self):
            for idx, (vectors, keep) in run_batches(
                tokens,
                step,
                pad=self.tokenizer.pad_rows,
                batch_size=batch_size,
                max_batch_tokens=max_batch_tokens,
                device=self.device,
                keys=FEATURE_KEYS,
                progress=progress,
                threads=self.embedder.threads,
            ):
                for row, i in enumerate(idx):
                    n = lengths[i]
                    out[i] = vectors[row, :n][keep[row, :n]]
        if out:
            self.embedder._check_finite(np.stack([m.sum(0) for m in out]))
        return out

    def encode(
        self,
        texts: Sequence[str] | str,
        *,
        is_query: bool,
        batch_size: int = 32,
        max_batch_tokens: int | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> list[np.ndarray]:
        """Token matrices of ``texts``: one (T_i, D) float32 L2-normalised array per text
        (one array for a bare string), as PyLate's ``ColBERT.encode(texts, is_query=...)``.

        Raises:
            InputError: no texts, texts not strings, ``batch_size`` < 1.
            NonFiniteOutputError: a NaN or infinite vector.
        """
        one = isinstance(texts, str)
        texts = _nonempty([texts] if one else texts)
        if batch_size < 1:
            raise InputError(f"batch_size must be >= 1, got {batch_size}")
        tokens = self.tokenize(texts, is_query=is_query)
        out = self.encode_tokenized(
            tokens,
            is_query=is_query,
            batch_size=batch_size,
            max_batch_tokens=max_batch_tokens,
            progress=progress,
        )
        return out[0] if one else out

    def encode_queries(self, texts: Sequence[str] | str, **kwargs) -> list[np.ndarray]:
        """`encode` with ``is_query=True``."""
        return self.encode(texts, is_query=True, **kwargs)

    def encode_documents(self, texts: Sequence[str] | str, **kwargs) -> list[np.ndarray]:
        """`encode` with ``is_query=False``."""
        return self.encode(texts, is_query=False, **kwargs)

    def score(
        self, queries: Sequence[str], documents: Sequence[str], *, batch_size: int = 32
    ) -> np.ndarray:
        """(Q, N) float32 MaxSim scores of every query against every document (ColBERT
        Eq. 3, summed over query tokens; `maxsim_scores`).

        Raises:
            InputError: no queries or no documents.
        """
        q = self.encode(queries, is_query=True, batch_size=batch_size)
        d = self.encode(documents, is_query=False, batch_size=batch_size)
        return maxsim_scores(q, d)

    def rank(
        self,
        query: str,
        documents: Sequence[str],
        top_k: int | None = None,
        return_documents: bool = False,
        *,
        batch_size: int = 32,
    ) -> list[RankedDocument]:
        """The documents ordered by MaxSim against ``query``, best first (ties keep input
        order), as `reranking.rerank.Reranker.rank` (and PyLate's ``rank.rerank``).

        Returns:
            `RankedDocument` dicts ``{"corpus_id", "score"[, "text"]}``.

        Raises:
            InputError: no documents, a query that is not a string, ``top_k`` < 1.
        """
        if not isinstance(query, str):
            raise InputError(f"query must be a string, got {type(query).__name__}")
        check_top_k(top_k)
        documents = _nonempty(documents, "documents")
        scores = self.score([query], documents, batch_size=batch_size)[0]
        return ranked_documents(scores, documents, top_k, return_documents)

    def save(self, directory: str | os.PathLike[str]) -> Path:
        """Write the model as PyLate's ``ColBERT.save`` lays it out (what `read_colbert` and
        PyLate read): the encoder and its tokenizer (markers included) at the root, each
        projection in ``k_Dense/`` (PyLate's Dense type), ``modules.json``,
        ``sentence_bert_config.json`` and ``config_sentence_transformers.json`` with the
        settings. Every file is written atomically. Returns the directory.

        Raises:
            UnsafePathError: a write would go through a link out of ``directory``.
        """
        from ...files import make_directory_inside, write_text_atomic
        from .saving import _save_dense

        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        e, s = self.embedder, self.settings
        e.model.save_pretrained(d)
        e.tokenizer.save_pretrained(d)
        modules = [{"idx": 0, "name": "0", "path": "", "type": _TRANSFORMER_TYPE}]
        for layer in e.dense:
            i = len(modules)
            modules.append({"idx": i, "name": str(i), "path": f"{i}_Dense", "type": _DENSE_TYPE})
            _save_dense(layer, make_directory_inside(d, d / f"{i}_Dense"), d)
        files = {
            MODULES_FILE: modules,
            "sentence_bert_config.json": {
                "max_seq_length": s.document_length,
                "do_lower_case": e.do_lower_case,
            },
            MODEL_SETTINGS_FILE: {
                "prompts": e.prompts,
                "default_prompt_name": e.default_prompt_name,
                "similarity_fn_name": "MaxSim",
                **{k: v for k, v in dataclasses.asdict(s).items() if k != "skiplist_words"},
                "skiplist_words": list(s.skiplist_words),
            },
        }
        for name, value in files.items():
            write_text_atomic(d / name, json.dumps(value, indent=2) + "\n", inside=d)
        return d


def _nonempty(texts: Any, what: str = "texts") -> list[str]:
    out = text_list(texts, what)
    if not out:
        raise InputError(f"{what} is empty: give at least one text")
    return out


def padded_matrices(matrices: Sequence[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, T, D) float32 tensor of N (T_i, D) matrices right-padded with zeros, and the (N, T)
    bool mask of their real rows.

    Raises:
        InputError: no matrices, or matrices that are not 2-D of one width.
    """
    if not len(matrices):
        raise InputError("no token matrices")
    widths = {m.shape[1] if getattr(m, "ndim", 0) == 2 else None for m in matrices}
    if len(widths) != 1 or None in widths:
        raise InputError(f"token matrices must be 2-D (T_i, D) of one D, got widths {widths}")
    longest = max(1, max(len(m) for m in matrices))
    out = torch.zeros(len(matrices), longest, widths.pop(), dtype=torch.float32)
    mask = torch.zeros(len(matrices), longest, dtype=torch.bool)
    for i, m in enumerate(matrices):
        out[i, : len(m)] = torch.as_tensor(np.asarray(m, dtype=np.float32))
        mask[i, : len(m)] = True
    return out, mask


def maxsim_scores(
    queries: Sequence[np.ndarray], documents: Sequence[np.ndarray], *, budget: int = 1 << 24
) -> np.ndarray:
    """(Q, N) float32 MaxSim scores of query token matrices against document token matrices
    (`heads.late_interaction.maxsim`, summed), in blocks of queries and documents whose
    (Q, N, Tq, Td) similarity tensor holds at most ``budget`` floats.

    Raises:
        InputError: no queries or documents, or matrices of different widths.
    """
    if not len(queries) or not len(documents):
        raise InputError("no token matrices")
    longest_q = max(len(m) for m in queries)
    longest_d = max(len(m) for m in documents)
    per_pair = max(1, longest_q * longest_d)
    q_block = max(1, min(len(queries), budget // per_pair))
    d_block = max(1, budget // (per_pair * q_block))
    out = np.zeros((len(queries), len(documents)), np.float32)
    for a in range(0, len(queries), q_block):
        q, q_mask = padded_matrices(queries[a : a + q_block])
        for b in range(0, len(documents), d_block):
            d, d_mask = padded_matrices(documents[b : b + d_block])
            if d.shape[-1] != q.shape[-1]:
                raise InputError(f"queries have D={q.shape[-1]}, documents D={d.shape[-1]}")
            out[a : a + q_block, b : b + d_block] = maxsim(q, d, q_mask, d_mask).numpy()
    return out


def encode_multivector(
    encoder: ColBERTEncoder, texts: Sequence[str], *, is_query: bool, batch_size: int = 32
) -> list[np.ndarray]:
    """One (T_i, D) float32 L2-normalised token matrix per text (`ColBERTEncoder.encode`): the
    plain call for the server's multi-vector route.

    Raises:
        InputError: no texts, texts not strings.
    """
    return encoder.encode(list(text_list(texts)), is_query=is_query, batch_size=batch_size)
