"""`BGEM3Encoder`: BGE-M3's three outputs from one encoder pass (Chen et al. 2024,
"M3-Embedding", §3.2 "Hybrid Retrieval"), equal to FlagEmbedding's ``BGEM3FlagModel.encode(
return_dense=True, return_sparse=True, return_colbert_vecs=True)`` and ``compute_score``.

A BGE-M3 directory is a Hugging Face XLM-RoBERTa directory plus two linear heads saved by
``torch.save`` of their state dicts (``weight``, ``bias``) beside it: ``sparse_linear.pt``
(H → 1) and ``colbert_linear.pt`` (H → D). From the trunk's last hidden states h (B, T, H):

- **dense**: the first token's vector h[:, 0], L2-normalised; score: the dot product.
- **sparse** (lexical weights): w_t = ReLU(sparse_linear(h_t)) per token; the weight of a
  vocabulary entry is the largest w_t over its occurrences; the role tokens <s>, </s>, <pad> and
  <unk> (FlagEmbedding's cls, eos, pad, unk) and zero weights are left out; score: the sum of
  w_q · w_d over the entries both texts hold ("lexical matching", §3.2).
- **multi-vector** (ColBERT): colbert_linear(h_t) for every token after the first (the final
  </s> included), L2-normalised, (T - 1, D) per text; score: MaxSim divided by the query's
  vector count (§3.2; `heads.late_interaction.maxsim` with ``reduce="mean"``).

The combined score is FlagEmbedding's weighted mean, Σ_m w_m · s_m / Σ_m w_m over the modes
(dense, sparse, colbert), default weights (1, 1, 1) (`compute_score`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ...checkpoints.io import read_bin
from ...errors import InputError, ModelDirectoryError
from ...heads.late_interaction import maxsim
from ...inference.batches import FEATURE_KEYS, TokenRows, run_batches, text_list, tokenize_rows
from ...inference.limits import checked_max_length, input_limit
from ...inference.loading import load_into
from ...resources.resolve import resolve_model
from .sparse import SparseVector, sparse_dot

__all__ = [
    "HEAD_FILES",
    "MODES",
    "OUTPUTS",
    "BGEM3Encoder",
    "M3Heads",
    "M3Output",
    "combine_scores",
    "is_bge_m3",
    "lexical_matching_score",
    "m3_json_rows",
]

#: The head files a BGE-M3 directory holds beside its XLM-R weights.
HEAD_FILES = ("colbert_linear.pt", "sparse_linear.pt")
#: What `BGEM3Encoder.encode` can return.
OUTPUTS = ("dense", "sparse", "colbert")
#: The score modes of `BGEM3Encoder.compute_score`, FlagEmbedding's keys.
MODES = ("dense", "sparse", "colbert", "sparse+dense", "colbert+sparse+dense")


def is_bge_m3(path: str | os.PathLike[str]) -> bool:
    """Whether the directory ``path`` holds both BGE-M3 head files (`HEAD_FILES`)."""
    return all((Path(path) / name).is_file() for name in HEAD_FILES)


class M3Heads(nn.Module):
    """BGE-M3's heads on the trunk's last hidden states (module docstring).

    Args:
        hidden_size: H.
        colbert_dim: D, the multi-vector width.
    """

    def __init__(self, hidden_size: int, colbert_dim: int) -> None:
        super().__init__()
        self.sparse_linear = nn.Linear(hidden_size, 1)
        self.colbert_linear = nn.Linear(hidden_size, colbert_dim)

    def forward(
        self, last_hidden_state: torch.Tensor, attention_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The three outputs of a padded batch.

        Args:
            last_hidden_state: (B, T, H) float.
            attention_mask: (B, T) 0/1, 1 = a real token.

        Returns:
            dense (B, H), unit rows; token weights (B, T) ≥ 0, 0 at padding; multi-vectors
            (B, T - 1, D), unit rows for real tokens and 0 at padding.
        """
        keep = attention_mask.to(last_hidden_state.dtype)  # (B, T)
        dense = F.normalize(last_hidden_state[:, 0], dim=-1)  # (B, H)
        weights = torch.relu(self.sparse_linear(last_hidden_state)).squeeze(-1) * keep  # (B, T)
        colbert = self.colbert_linear(last_hidden_state[:, 1:]) * keep[:, 1:, None]  # (B, T-1, D)
        return dense, weights, F.normalize(colbert, dim=-1)


