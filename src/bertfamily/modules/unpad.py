"""Unpadded execution: run the dense layers on real tokens only.

A batch of B sequences padded to T holds sum(lengths) real tokens. Gathering them into one
(total_tokens, H) tensor before the layers means the projections and the feed-forward (almost
all of the FLOPs) never touch padding; attention then runs per sequence on its own tokens. The
result is scattered back to (B, T, H) at the end, with zeros at padding positions.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Unpadded:
    """Where the real tokens of a right-padded batch live.

    Attributes:
        index: (total_tokens,) int64 positions in the flattened (B·T) batch.
        lengths: B Python ints, real tokens per row (rows are contiguous segments of the
            gathered tensor, in batch order).
        batch_size, seq_len: B and T of the padded batch.
    """

    index: torch.Tensor
    lengths: list[int]
    batch_size: int
    seq_len: int

    @classmethod
    def from_mask(cls, attention_mask: torch.Tensor) -> Unpadded | None:
        """Plan for a (B, T) 0/1 mask, or None when unpadding does not apply: no padding at
        all, or a row that is not right-padded (real tokens must form a prefix of each row so
        that position 0, which the pooler reads, is a real token)."""
        mask = attention_mask.bool()
        if bool(mask.all()):
            return None
        if mask.shape[1] > 1 and bool((mask[:, 1:] & ~mask[:, :-1]).any()):
            return None  # a real token after padding: left padding or holes
        B, T = mask.shape
        return cls(mask.flatten().nonzero().squeeze(1), mask.sum(1).tolist(), B, T)

    def gather(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, H) → (total_tokens, H)."""
        return x.reshape(self.batch_size * self.seq_len, -1).index_select(0, self.index)

    def scatter(self, y: torch.Tensor) -> torch.Tensor:
        """(total_tokens, H) → (B, T, H), zeros at padding positions."""
        out = y.new_zeros(self.batch_size * self.seq_len, y.shape[-1])
        out.index_copy_(0, self.index, y)
        return out.view(self.batch_size, self.seq_len, -1)
