"""Unpadded execution: run the dense layers on real tokens only.

A batch of B sequences padded to T holds sum(lengths) real tokens. Gathering them into one
(total_tokens, H) tensor before the layers means the projections and the feed-forward (almost
all of the FLOPs) never touch padding; attention then runs per sequence on its own tokens. The
result is scattered back to (B, T, H) at the end, with zeros at padding positions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

# How much padded attention a bucket may waste, as a fraction of the dense layers' FLOPs on its
# tokens. Per layer a sequence of n tokens costs ≈ 24·n·H² FLOPs in its projections and
# feed-forward (QKV 6H², output 2H², FFN 16H² per token) and 4·n²·H in attention (QKᵀ and
# PV); padding b sequences to the longest t wastes 4·H·(b·t² − Σn²). A bucket grows while
# that waste stays under BUCKET_WASTE × 24·H²·Σn, i.e. b·t² − Σn² ≤ 6·BUCKET_WASTE·H·Σn: short
# sequences (attention ≪ dense work) share one call, long ones of different lengths do not.
BUCKET_WASTE = 0.05


@dataclass
class Bucket:
    """Sequences of similar length that attend in one padded SDPA call.

    Attributes:
        rows: how many sequences (b).
        length: their longest length (t); the others are right-padded to it.
        src: (total,) int64 packed-token rows of these sequences, sequence after sequence.
        dest: (total,) int64 positions of those tokens in the flattened (b·t) padded block.
        mask: (b, 1, 1, t) bool, True at real keys; None when every length equals t.
        gather: (b·t,) int64 packed-token row for every position of the padded block: the
            token's own row at a real position, the bucket's first token row at padding (a
            padding key is masked and a padding query's output dropped, so one gather builds
            the block without zero-filling it).
        contiguous: the sequences are adjacent in the packed tensor with no padding, so
            ``src`` is the slice ``start : start + b·t`` (no gather, no scatter).
        start: first packed row when ``contiguous``.
    """

    rows: int
    length: int
    src: torch.Tensor
    dest: torch.Tensor
    mask: torch.Tensor | None
    contiguous: bool
    start: int
    gather: torch.Tensor | None = None


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
    _buckets: list[Bucket] | None = field(default=None, repr=False, compare=False)

    def buckets(self, hidden_size: int) -> list[Bucket]:
        """The sequences grouped into buckets of similar length (computed once per forward,
        shared by every layer). Greedy over lengths in decreasing order: the next sequence
        joins the current bucket while the padded attention it wastes stays under
        ``BUCKET_WASTE`` of the bucket's dense-layer FLOPs (see the constant); otherwise it
        opens a new bucket. Empty sequences are left out."""
        if self._buckets is not None:
            return self._buckets
        budget = 6 * BUCKET_WASTE * hidden_size
        device = self.index.device
        starts, acc = [], 0
        for n in self.lengths:
            starts.append(acc)
            acc += n
        order = sorted((i for i, n in enumerate(self.lengths) if n), key=lambda i: -self.lengths[i])
        buckets, k = [], 0
        while k < len(order):
            t = self.lengths[order[k]]
            members, tokens, squares = [order[k]], t, t * t
            k += 1
            while k < len(order):
                n = self.lengths[order[k]]
                b = len(members) + 1
                if b * t * t - (squares + n * n) > budget * (tokens + n):
                    break
                members.append(order[k])
                tokens, squares = tokens + n, squares + n * n
                k += 1
            members.sort()  # batch order: adjacent rows may form one contiguous slice
            lens = [self.lengths[i] for i in members]
            same = all(n == t for n in lens)
            adjacent = all(b == a + 1 for a, b in zip(members, members[1:]))
            src = torch.cat([torch.arange(starts[i], starts[i] + self.lengths[i]) for i in members])
            dest = torch.cat([torch.arange(j * t, j * t + n) for j, n in enumerate(lens)])
            mask = None
            if not same:
                mask = (torch.arange(t)[None, :] < torch.tensor(lens)[:, None])[:, None, None, :]
                mask = mask.to(device)
            gather = torch.full((len(members) * t,), int(src[0]), dtype=torch.long)
            gather[dest] = src
            buckets.append(
                Bucket(
                    len(members),
                    t,
                    src.to(device),
                    dest.to(device),
                    mask,
                    same and adjacent,
                    starts[members[0]],
                    gather.to(device),
                )
            )
        self._buckets = buckets
        return buckets

    @classmethod
    def from_mask(cls, attention_mask: torch.Tensor, always: bool = False) -> Unpadded | None:
        """Plan for a (B, T) 0/1 mask, or None when unpadding does not apply: no padding at
        all (unless ``always``: then every row is one whole sequence), or a row that is not
        right-padded (real tokens must form a prefix of each row so that position 0, which the
        pooler reads, is a real token)."""
        mask = attention_mask.bool()
        if bool(mask.all()) and not always:
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