@dataclass(frozen=True, eq=False)
class M3Output:
    """The outputs of N texts, in input order; a mode not asked for is None.

    Attributes:
        dense: (N, H) float32 unit rows.
        sparse: N `SparseVector` (vocabulary ids ascending, their weights).
        colbert: N (T_i - 1, D) float32 arrays of unit rows, T_i the text's tokens.
    """

    dense: np.ndarray | None
    sparse: list[SparseVector] | None
    colbert: list[np.ndarray] | None

    def __len__(self) -> int:
        for part in (self.dense, self.sparse, self.colbert):
            if part is not None:
                return len(part)
        return 0


def _token_weights(ids: np.ndarray, weights: np.ndarray, dropped: np.ndarray) -> SparseVector:
    """One text's lexical weights: the largest weight of each vocabulary id, without the
    ``dropped`` ids and zero weights. ``ids`` (T,) int64, ``weights`` (T,) float32."""
    keep = (weights > 0) & ~np.isin(ids, dropped)
    ids, weights = ids[keep], weights[keep]
    unique, inverse = np.unique(ids, return_inverse=True)
    best = np.zeros(len(unique), dtype=np.float32)
    np.maximum.at(best, inverse, weights)
    return SparseVector(unique.astype(np.int64), best)


def lexical_matching_score(a: SparseVector | dict, b: SparseVector | dict) -> float:
    """The lexical matching score of two texts' weights (Chen et al. 2024 §3.2): Σ over
    the vocabulary ids both hold of w_a · w_b.

    Args:
        a: `SparseVector`, or an ``{id: weight}`` dict (FlagEmbedding's ``lexical_weights``,
            whose ids are strings of ints).
        b: the same for the other text.

    Raises:
        InputError: something else, or a dict key that is not an id.
    """
    return sparse_dot(_as_sparse(a), _as_sparse(b))


def _as_sparse(x: SparseVector | dict) -> SparseVector:
    if isinstance(x, SparseVector):
        return x
    if not isinstance(x, dict):
        raise InputError(
            f"lexical weights must be a SparseVector or a dict, got {type(x).__name__}"
        )
    try:
        pairs = sorted((int(k), float(v)) for k, v in x.items())
    except (TypeError, ValueError) as e:
        raise InputError(f"lexical weights need integer ids and float weights: {e}") from e
    ids = np.array([k for k, _ in pairs], dtype=np.int64)
    return SparseVector(ids, np.array([v for _, v in pairs], dtype=np.float32))


def combine_scores(
    dense: np.ndarray,
    sparse: np.ndarray,
    colbert: np.ndarray,
    weights: Sequence[float] = (1.0, 1.0, 1.0),
) -> dict[str, np.ndarray]:
    """FlagEmbedding's five score modes from the three (`MODES`): each alone, (w_s · sparse +
    w_d · dense) / (w_s + w_d) and (w_c · colbert + w_s · sparse + w_d · dense) / Σ w.

    Args:
        dense: float scores, pairs (P,) or a (Q, N) matrix.
        sparse: the same shape.
        colbert: the same shape.
        weights: (w_d, w_s, w_c), in FlagEmbedding's order dense, sparse, colbert.

    Raises:
        InputError: not three finite weights, a negative one, or a zero sum.
    """
    w = _checked_weights(weights)
    return {
        "dense": dense,
        "sparse": sparse,
        "colbert": colbert,
        "sparse+dense": (sparse * w[1] + dense * w[0]) / (w[1] + w[0]),
        "colbert+sparse+dense": (colbert * w[2] + sparse * w[1] + dense * w[0]) / sum(w),
    }


def _checked_weights(weights: Sequence[float]) -> tuple[float, float, float]:
    try:
        w = tuple(float(x) for x in weights)
    except (TypeError, ValueError) as e:
        raise InputError(f"weights must be three numbers (dense, sparse, colbert): {e}") from e
    if len(w) != 3 or not all(np.isfinite(w)) or min(w) < 0 or w[0] + w[1] <= 0:
        raise InputError(
            f"weights must be three finite numbers >= 0 (dense, sparse, colbert), dense + "
            f"sparse > 0, got {tuple(weights)}"
        )
    return w  # type: ignore[return-value]


def _checked_outputs(outputs: Sequence[str] | str) -> tuple[str, ...]:
    chosen = (outputs,) if isinstance(outputs, str) else tuple(outputs)
    unknown = [o for o in chosen if o not in OUTPUTS]
    if unknown or not chosen:
        raise InputError(f"outputs must be some of {', '.join(OUTPUTS)}, got {list(chosen)}")
    return chosen


