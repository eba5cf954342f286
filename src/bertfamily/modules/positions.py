"""Position components shared by every layer, computed once per forward by the encoder.

- `RotaryEmbedding`: rotary position embeddings (RoPE; Su et al. 2021, "RoFormer: Enhanced
  Transformer with Rotary Position Embedding", eq. 34): each attention layer rotates its queries
  and keys (RoFormer optionally its values) by their position, so q·k depends on the distance
  only. One provider serves every rotary family: RoFormer's interleaved pairs and stored table,
  the (i, i + D/2) pairs of ModernBERT, NomicBERT and GTE, and several bases at once (ModernBERT's
  local and global layers rotate with different bases).
- `RelativePositionBias`: T5's bucketed relative position bias (Raffel et al. 2020 §2.1), one
  (buckets, N) table shared by all layers (MPNet, Song et al. 2020).
- `ChainedInputs`: several encoder-level providers as one.

Each is an encoder-level provider (see `Encoder.attention_inputs`): called as
``provider(x, ctx) -> {AttentionContext field: value}``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class RotaryTables:
    """cos and sin of the rotation angles of positions 0..T-1, each (T, Dr), Dr the rotated
    dims (the head dim Dh; fewer with partial rotary), laid out for ``interleaved`` pairs
    (dims 2i, 2i+1 share an angle) or halves (dims i, i + Dr/2 share one)."""

    cos: torch.Tensor
    sin: torch.Tensor
    interleaved: bool = False

    def apply(self, x: torch.Tensor, length: int | None = None) -> torch.Tensor:
        """Rotate ``x`` (..., T, Dh) by its positions 0..T-1 (``length`` = T when given, for
        one packed sequence of T tokens); dims beyond Dr pass through."""
        T = x.shape[-2] if length is None else length
        cos, sin = self.cos[:T].to(x.dtype), self.sin[:T].to(x.dtype)
        Dr = cos.shape[-1]
        rot, rest = (x, None) if Dr == x.shape[-1] else (x[..., :Dr], x[..., Dr:])
        if self.interleaved:  # [-x1, x0, -x3, x2, ...]
            pairs = rot.unflatten(-1, (-1, 2))  # (..., Dr/2, 2)
            turned = torch.stack([-pairs[..., 1], pairs[..., 0]], dim=-1).flatten(-2)
        else:  # [-x_{D/2..}, x_{..D/2}]
            first, second = rot.chunk(2, dim=-1)
            turned = torch.cat([-second, first], dim=-1)
        out = rot * cos + turned * sin
        return out if rest is None else torch.cat([out, rest], dim=-1)


class RotaryEmbedding(nn.Module):
    """The rotation tables of a batch, one per named base.

    Args:
        dim: Dr, the rotated dims of each head (even).
        bases: table name → base (θ), e.g. {"global": 10000.0}; each layer's attention reads
            the table named by its ``rotary`` attribute.
        interleaved: RoFormer's pairing (2i, 2i+1) instead of (i, i + Dr/2).
        stored_positions: > 0 = RoFormer's stored table: a frozen (P, Dr) parameter ``weight``
            holding [sin | cos] of the angles of positions 0..P-1 (its checkpoints hold it;
            one base only); 0 = computed on the fly from the bases.

    Attributes:
        inputs: the forward keywords it reads (none).
    """

    inputs: tuple[str, ...] = ()

    def __init__(
        self,
        dim: int,
        bases: dict[str, float],
        interleaved: bool = False,
        stored_positions: int = 0,
    ) -> None:
        super().__init__()
        self.dim, self.bases, self.interleaved = dim, dict(bases), interleaved
        self.weight = None
        # a checkpoint without the stored table gets the deterministic one (a loader reports
        # it as newly initialised, see `checkpoints.convert.new_parameter_keys`)
        self.new_parameters: tuple[str, ...] = ("weight",) if stored_positions else ()
        if stored_positions:
            (base,) = self.bases.values()
            self.weight = nn.Parameter(
                sinusoidal_table(stored_positions, dim, base), requires_grad=False
            )

    def reset_parameters(self) -> None:
        """The stored table's values (build's weight init leaves it alone otherwise)."""
        if self.weight is not None:
            (base,) = self.bases.values()
            with torch.no_grad():
                self.weight.copy_(sinusoidal_table(self.weight.shape[0], self.dim, base))

    def angles(self, T: int, base: float, device: torch.device) -> torch.Tensor:
        """(T, Dr/2) float32 angles t·base^(-2i/Dr)."""
        inv_freq = 1.0 / (
            base
            ** (torch.arange(0, self.dim, 2, dtype=torch.int64, device=device).float() / self.dim)
        )
        t = torch.arange(T, device=device, dtype=torch.int64).float()
        return t[:, None] * inv_freq[None, :]

    def tables(self, T: int, device: torch.device) -> dict[str, RotaryTables]:
        """name → `RotaryTables` for positions 0..T-1."""
        out = {}
        for name, base in self.bases.items():
            if self.weight is not None:
                sin, cos = self.weight[:T].chunk(2, dim=-1)  # (T, Dr/2) each
            else:
                freqs = self.angles(T, base, device)
                sin, cos = freqs.sin(), freqs.cos()
            if self.interleaved:  # [θ0, θ0, θ1, θ1, ...]
                cos = torch.stack([cos, cos], dim=-1).flatten(-2)
                sin = torch.stack([sin, sin], dim=-1).flatten(-2)
            else:  # [θ0, θ1, ..., θ0, θ1, ...]
                cos, sin = torch.cat([cos, cos], -1), torch.cat([sin, sin], -1)
            out[name] = RotaryTables(cos, sin, self.interleaved)
        return out

    def forward(self, x: torch.Tensor, ctx) -> dict[str, object]:
        """x: (B, T, H) embeddings → {"rotary": name → RotaryTables}."""
        return {"rotary": self.tables(x.shape[1], x.device)}


def sinusoidal_table(positions: int, dim: int, base: float = 10000.0) -> torch.Tensor:
    """(P, D) [sin | cos] of the angles t·base^(-2i/D), in float64 then float32, as RoFormer's
    `RoFormerSinusoidalPositionalEmbedding` builds it (Vaswani et al. 2017 §3.5, halves not
    interleaved)."""
    t = torch.arange(positions, dtype=torch.float64)[:, None]
    inv = base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    angles = t * inv[None, :]  # (P, D/2)
    return torch.cat([angles.sin(), angles.cos()], dim=-1).float()


def relative_position_bucket(
    relative_position: torch.Tensor, num_buckets: int = 32, max_distance: int = 128
) -> torch.Tensor:
    """T5's bidirectional buckets of ``relative_position`` = key - query (int64): half the
    buckets per direction; of those, half exact distances, the rest log-spaced up to
    ``max_distance`` (Raffel et al. 2020 §2.1; MPNet's `relative_position_bucket`)."""
    n = -relative_position
    num_buckets //= 2
    ret = (n < 0).to(torch.long) * num_buckets
    n = n.abs()
    max_exact = num_buckets // 2
    is_small = n < max_exact
    large = max_exact + (
        torch.log(n.float() / max_exact)
        / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)
    ).to(torch.long)
    large = torch.clamp(large, max=num_buckets - 1)
    return ret + torch.where(is_small, n, large)


