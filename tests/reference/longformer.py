"""Naive Longformer attention: the full (T, T) score matrix with a band-plus-global mask.

Written from the definition (Beltagy et al. 2020, §3.1), not from the chunked kernel, so that
the kernel can be checked against it. Quadratic in T: tests only.
"""

from __future__ import annotations

import math

import torch
from torch import nn


def dense_windowed_attention(module, x: torch.Tensor, mask: torch.Tensor,
                             is_global: torch.Tensor, window: int) -> torch.Tensor:
    """Output (B, T, H) of a `WindowedSelfAttention`'s weights applied densely.

    Args:
        module: holds the parameters ``qkv``, ``query_global``, ``kv_global``, ``out``.
        x: (B, T, H); mask: (B, T) bool real tokens; is_global: (B, T) bool (real) global tokens.
        window: the full window; a token sees |i - j| <= window // 2.
    """
    B, T, H = x.shape
    N = module.num_heads
    Dh = H // N

    def heads(t):  # (B, T, H) -> (B, N, T, Dh)
        return t.view(B, T, N, Dh).transpose(1, 2)

    q, k, v = (heads(t) for t in module.qkv(x).split(H, dim=-1))
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    band = (i - j).abs() <= window // 2  # (T, T)
    # A local query sees its band and every global token; never padding.
    allowed = (band[None] | is_global[:, None, :]) & mask[:, None, :]  # (B, T, T)
    scores = q @ k.transpose(-1, -2) / math.sqrt(Dh)
    probs = scores.masked_fill(~allowed[:, None], float("-inf")).softmax(-1).nan_to_num(0.0)
    local = probs @ v  # (B, N, T, Dh)
    # A global query sees every real token, through the global projections.
    qg = heads(module.query_global(x))
    kg, vg = (heads(t) for t in module.kv_global(x).split(H, dim=-1))
    sg = (qg @ kg.transpose(-1, -2) / math.sqrt(Dh)).masked_fill(~mask[:, None, None, :],
                                                                  float("-inf"))
    glob = sg.softmax(-1) @ vg
    y = torch.where(is_global[:, None, :, None], glob, local)  # (B, N, T, Dh)
    y = y.transpose(1, 2).reshape(B, T, H) * mask[:, :, None]
    return module.out(y)


class DenseReference(nn.Module):
    """Drop-in replacement for a `WindowedSelfAttention` that computes through
    `dense_windowed_attention`, sharing the wrapped module's parameters."""

    def __init__(self, module, window: int) -> None:
        super().__init__()
        self.inner = module
        self.window = window

    def forward(self, x, ctx):
        from bertfamily.modules.attention import AttentionOutput

        glob = ctx.global_tokens
        is_global = glob.is_global if glob is not None else torch.zeros_like(ctx.mask)
        return AttentionOutput(dense_windowed_attention(self.inner, x, ctx.mask, is_global,
                                                        self.window))