class BGEM3Encoder:
    """A BGE-M3 directory, ready to give each text its dense vector, lexical weights and
    multi-vectors from one pass of the encoder (module docstring).

    Args:
        path: a directory, resource name or cached ``org/name``: a Hugging Face XLM-RoBERTa
            directory holding ``colbert_linear.pt`` and ``sparse_linear.pt``.
        device: where it runs.
        dtype: the trunk's and heads' parameter dtype, as
            `inference.loading.load_model_and_tokenizer` ("auto": fp32, equal to
            FlagEmbedding with ``use_fp16=False``).
        revision: for a cached ``org/name``: a branch, tag or commit.

    Raises:
        ModelDirectoryError: a head file is missing (all missing files named), unreadable, or
            holds other tensors than a ``weight`` and ``bias`` of H inputs (``sparse``: 1
            output); as `load_model_and_tokenizer` for the trunk.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        device: str | torch.device = "cpu",
        dtype: str | torch.dtype | None = "auto",
        revision: str | None = None,
    ) -> None:
        self.path = resolve_model(path, revision)
        missing = [n for n in ("config.json", *HEAD_FILES) if not (self.path / n).is_file()]
        if missing:
            raise ModelDirectoryError(
                f"{self.path} is not a BGE-M3 directory: it lacks {', '.join(missing)} (a "
                "BGE-M3 directory is an XLM-RoBERTa directory with FlagEmbedding's "
                f"{' and '.join(HEAD_FILES)} beside it)"
            )
        loaded = load_into(self, self.path, device=device, dtype=dtype)
        self.heads = self._read_heads(self.model.config.hidden_size)
        self.heads.to(device=self.device, dtype=loaded.dtype).eval()
        self.max_length = input_limit(self.model.config, self.tokenizer)
        self.dimension = self.model.config.hidden_size
        self.colbert_dim = self.heads.colbert_linear.out_features
        # FlagEmbedding leaves out cls, eos, pad and unk; XLM-R's eos is its separator </s>
        roles = (self.tokenizer.cls_token_id, self.tokenizer.sep_token_id)
        roles += (self.tokenizer.pad_token_id, self.tokenizer.unk_token_id)
        self.dropped_ids = np.array(sorted({i for i in roles if i is not None}), dtype=np.int64)
        self.last_truncated = 0

    def _read_heads(self, hidden: int) -> M3Heads:
        """The two head files as `M3Heads`, every shape checked."""
        states = {}
        for name, rows in (("sparse_linear.pt", 1), ("colbert_linear.pt", None)):
            state = read_bin(self.path / name)
            shapes = {k: tuple(v.shape) for k, v in state.items()}
            d = rows or (shapes.get("weight") or (0,))[0]  # D: the ColBERT width it stores
            if d < 1 or shapes != {"weight": (d, hidden), "bias": (d,)}:
                want = "(1, H) and (1,)" if rows else "(D, H) and (D,)"
                raise ModelDirectoryError(
                    f"{self.path / name} must hold an nn.Linear's weight and bias only, shaped "
                    f"{want} with H = {hidden}, this model's hidden size; it holds {shapes}"
                )
            states[name] = state
        heads = M3Heads(hidden, states["colbert_linear.pt"]["weight"].shape[0])
        heads.colbert_linear.load_state_dict(states["colbert_linear.pt"])
        heads.sparse_linear.load_state_dict(states["sparse_linear.pt"])
        return heads

    def tokenize(
        self,
        texts: Sequence[str],
        *,
        max_length: int | None = None,
        truncation_side: str = "right",
    ) -> TokenRows:
        """The one tokenization of an `encode` (the server calls it once per request and hands
        the rows to `run_tokenized`).

        Args:
            texts: N strings (a bare string is one text).
            max_length: tokens per text, special tokens included (default and most: the
                model's limit, `max_length`; FlagEmbedding's default is 512).
            truncation_side: "right" or "left".

        Raises:
            InputError: texts that are not strings, or ``max_length`` outside [1, limit].
        """
        limit = checked_max_length(max_length, self.max_length)
        return tokenize_rows(
            self.tokenizer, text_list(texts), max_length=limit, truncation_side=truncation_side
        )

    def _step(self, outputs: tuple[str, ...]):
        """The batch step of `run_batches`: a padded batch → each row's asked-for outputs."""

        def step(batch: dict[str, torch.Tensor]) -> list[tuple]:
            hidden = self.model(**batch).last_hidden_state  # (B, T, H)
            dense, weights, colbert = self.heads(hidden, batch["attention_mask"])
            dense, weights, colbert = (x.float().cpu().numpy() for x in (dense, weights, colbert))
            ids = batch["input_ids"].cpu().numpy()
            lengths = batch["attention_mask"].sum(-1).tolist()
            return [
                (
                    dense[r] if "dense" in outputs else None,
                    _token_weights(ids[r], weights[r], self.dropped_ids)
                    if "sparse" in outputs
                    else None,
                    colbert[r, : n - 1].copy() if "colbert" in outputs else None,
                )
                for r, n in enumerate(lengths)
            ]

        return step

    @torch.inference_mode()
    def run_tokenized(
        self,
        tokens: TokenRows,
        *,
        outputs: Sequence[str] | str = OUTPUTS,
        batch_size: int = 32,
        max_batch_tokens: int | None = None,
    ) -> M3Output:
        """The outputs of tokenized texts (`tokenize`), in their order, from one pass of the
        engine's batch loop (`inference.batches.run_batches`); sets ``last_truncated``.

        Args:
            tokens: `TokenRows` of N texts.
            outputs: some of "dense", "sparse", "colbert" (default: all three).
            batch_size: texts per forward pass.
            max_batch_tokens: also cap each batch at this many padded tokens.

        Raises:
            InputError: an unknown output, or ``batch_size`` / ``max_batch_tokens`` < 1.
        """
        chosen = _checked_outputs(outputs)
        if batch_size < 1:
            raise InputError(f"batch_size must be >= 1, got {batch_size}")
        rows: list[tuple | None] = [None] * len(tokens)
        self.last_truncated = sum(tokens.truncated)
        for idx, results in run_batches(
            tokens,
            self._step(chosen),
            pad=self.tokenizer.pad_rows,
            batch_size=batch_size,
            max_batch_tokens=max_batch_tokens,
            device=self.device,
            keys=FEATURE_KEYS,
        ):
            for i, row in zip(idx, results):
                rows[i] = row
        dense = (
            np.stack([r[0] for r in rows]).astype(np.float32, copy=False)
            if "dense" in chosen and rows
            else (np.zeros((0, self.dimension), np.float32) if "dense" in chosen else None)
        )
        return M3Output(
            dense,
            [r[1] for r in rows] if "sparse" in chosen else None,  # type: ignore[index]
            [r[2] for r in rows] if "colbert" in chosen else None,  # type: ignore[index]
        )

    def encode(
        self,
        texts: Sequence[str],
        *,
        outputs: Sequence[str] | str = OUTPUTS,
        batch_size: int = 32,
        max_length: int | None = None,
        truncation_side: str = "right",
        max_batch_tokens: int | None = None,
    ) -> M3Output:
        """Dense vectors, lexical weights and multi-vectors of ``texts`` from one encoder pass:
        `run_tokenized` of `tokenize` (options as there).

        Returns:
            `M3Output`, in input order.

        Raises:
            InputError: as `tokenize` and `run_tokenized`.
        """
        tokens = self.tokenize(texts, max_length=max_length, truncation_side=truncation_side)
        return self.run_tokenized(
            tokens, outputs=outputs, batch_size=batch_size, max_batch_tokens=max_batch_tokens
        )

    def tokens_of(self, vector: SparseVector) -> dict[str, float]:
        """``{token text: weight}`` of one text's lexical weights, each id decoded alone (as
        FlagEmbedding's ``convert_id_to_token``)."""
        return {
            self.tokenizer.decode([i]): w
            for i, w in zip(vector.indices.tolist(), vector.values.tolist())
        }

    def score_matrix(
        self,
        queries: M3Output,
        documents: M3Output,
        weights: Sequence[float] = (1.0, 1.0, 1.0),
    ) -> dict[str, np.ndarray]:
        """Every query against every document in every mode (`MODES`, `combine_scores`).

        Args:
            queries: Q texts' `M3Output` with all three outputs.
            documents: N texts' `M3Output` with all three outputs.
            weights: (dense, sparse, colbert) weights of the combined modes.

        Returns:
            mode → (Q, N) float32 scores.

        Raises:
            InputError: an output is missing, or as `combine_scores`.
        """
        for what, out in (("queries", queries), ("documents", documents)):
            if out.dense is None or out.sparse is None or out.colbert is None:
                raise InputError(f"{what} need all three outputs (encode with outputs=OUTPUTS)")
        dense = queries.dense @ documents.dense.T  # (Q, N)
        sparse = np.array(
            [[sparse_dot(q, d) for d in documents.sparse] for q in queries.sparse],
            dtype=np.float32,
        ).reshape(len(queries), len(documents))
        colbert = self._colbert_scores(queries.colbert, documents.colbert)  # (Q, N)
        return combine_scores(dense, sparse, colbert, weights)

    def _colbert_scores(self, queries: list[np.ndarray], documents: list[np.ndarray]) -> np.ndarray:
        """(Q, N) float32 MaxSim scores divided by each query's vector count."""
        q, q_mask = _padded(queries, self.colbert_dim)
        d, d_mask = _padded(documents, self.colbert_dim)
        return maxsim(q, d, q_mask, d_mask, reduce="mean").numpy()

    def compute_score(
        self,
        pairs: Sequence[tuple[str, str]],
        *,
        weights: Sequence[float] = (1.0, 1.0, 1.0),
        batch_size: int = 32,
        max_query_length: int | None = None,
        max_passage_length: int | None = None,
    ) -> dict[str, list[float]]:
        """FlagEmbedding's ``compute_score``: each (query, passage) pair scored in every mode
        (`MODES`), the queries and the passages each encoded once.

        A passage's padded positions never count in its MaxSim. FlagEmbedding scores a padded
        batch, where a passage shorter than the batch's longest also offers zero vectors, so a
        query token whose every similarity is negative scores 0 there instead; its
        ``batch_size=1`` is what this computes.

        Args:
            pairs: (query, passage) string pairs.
            weights: (dense, sparse, colbert) weights of the combined modes.
            batch_size: texts per forward pass.
            max_query_length: the queries' token limit (default: the model's).
            max_passage_length: the passages' token limit (default: the model's).

        Returns:
            mode → one float per pair.

        Raises:
            InputError: ``pairs`` that are not (str, str) pairs, or as `combine_scores`.
        """
        _checked_weights(weights)
        if (
            isinstance(pairs, tuple | list)
            and len(pairs) == 2
            and all(isinstance(p, str) for p in pairs)
        ):
            raise InputError("pairs is a list of (query, passage) pairs; wrap one pair in a list")
        pairs = list(pairs)
        for i, p in enumerate(pairs):
            if not isinstance(p, tuple | list) or len(p) != 2:
                raise InputError(f"pairs[{i}] must be a (query, passage) pair, got {p!r:.60}")
        opts = dict(batch_size=batch_size)
        q = self.encode([p[0] for p in pairs], max_length=max_query_length, **opts)
        d = self.encode([p[1] for p in pairs], max_length=max_passage_length, **opts)
        dense = np.einsum("ph,ph->p", q.dense, d.dense)  # (P,)
        sparse = np.array([sparse_dot(a, b) for a, b in zip(q.sparse, d.sparse)], np.float32)
        colbert = np.array(
            [self._colbert_scores([a], [b])[0, 0] for a, b in zip(q.colbert, d.colbert)],
            dtype=np.float32,
        )
        scores = combine_scores(dense, sparse, colbert, weights)
        return {k: [float(x) for x in v] for k, v in scores.items()}


