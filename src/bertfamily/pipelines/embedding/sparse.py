"""`SparseEncoder`: SPLADE sparse lexical vectors (Formal et al. 2021, "SPLADE v2" §2.2:
w_j = max_i log(1 + ReLU(logit_ij)) over the input's tokens i, one weight per vocabulary
entry j; SPLADE v1 summed instead of taking the max), from a directory saved by
sentence-transformers' ``SparseEncoder`` (``MLMTransformer`` + ``SpladePooling``,
`sentence_modules.read_splade`). Equal to sentence-transformers' ``SparseEncoder.encode``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ...errors import InputError
from ...inference.batches import FEATURE_KEYS, TokenRows, run_batches, text_list, tokenize_rows
from ...inference.loading import load_into
from ...resources.resolve import resolve_model
from .sentence_modules import read_splade

__all__ = ["SparseEncoder", "SparseVector", "sparse_dot", "sparse_row", "to_dense"]


@dataclass(frozen=True, eq=False)
class SparseVector:
    """The non-zero weights of one text: vocabulary ids (ascending) and their weights."""

    indices: np.ndarray  # (K,) int64
    values: np.ndarray  # (K,) float32

    def as_dict(self) -> dict[int, float]:
        """``{vocabulary id: weight}``."""
        return dict(zip(self.indices.tolist(), self.values.tolist()))


def to_dense(vectors: Sequence[SparseVector], width: int) -> np.ndarray:
    """(N, width) float32 with the vectors' weights in place."""
    out = np.zeros((len(vectors), width), dtype=np.float32)
    for row, v in enumerate(vectors):
        out[row, v.indices] = v.values
    return out


def sparse_row(row: np.ndarray, max_active_dims: int | None = None) -> SparseVector:
    """The `SparseVector` of one (V,) float32 row of weights: its non-zero entries, or only
    the ``max_active_dims`` largest (ties: the lower vocabulary id first)."""
    nz = np.flatnonzero(row)
    if max_active_dims is not None and len(nz) > max_active_dims:
        keep = np.argsort(-row[nz], kind="stable")[:max_active_dims]
        nz = np.sort(nz[keep])
    return SparseVector(nz.astype(np.int64), row[nz])


def sparse_dot(a: SparseVector, b: SparseVector) -> float:
    """The dot product of two sparse vectors."""
    common, ia, ib = np.intersect1d(a.indices, b.indices, assume_unique=True, return_indices=True)
    return float(np.dot(a.values[ia], b.values[ib])) if len(common) else 0.0