class RelativePositionBias(nn.Module):
    """A learned bias per head and bucketed distance, shared by every layer (MPNet).

    Args:
        num_buckets: R, rows of the table.
        num_heads: N.

    ``forward`` gives ``position_bias`` (1, N, T, T), added to every layer's attention scores.
    """

    inputs: tuple[str, ...] = ()

    def __init__(self, num_buckets: int, num_heads: int) -> None:
        super().__init__()
        self.num_buckets = num_buckets
        self.relative_attention_bias = nn.Embedding(num_buckets, num_heads)

    def forward(self, x: torch.Tensor, ctx) -> dict[str, torch.Tensor]:
        """x: (B, T, H) → {"position_bias": (1, N, T, T) float}."""
        T = x.shape[1]
        pos = torch.arange(T, dtype=torch.long, device=x.device)
        buckets = relative_position_bucket(pos[None, :] - pos[:, None], self.num_buckets)
        bias = self.relative_attention_bias(buckets)  # (T, T, N)
        return {"position_bias": bias.permute(2, 0, 1).unsqueeze(0).to(x.dtype)}


class ChainedInputs(nn.Module):
    """Several encoder-level providers run in order; later ones see earlier fields."""

    def __init__(self, providers: list[nn.Module]) -> None:
        super().__init__()
        self.providers = nn.ModuleList(providers)
        self.inputs = tuple(k for p in providers for k in getattr(p, "inputs", ()))

    def forward(self, x: torch.Tensor, ctx) -> dict[str, object]:
        """Merge the fields of every provider."""
        import dataclasses

        out: dict[str, object] = {}
        for provider in self.providers:
            fields = provider(x, ctx)
            ctx = dataclasses.replace(ctx, **fields)
            out.update(fields)
        return out