def _padded(vectors: list[np.ndarray], width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, T, D) float32 zero-padded vectors and their (N, T) bool mask."""
    longest = max((len(v) for v in vectors), default=0)
    out = torch.zeros(len(vectors), max(longest, 1), width)
    mask = torch.zeros(len(vectors), max(longest, 1), dtype=torch.bool)
    for i, v in enumerate(vectors):
        out[i, : len(v)] = torch.from_numpy(v)
        mask[i, : len(v)] = True
    return out, mask


def m3_json_rows(result: M3Output, texts: Sequence[str] | None = None) -> list[dict]:
    """One JSON-ready dict per text (the command line's JSONL rows; a server route can answer
    them as they are): "dense" (H floats), "sparse" ({"id": weight}, ids as strings, as
    FlagEmbedding's ``lexical_weights``), "colbert" ((T - 1) lists of D floats), for the
    outputs ``result`` holds; "text" when ``texts`` is given."""
    rows: list[dict] = []
    for i in range(len(result)):
        row: dict = {} if texts is None else {"text": texts[i]}
        if result.dense is not None:
            row["dense"] = result.dense[i].tolist()
        if result.sparse is not None:
            v = result.sparse[i]
            row["sparse"] = {str(k): w for k, w in zip(v.indices.tolist(), v.values.tolist())}
        if result.colbert is not None:
            row["colbert"] = result.colbert[i].tolist()
        rows.append(row)
    return rows
