"""Multi-head self-attention through `torch.nn.functional.scaled_dot_product_attention`."""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from .context import AttentionContext
from .kernels import _exporting


@functools.cache
def _varlen_attn():
    """`torch.nn.attention.varlen.varlen_attn` where this torch has it (CUDA only), else None."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    return varlen_attn


@dataclass
class AttentionOutput:
    """hidden: (B, T, H); probs/scores: (B, N, T, S) when weights were asked for, else None."""

    hidden: torch.Tensor
    probs: torch.Tensor | None = None
    scores: torch.Tensor | None = None


def local_band(
    T: int, window: int, dtype: torch.dtype, device: torch.device, memo: dict | None = None
) -> torch.Tensor:
    """(T, T) additive mask of a sliding window: 0 where |i - j| <= ``window``, the dtype's
    minimum elsewhere. Built from boolean triangles (no (T, T) integer distances) and kept in
    ``memo`` (`AttentionContext.memo`), so the local layers of one forward share one band."""
    key = ("local_band", T, window, dtype, device)
    if memo is not None and key in memo:
        return memo[key]
    far = torch.ones(T, T, dtype=torch.bool, device=device).triu(window + 1)  # j - i > window
    far = far | far.transpose(0, 1)  # or i - j > window (out of place: ONNX export)
    band = torch.zeros(T, T, dtype=dtype, device=device).masked_fill(far, torch.finfo(dtype).min)
    if memo is not None:
        memo[key] = band
    return band


# mean real tokens per sequence from which "auto" packed attention runs one call per sequence
# on several threads (`SelfAttention._auto_strategy`)
LONG_SEQUENCE = 64

# longest key length at which CPU inference attention runs as two batched matrix products
# (`attend`) instead of SDPA's fused kernel
SHORT_ATTENTION = 32


def attend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, dropout_p: float
) -> torch.Tensor:
    """softmax(q kᵀ / √Dh + mask) v (Vaswani et al. 2017, eq. 1) for (b, N, t, Dh) q, k, v and an
    additive mask broadcastable to (b, N, t, t) (or None) → (b, N, t, Dh), in q's dtype.

    SDPA's fused CPU kernel works in blocks of queries and keys split over threads, which is
    overhead on short sequences: for t ≤ `SHORT_ATTENTION` keys, an fp32 CPU inference call
    (no dropout, no autograd) on a batch runs as ``baddbmm`` → softmax → ``bmm`` instead
    (MiniLM's 12 heads × 32 dims, 32 sequences of 8–32 tokens: benchmarks/short_attention.py →
    results/short_attention.json; at 64 tokens and more SDPA is faster). The two agree to
    float rounding (1e-5 relative). bf16, training, tracing and export use
    `torch.nn.functional.scaled_dot_product_attention`, as do the one-sequence calls of the
    per-sequence strategy.
    """
    b, n, t, d = q.shape
    if (
        _exporting()  # first: under a trace a size is a tensor, and comparing it warns
        or k.shape[-2] > SHORT_ATTENTION
        or q.device.type != "cpu"
        or q.dtype != torch.float32
        or dropout_p
        or (mask is not None and mask.dtype == torch.bool)
        or (torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad))
    ):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
    s = k.shape[-2]
    q, k, v = (x.reshape(b * n, x.shape[-2], d) for x in (q, k, v))  # no -1: B may be 0
    scale = 1.0 / math.sqrt(d)
    if mask is None:
        scores = torch.bmm(q, k.transpose(1, 2)).mul_(scale)
    else:
        bias = mask.to(q.dtype).expand(b, n, t, s).reshape(b * n, t, s)
        scores = torch.baddbmm(bias, q, k.transpose(1, 2), alpha=scale)
    return torch.bmm(scores.softmax(-1), v).view(b, n, t, d)


class SelfAttention(nn.Module):
    """Scaled dot-product multi-head self-attention (Vaswani et al. 2017, eq. 1 and §3.2.2).

    softmax(QKᵀ/√Dh + mask)·V per head, heads concatenated and projected. Q, K and V come from
    one fused (3H, H) projection (rows ordered [Q; K; V]) so a single matmul produces all three.

    Args:
        hidden_size: H.
        num_heads: N (Dh = H / N).
        dropout: attention-probability dropout.
        bias: whether the projections have biases.
        rotary: the name of the rotary table (``ctx.rotary``) this layer rotates its queries
            and keys with (rotary positions), or None.
        rotary_value: rotate the values too (RoFormer's ``rotary_value``).
        window: > 0 = local attention (ModernBERT's sliding window): a query sees the keys at
            most ``window`` positions away (|i - j| <= window); 0 = every key.

    Position inputs shared by the layers arrive in the context: ``ctx.rotary`` (RoPE tables)
    and ``ctx.position_bias`` (a (1, N, T, T) bias added to the scores, MPNet's buckets).
    """

    supports_unpadded = True  # accepts packed (total_tokens, H) input, see modules/unpad.py
    supports_attention_matrix = True  # honours a (B, 1, T, S) bias (a visibility matrix)
    # How packed input attends: "bucketed" groups the sequences into buckets of similar length
    # (`Unpadded.buckets`) and runs one SDPA call per bucket on its sequences padded to the
    # bucket's longest (a length-sorted batch is one bucket: one call per layer);
    # "per_sequence" runs one unmasked SDPA call per sequence (attention FLOPs exactly Σn², but
    # B calls per layer: B parallel regions, each a barrier that stalls when a core is busy);
    # "padded" scatters Q/K/V to the whole (B, N, T, Dh) batch for one masked call.
    # "auto" (the default) is "per_sequence" on one intra-op thread or for sequences averaging
    # LONG_SEQUENCE tokens or more (`_auto_strategy`), else "bucketed":
    # with one thread no barrier waits, and the 32 small calls beat a padded bucket's fused
    # call (1.13× on MiniLM); with two, one call per layer is as fast or faster (0.97–1.0×)
    # and a busy core cannot stall 32 barriers (benchmarks/packed_attention.py and
    # contention.py; docs/speed.md). "bucketed" and "padded" draw attention dropout over the
    # padded block, as transformers does; "per_sequence" per sequence.
    packed_strategy = "auto"

    def __init__(
        self,
        hidden_size: int,
        num_heads: int,
        dropout: float,
        bias: bool = True,
        rotary: str | None = None,
        rotary_value: bool = False,
        window: int = 0,
    ):
        super().__init__()
        self.rotary, self.rotary_value, self.window = rotary, rotary_value, window
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads
        self.qkv = nn.Linear(hidden_size, 3 * hidden_size, bias=bias)
        self.out = nn.Linear(hidden_size, hidden_size, bias=bias)
        self.dropout = dropout

    def forward(self, x: torch.Tensor, ctx: AttentionContext) -> AttentionOutput:
        """x: (B, T, H) float → AttentionOutput with hidden (B, T, H); or packed real tokens
        x: (total_tokens, H) with the plan in ``ctx.unpadded`` → hidden
        (total_tokens, H)."""
        if x.dim() == 2:
            strategy = self.packed_strategy
            if strategy == "auto":
                strategy = self._auto_strategy(x, ctx)
            if strategy == "padded":
                return AttentionOutput(self.out(self._packed_padded(x, ctx)))
            if self._varlen_applies(x, ctx):
                return AttentionOutput(self.out(self._packed_varlen(x, ctx)))
            if strategy == "bucketed":
                return AttentionOutput(self.out(self._packed_bucketed(x, ctx)))
            return AttentionOutput(self.out(self._packed(x, ctx.unpadded.lengths, ctx)))
        B, T, H = x.shape
        qkv = self.qkv(x).view(B, T, 3, self.num_heads, self.head_dim)
        q, k, v = self._positions(*qkv.permute(2, 0, 3, 1, 4).unbind(0), ctx)  # (B, N, T, Dh)
        p = self.dropout if self.training else 0.0
        probs = scores = None
        if ctx.need_weights:
            scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)  # (B, N, T, S)
            probs = torch.softmax(
                self._add_bias(scores, ctx.bias, ctx, T), dim=-1, dtype=torch.float32
            ).to(q.dtype)
            y = F.dropout(probs, p, self.training) @ v  # (B, N, T, Dh)
        else:
            mask = ctx.bias.to(q.dtype) if ctx.padded else None  # no padding: no mask
            mask = self._add_bias(mask, None, ctx, T)
            y = attend(q, k, v, mask, p)  # (B, N, T, Dh)
        y = y.transpose(1, 2).reshape(B, T, H)  # (B, T, H)
        return AttentionOutput(self.out(y), probs, scores)

    def _positions(self, q, k, v, ctx: AttentionContext, length: int | None = None):
        """Queries, keys (and with ``rotary_value`` values) rotated by this layer's rotary
        table; unchanged without one. (..., T, Dh) each."""
        if self.rotary is None or ctx.rotary is None:
            return q, k, v
        table = ctx.rotary[self.rotary]
        q, k = table.apply(q, length), table.apply(k, length)
        return q, k, (table.apply(v, length) if self.rotary_value else v)

    def _add_bias(self, x, bias, ctx: AttentionContext, T: int, length: int | None = None):
        """``x`` (scores or an additive mask, or None) + ``bias`` + the shared position bias
        (sliced to the first ``length`` positions for one packed sequence) + the local window's
        band over T queries and keys."""
        terms = [t for t in (x, bias) if t is not None]
        if ctx.position_bias is not None:
            pb = ctx.position_bias
            terms.append(pb[..., :length, :length] if length is not None else pb)
        if self.window:
            dtype = terms[0].dtype if terms else ctx.bias.dtype
            terms.append(local_band(T, self.window, dtype, ctx.mask.device, ctx.memo))
        if not terms:
            return None
        out = terms[0]
        for t in terms[1:]:
            out = out + t.to(out.dtype)
        if self.window and len(terms) > 1:  # two minima must not overflow to -inf
            out = out.clamp(min=torch.finfo(out.dtype).min)
        return out

    def _packed(self, x: torch.Tensor, lengths: list[int], ctx: AttentionContext) -> torch.Tensor:
        """Attention over packed sequences, no mask, no padding: one SDPA call per sequence,
        or on the CPU per run of adjacent sequences of equal length (a length-sorted batch has
        many), stacked as a batch — the CPU kernel splits its work by (sequence, head, query
        block) and never over the keys, so a sequence's result does not depend on the others in
        its call (tested bit for bit).

        x: (total_tokens, H) with rows grouped by sequence (``lengths`` rows each) →
        (total_tokens, H) context vectors before the output projection.
        """
        Ntot, H = x.shape
        qkv = self.qkv(x).view(Ntot, 3, self.num_heads, self.head_dim)  # (Ntot, 3, N, Dh)
        y = torch.empty(Ntot, self.num_heads, self.head_dim, dtype=x.dtype, device=x.device)
        p = self.dropout if self.training else 0.0
        stack = x.device.type == "cpu"
        start = i = 0
        while i < len(lengths):
            n, b = lengths[i], 1
            while stack and i + b < len(lengths) and lengths[i + b] == n:
                b += 1
            if n:
                rows = qkv[start : start + b * n].view(b, n, 3, self.num_heads, self.head_dim)
                q, k, v = rows.permute(2, 0, 3, 1, 4).unbind(0)  # (b, N, n, Dh) each
                q, k, v = self._positions(q, k, v, ctx, n)
                mask = self._add_bias(None, None, ctx, n, n)
                if mask is not None:
                    mask = mask.to(q.dtype)
                out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
                y[start : start + b * n] = out.transpose(1, 2).reshape(b * n, *y.shape[1:])
            start += b * n
            i += b
        return y.view(Ntot, H)

    def _packed_bucketed(self, x: torch.Tensor, ctx: AttentionContext) -> torch.Tensor:
        """Packed (total_tokens, H) → context (total_tokens, H), one SDPA call per bucket of
        similar-length sequences (`Unpadded.buckets`): the bucket's Q/K/V rows are gathered
        into a (b, N, t, Dh) block (zero rows at padding), attend with a key mask, and the real
        rows are written back. A bucket of adjacent equal-length sequences is a plain view."""
        Ntot, H = x.shape
        qkv = self.qkv(x)  # (Ntot, 3H)
        buckets = ctx.unpadded.buckets(H)
        if (
            len(buckets) == 1
            and buckets[0].contiguous
            and buckets[0].rows * buckets[0].length == Ntot
        ):
            return self._attend_block(qkv, buckets[0], ctx).reshape(Ntot, H)
        if len(buckets) == 1:  # every sequence in one block: gather in, gather out
            block = qkv.index_select(0, buckets[0].gather)
            out = self._attend_block(block, buckets[0], ctx).reshape(-1, H)
            return out.index_select(0, buckets[0].dest)  # src is every row, in order
        y = qkv.new_empty(Ntot, H)
        for bucket in buckets:
            b, t = bucket.rows, bucket.length
            if bucket.contiguous:
                block = qkv[bucket.start : bucket.start + b * t]
                out = self._attend_block(block, bucket, ctx).reshape(b * t, H)
                y[bucket.start : bucket.start + b * t] = out
                continue
            block = qkv.index_select(0, bucket.gather)  # padding rows: a real row, masked
            out = self._attend_block(block, bucket, ctx).reshape(b * t, H)
            y.index_copy_(0, bucket.src, out.index_select(0, bucket.dest))
        return y

    @staticmethod
    def _auto_strategy(x: torch.Tensor, ctx: AttentionContext) -> str:
        """ "per_sequence" on one thread, or when the sequences average `LONG_SEQUENCE` tokens or
        more (each call is then big enough to pay for its barrier: bert-base on 32 lengths
        16..256, 2 threads: benchmarks/varlen_strategies.py); else "bucketed" (MiniLM on
        short sentences, 2 threads:
        bucketed 95.2 vs per-sequence 91.1 sentences/s, benchmarks/packed_attention.py)."""
        if torch.get_num_threads() == 1:
            return "per_sequence"
        rows = sum(1 for n in ctx.unpadded.lengths if n) or 1
        return "per_sequence" if x.shape[0] / rows >= LONG_SEQUENCE else "bucketed"

    def _varlen_applies(self, x: torch.Tensor, ctx: AttentionContext) -> bool:
        """Whether packed input can go to PyTorch's variable-length flash attention
        (`torch.nn.attention.varlen.varlen_attn`: CUDA, fp16/bf16, no dropout, no per-layer
        bias or rotary; a local window maps to its ``window_size``)."""
        return (
            x.is_cuda
            and x.dtype in (torch.float16, torch.bfloat16)
            and _varlen_attn() is not None
            and (not self.training or self.dropout == 0.0)
            and self.rotary is None
            and ctx.position_bias is None
        )

    def _packed_varlen(self, x: torch.Tensor, ctx: AttentionContext) -> torch.Tensor:
        """Packed (total_tokens, H) → context (total_tokens, H) in one variable-length flash
        attention call over every sequence (cumulative lengths from the plan)."""
        Ntot, H = x.shape
        plan = ctx.unpadded
        q, k, v = self.qkv(x).view(Ntot, 3, self.num_heads, self.head_dim).unbind(1)
        cu = torch.tensor([0, *itertools.accumulate(plan.lengths)], dtype=torch.int32)
        cu = cu.to(x.device)
        longest = max(plan.lengths)
        window = (self.window, self.window) if self.window else (-1, -1)
        y = _varlen_attn()(q, k, v, cu, cu, longest, longest, window_size=window)
        return y.reshape(Ntot, H)

    def _attend_block(self, block: torch.Tensor, bucket, ctx: AttentionContext) -> torch.Tensor:
        """(b·t, 3H) projected rows of one bucket → (b, t, H) context (padding rows are
        garbage the caller drops)."""
        b, t = bucket.rows, bucket.length
        qkv = block.view(b, t, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = self._positions(*qkv.unbind(0), ctx, t)  # (b, N, t, Dh)
        mask = None
        if bucket.mask is not None:
            mask = torch.zeros(bucket.mask.shape, dtype=q.dtype, device=q.device).masked_fill(
                ~bucket.mask, torch.finfo(q.dtype).min
            )
        mask = self._add_bias(mask, None, ctx, t, t)
        if mask is not None:
            mask = mask.to(q.dtype)
        p = self.dropout if self.training else 0.0
        y = attend(q, k, v, mask, p)  # (b, N, t, Dh)
        return y.transpose(1, 2).reshape(b, t, self.num_heads * self.head_dim)

    def _packed_padded(self, x: torch.Tensor, ctx: AttentionContext) -> torch.Tensor:
        """Packed (total_tokens, H) → context (total_tokens, H): the projections run on real
        tokens only; Q/K/V are scattered to the padded (B, N, T, Dh) layout for one masked SDPA
        call, and the real rows gathered back."""
        plan = ctx.unpadded
        B, T, H = plan.batch_size, plan.seq_len, x.shape[-1]
        qkv = x.new_zeros(B * T, 3 * H).index_copy_(0, plan.index, self.qkv(x))
        q, k, v = qkv.view(B, T, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        q, k, v = self._positions(q, k, v, ctx)
        p = self.dropout if self.training else 0.0
        mask = self._add_bias(ctx.bias.to(q.dtype), None, ctx, T)
        y = attend(q, k, v, mask, p)
        return y.transpose(1, 2).reshape(B * T, H).index_select(0, plan.index)  # (Ntot, H)