class SparseEncoder:
    """A SPLADE directory, ready to encode text into sparse vocabulary-sized vectors.

    Args:
        path: a directory, resource name or cached ``org/name``.
        device: where it runs.
        dtype: parameter dtype: "auto" (default) is fp32, the faithful choice (equal to
            sentence-transformers); "fp32", "bf16", "fastest" (bf16 where the CPU or GPU has
            bf16 units, else fp32) or a torch dtype.
        revision: for a cached ``org/name``: a branch, tag or commit.

    Raises:
        SentenceModulesError: not a SPLADE directory (`read_splade`).
        InputError: the model has no masked-LM head.
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
        self.spec = read_splade(self.path)
        load_into(self, self.spec.model_dir, device=device, dtype=dtype)
        if self.model.mlm_head is None:
            raise InputError(f"{path} has no masked-LM head; SPLADE needs one")
        self.prompts = dict(self.spec.prompts)
        self.default_prompt_name = self.spec.default_prompt_name
        limits = [
            self.spec.max_seq_length,
            self.tokenizer.model_max_length,
            self.model.config.max_sequence_length,
        ]
        self.max_length = min(x for x in limits if x)
        self.dimension = self.model.config.vocab_size
        self.last_truncated = 0

    def prompt(self, prompt_name: str | None) -> str:
        """The prompt text of ``prompt_name`` (default: the directory's default; "" for none)."""
        name = prompt_name if prompt_name is not None else self.default_prompt_name
        if name is None:
            return ""
        if name not in self.prompts:
            raise InputError(f"unknown prompt_name {name!r}; this model has {sorted(self.prompts)}")
        return self.prompts[name]

    def tokenize(
        self,
        texts: Sequence[str],
        *,
        prompt_name: str | None = None,
        truncation_side: str = "right",
    ) -> TokenRows:
        """The one tokenization of an `encode` (the server calls it once per request and hands
        the rows to `run_tokenized`): the prompt prepended, each text cut to ``max_length``.

        Args:
            texts: N strings.
            prompt_name: a prompt of the directory (default: its default prompt; none if it
                has none).
            truncation_side: "right" or "left".

        Returns:
            `TokenRows` of N rows.

        Raises:
            InputError: an unknown ``prompt_name`` or ``truncation_side``.
        """
        prefix = self.prompt(prompt_name)
        return tokenize_rows(
            self.tokenizer,
            [prefix + t for t in text_list(texts)],
            max_length=self.max_length,
            truncation_side=truncation_side,
        )

    def _pooled(
        self, tokens: TokenRows, batch_size: int, max_batch_tokens: int | None
    ) -> Iterator[tuple[list[int], np.ndarray]]:
        """(positions, (B, vocab_size) float32 SPLADE weights) per batch of the engine's loop
        (`inference.batches.run_batches`); sets ``last_truncated``."""
        self.last_truncated = sum(tokens.truncated)
        yield from run_batches(
            tokens,
            self._splade,
            pad=self.tokenizer.pad_rows,
            batch_size=batch_size,
            max_batch_tokens=max_batch_tokens,
            device=self.device,
            keys=FEATURE_KEYS,
        )

    def _splade(self, batch: dict[str, torch.Tensor]) -> np.ndarray:
        """A padded batch → (B, vocab_size) float32 weights (module docstring)."""
        logits = self.model(**batch).logits.float()  # (B, T, V)
        mask = batch["attention_mask"].unsqueeze(-1).to(logits.dtype)  # (B, T, 1)
        w = torch.log1p(torch.relu(logits * mask))
        if self.spec.activation == "log1p_relu":
            w = torch.log1p(w)
        return (w.amax(1) if self.spec.pooling == "max" else w.sum(1)).cpu().numpy()  # (B, V)

    @torch.inference_mode()
    def run_tokenized_dense(
        self, tokens: TokenRows, *, batch_size: int = 32, max_batch_tokens: int | None = None
    ) -> np.ndarray:
        """(N, vocab_size) float32 SPLADE weights of tokenized texts (`tokenize`), in their
        order.

        Raises:
            InputError: ``batch_size`` or ``max_batch_tokens`` < 1.
        """
        out = np.zeros((len(tokens), self.dimension), dtype=np.float32)
        for idx, pooled in self._pooled(tokens, batch_size, max_batch_tokens):
            out[idx] = pooled
        return out

    @torch.inference_mode()
    def run_tokenized(
        self,
        tokens: TokenRows,
        *,
        batch_size: int = 32,
        max_batch_tokens: int | None = None,
        max_active_dims: int | None = None,
    ) -> list[SparseVector]:
        """One `SparseVector` per tokenized text (`tokenize`), in their order, made batch by
        batch (no (N, vocab_size) array is held); ``max_active_dims`` keeps only that many of
        the largest weights of each.

        Raises:
            InputError: ``max_active_dims``, ``batch_size`` or ``max_batch_tokens`` < 1.
        """
        if max_active_dims is not None and max_active_dims < 1:
            raise InputError(f"max_active_dims must be >= 1, got {max_active_dims}")
        out: list[SparseVector | None] = [None] * len(tokens)
        for idx, pooled in self._pooled(tokens, batch_size, max_batch_tokens):
            for i, row in zip(idx, pooled):
                out[i] = sparse_row(row, max_active_dims)
        return out  # type: ignore[return-value]

    def encode_dense(
        self,
        texts: Sequence[str],
        *,
        prompt_name: str | None = None,
        batch_size: int = 32,
        truncation_side: str = "right",
        max_batch_tokens: int | None = None,
    ) -> np.ndarray:
        """(N, vocab_size) float32 SPLADE weights, in input order: `run_tokenized_dense` of
        `tokenize` (each text tokenized once).

        Raises:
            InputError: as `tokenize` and `run_tokenized_dense`.
        """
        tokens = self.tokenize(texts, prompt_name=prompt_name, truncation_side=truncation_side)
        return self.run_tokenized_dense(
            tokens, batch_size=batch_size, max_batch_tokens=max_batch_tokens
        )

    def encode(
        self,
        texts: Sequence[str],
        *,
        max_active_dims: int | None = None,
        prompt_name: str | None = None,
        batch_size: int = 32,
        truncation_side: str = "right",
        max_batch_tokens: int | None = None,
    ) -> list[SparseVector]:
        """One `SparseVector` per text, in input order (options as `encode_dense`):
        `run_tokenized` of `tokenize`; ``max_active_dims`` keeps only that many of the
        largest weights of each.

        Raises:
            InputError: as `tokenize` and `run_tokenized`.
        """
        if max_active_dims is not None and max_active_dims < 1:
            raise InputError(f"max_active_dims must be >= 1, got {max_active_dims}")
        tokens = self.tokenize(texts, prompt_name=prompt_name, truncation_side=truncation_side)
        return self.run_tokenized(
            tokens,
            batch_size=batch_size,
            max_batch_tokens=max_batch_tokens,
            max_active_dims=max_active_dims,
        )
