"""`SparseEncoder`: SPLADE sparse lexical vectors (Formal et al. 2021, "SPLADE v2" §2.2:
w_j = max_i log(1 + ReLU(logit_ij)) over the input's tokens i, one weight per vocabulary
entry j; SPLADE v1 summed instead of taking the max), from a directory saved by
sentence-transformers' ``SparseEncoder`` (``MLMTransformer`` + ``SpladePooling``,
`sentence_modules.read_splade`). Equal to sentence-transformers' ``SparseEncoder.encode``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ..data.batching import sorted_batches
from ..errors import InputError
from ..resources.resolve import resolve_model
from .batching import token_lengths
from .loading import load_model_and_tokenizer, to_device
from .sentence_modules import read_splade

__all__ = ["SparseEncoder", "SparseVector", "sparse_dot", "to_dense"]


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


def sparse_dot(a: SparseVector, b: SparseVector) -> float:
    """The dot product of two sparse vectors."""
    common, ia, ib = np.intersect1d(a.indices, b.indices, assume_unique=True, return_indices=True)
    return float(np.dot(a.values[ia], b.values[ib])) if len(common) else 0.0


class SparseEncoder:
    """A SPLADE directory, ready to encode text into sparse vocabulary-sized vectors.

    Args:
        path: a directory, resource name or cached ``org/name``.
        device: where it runs.
        dtype: parameter dtype (None/"fp32", "bf16", "auto" or a torch dtype).
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
        dtype: str | torch.dtype | None = None,
        revision: str | None = None,
    ) -> None:
        self.path = resolve_model(path, revision)
        self.spec = read_splade(self.path)
        loaded = load_model_and_tokenizer(self.spec.model_dir, device=device, dtype=dtype)
        self.model, self.tokenizer, self.device = loaded.model, loaded.tokenizer, loaded.device
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

    @torch.inference_mode()
    def encode_dense(
        self,
        texts: Sequence[str],
        *,
        prompt_name: str | None = None,
        batch_size: int = 32,
        truncation_side: str = "right",
        max_batch_tokens: int | None = None,
    ) -> np.ndarray:
        """(N, vocab_size) float32 SPLADE weights, in input order."""
        prefix = self.prompt(prompt_name)
        texts = [prefix + t for t in texts]
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        if not texts:
            return out
        lengths = token_lengths(self.tokenizer, texts, max_length=self.max_length)
        truncated = 0
        for idx in sorted_batches(lengths, batch_size, max_batch_tokens):
            enc = self.tokenizer(
                [texts[i] for i in idx],
                max_length=self.max_length,
                truncation_side=truncation_side,
                return_truncated=True,
            )
            truncated += int(enc.pop("truncated").sum())
            enc = to_device(enc, self.device)
            logits = self.model(**enc).logits.float()  # (B, T, V)
            mask = enc["attention_mask"].unsqueeze(-1).to(logits.dtype)  # (B, T, 1)
            w = torch.log1p(torch.relu(logits * mask))
            if self.spec.activation == "log1p_relu":
                w = torch.log1p(w)
            pooled = w.amax(1) if self.spec.pooling == "max" else w.sum(1)  # (B, V)
            out[idx] = pooled.cpu().numpy()
        self.last_truncated = truncated
        return out

    def encode(
        self, texts: Sequence[str], *, max_active_dims: int | None = None, **options
    ) -> list[SparseVector]:
        """One `SparseVector` per text (options as `encode_dense`); ``max_active_dims`` keeps
        only that many of the largest weights of each."""
        if max_active_dims is not None and max_active_dims < 1:
            raise InputError(f"max_active_dims must be >= 1, got {max_active_dims}")
        out = []
        for row in self.encode_dense(texts, **options):
            nz = np.flatnonzero(row)
            if max_active_dims is not None and len(nz) > max_active_dims:
                keep = np.argsort(-row[nz], kind="stable")[:max_active_dims]
                nz = np.sort(nz[keep])
            out.append(SparseVector(nz.astype(np.int64), row[nz]))
        return out
