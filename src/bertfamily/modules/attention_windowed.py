"""Sliding-window plus global self-attention (Longformer), in O(T·W) memory.

Beltagy, Peters & Cohan 2020, "Longformer: The Long-Document Transformer", §3.1: every token
attends to the W = window / 2 tokens on each side of it ("sliding window"); a few task-chosen
tokens have *global* attention: they attend to every token and every token attends to them,
through their own projections Q_g, K_g, V_g (§3.1 "Linear Projections for Global Attention").

Semantics (those of the published checkpoints, allenai/longformer-base-4096):
- a non-global query i attends, with the local Q, K, V, to the keys j with |i - j| <= W that are
  real and not global, plus to every global key (each key counted once);
- a global query attends, with Q_g (applied to the global token), K_g and V_g (applied to every
  token), to every real key;
- padding keys are never attended to; outputs at padding positions are zero before the output
  projection.

Nothing of size (T, T) is built: queries are cut into blocks of W, each block attends to the 3W
keys around it (its own block and the two neighbours) plus the global keys, through
`torch.nn.functional.scaled_dot_product_attention` with a band mask. Memory per layer is
O(B·T·(3W + G)) for the mask and O(B·N·T·Dh) for the blocked keys and values (G = most global
tokens in a row). Any T works: the last block is padded inside the component and trimmed again.

Attention weights (``output_attentions``) come in the band layout of transformers'
LongformerSelfAttention, never as a (T, T) matrix: per query the 2W + 1 keys at offsets
-W..W (scores and probabilities (B, N, T, 2W+1)), the probabilities of every query for the
global keys (B, N, T, G), and the global rows (B, N, G, T); see `WindowedAttentionOutput`. They
are computed chunk by chunk of queries, in O(B·N·T·(2W + 1 + G)) memory.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from ..errors import InputError
from .attention import AttentionOutput
from .context import AttentionContext, GlobalTokens

GLOBAL_MASK_KEY = "global_attention_mask"  # the name callers pass to Model.forward


def check_global_attention_mask(
    global_attention_mask: torch.Tensor, shape: tuple[int, int]
) -> torch.Tensor:
    """Validate a user's global attention mask and return it as (B, T) bool.

    Args:
        global_attention_mask: (B, T) with values 0 (local attention) or 1 (global attention),
            integer or bool.
        shape: (B, T) of input_ids.

    Raises:
        ValueError: not a tensor, another shape than input_ids, a float dtype or values other
            than 0 and 1.
    """
    if not isinstance(global_attention_mask, torch.Tensor):
        raise InputError(
            f"{GLOBAL_MASK_KEY} must be a (B, T) tensor, got {type(global_attention_mask).__name__}"
        )
    if tuple(global_attention_mask.shape) != tuple(shape):
        raise InputError(
            f"{GLOBAL_MASK_KEY} has shape {tuple(global_attention_mask.shape)}; "
            f"expected {tuple(shape)} like input_ids"
        )
    if global_attention_mask.dtype.is_floating_point or global_attention_mask.is_complex():
        raise InputError(
            f"{GLOBAL_MASK_KEY} must hold integers 0/1 or bools, got {global_attention_mask.dtype}"
        )
    if (
        global_attention_mask.dtype != torch.bool
        and global_attention_mask.numel()
        and (int(global_attention_mask.min()) < 0 or int(global_attention_mask.max()) > 1)
    ):
        raise InputError(
            f"{GLOBAL_MASK_KEY} must hold only 0 (local) and 1 (global), got values "
            f"in [{int(global_attention_mask.min())}, "
            f"{int(global_attention_mask.max())}]"
        )
    return global_attention_mask.bool()


class GlobalAttentionInputs(nn.Module):
    """Encoder-level provider (see `Encoder.attention_inputs`): turns the caller's
    ``global_attention_mask`` into `GlobalTokens` once per forward, shared by every layer.

    A global flag on a padding token is ignored (as in the published model, where the merged mask
    is attention_mask · (global_attention_mask + 1)).
    """

    inputs = (GLOBAL_MASK_KEY,)  # the forward keywords of Encoder/Model this provider reads

    def forward(self, x: torch.Tensor, ctx: AttentionContext) -> dict:
        """x: (B, T, H) embeddings (only the shape is used) → the context fields to set:
        {"global_tokens": GlobalTokens or None}.

        Raises:
            ValueError: see `check_global_attention_mask`.
        """
        mask = ctx.global_attention_mask
        if mask is None:
            return {"global_tokens": None}
        if torch.jit.is_tracing():
            return {"global_tokens": _traced_global_tokens(mask.bool() & ctx.mask)}
        is_global = check_global_attention_mask(mask, tuple(x.shape[:2])).to(x.device) & ctx.mask
        counts = is_global.sum(dim=1)  # (B,)
        G = int(counts.max()) if counts.numel() else 0
        if G == 0:
            return {"global_tokens": None}
        # A stable sort puts each row's global positions first, in ascending order.
        order = torch.sort((~is_global).to(torch.int8), dim=1, stable=True).indices  # (B, T)
        index = order[:, :G]  # (B, G)
        valid = torch.arange(G, device=x.device)[None, :] < counts[:, None]  # (B, G)
        return {"global_tokens": GlobalTokens(is_global, index.masked_fill(~valid, 0), valid)}


def _traced_global_tokens(is_global: torch.Tensor) -> GlobalTokens:
    """`GlobalTokens` of a (B, T) bool mask of real global tokens, for the ONNX exporter.

    The same index and valid tensors as `GlobalAttentionInputs` builds eagerly, from tensor
    operations only: G = the most global tokens in a row is the length of a ``nonzero`` (a
    dynamic size in the graph, 0 allowed), never a Python int, and the positions come from
    each global token's rank (no sort).
    """
    T = is_global.shape[1]
    counts = is_global.sum(dim=1)  # (B,)
    positions = torch.arange(T, device=is_global.device)
    slots = torch.nonzero(positions < counts.max())[:, 0]  # (G,) = 0..G-1
    rank = torch.cumsum(is_global.long(), dim=1) - 1  # (B, T): rank of each global token
    hit = (rank[:, None, :] == slots[None, :, None]) & is_global[:, None, :]  # (B, G, T)
    index = (hit.long() * positions).sum(dim=2)  # (B, G); 0 where no token (like eager)
    valid = slots[None, :] < counts[:, None]  # (B, G)
    return GlobalTokens(is_global, index, valid)


@dataclass
class WindowedAttentionOutput(AttentionOutput):
    """Output of `WindowedSelfAttention`; the weights are set only when they were asked for.

    Attributes:
        hidden: (B, T, H).
        probs: (B, N, T, 2W+1) float, band probabilities: column c is the key at offset c - W
            from the query (0 where that key is padding, global, or outside the sequence, and
            on the rows of global and padding queries, whose attention is elsewhere), as the
            last 2W + 1 columns of transformers' Longformer ``attentions``.
        scores: (B, N, T, 2W+1) float, band scores q·k/√Dh before masking and softmax (0 where
            the window runs past either end of the sequence).
        global_key_probs: (B, N, T, G) float, probabilities of every query for the G global
            keys of its row (ascending positions; transformers' first G columns), or None
            without global tokens.
        global_probs: (B, N, G, T) float, the global rows: each global token's probabilities
            over all T keys (its own Q_g, K_g), or None without global tokens (transformers'
            ``global_attentions``, transposed).
    """

    global_key_probs: torch.Tensor | None = None
    global_probs: torch.Tensor | None = None


class WindowedSelfAttention(nn.Module):
    """Longformer self-attention: sliding window of W = window / 2 per side, plus global tokens.

    Args:
        hidden_size: H.
        num_heads: N (Dh = H / N).
        dropout: attention-probability dropout.
        window: the full window (even, > 0); one-sided W = window / 2.
        bias: whether the projections have biases.

    Parameters: ``qkv`` (3H, H) local Q, K, V (rows [Q; K; V]); ``query_global`` (H, H);
    ``kv_global`` (2H, H) global K, V (rows [K_g; V_g]); ``out`` (H, H).

    Raises:
        ValueError: a window that is odd or not positive.
    """

    def __init__(
        self, hidden_size: int, num_heads: int, dropout: float, window: int, bias: bool = True
    ) -> None:
        super().__init__()
        if isinstance(window, bool) or not isinstance(window, int) or window <= 0 or window % 2:
            raise InputError(f"attention window must be a positive even integer, got {window!r}")
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads
        self.window = window
        self.one_sided = window // 2
        self.qkv = nn.Linear(hidden_size, 3 * hidden_size, bias=bias)
        self.query_global = nn.Linear(hidden_size, hidden_size, bias=bias)
        self.kv_global = nn.Linear(hidden_size, 2 * hidden_size, bias=bias)
        self.out = nn.Linear(hidden_size, hidden_size, bias=bias)
        self.dropout = dropout
        # Queries per scaled_dot_product_attention call (whole blocks of W): bounds the memory
        # of the blocked keys and values; the result does not depend on it.
        self.queries_per_call = 1024
        # Weights path: (query, key) pairs per chunk of queries (bounds the unfolded K and V).
        self.pairs_per_chunk = 1 << 15

    def extra_repr(self) -> str:
        """Window and head count, for the module's repr."""
        return f"window={self.window}, num_heads={self.num_heads}"

    # ------------------------------------------------------------------------------------------
    def forward(self, x: torch.Tensor, ctx: AttentionContext) -> WindowedAttentionOutput:
        """x: (B, T, H) float → `WindowedAttentionOutput` with hidden (B, T, H), plus the band
        weights when ``ctx.need_weights`` (slower path, same hidden).

        Reads ``ctx.global_tokens`` (a `GlobalTokens` or None, from
        `GlobalAttentionInputs`).
        """
        glob = ctx.global_tokens
        p = self.dropout if self.training else 0.0
        weights: dict[str, torch.Tensor | None] = {}
        if torch.jit.is_tracing():  # the ONNX exporter: no Python int taken from T or G
            y = self._local_traced(x, ctx.mask, glob)
            if glob is not None:
                y = self._global_traced(x, y, ctx, glob)
            return WindowedAttentionOutput(self.out(y.masked_fill(~ctx.mask[:, :, None], 0.0)))
        if ctx.need_weights:
            y, weights = self._local_with_weights(x, ctx.mask, glob, p)
        else:
            y = self._local(x, ctx.mask, glob, p)  # (B, T, H)
        if glob is not None:
            y, global_probs = self._global(x, y, ctx, glob, p, ctx.need_weights)
            if ctx.need_weights:
                weights["global_probs"] = global_probs
        if not bool(ctx.mask.all()):
            y = y.masked_fill(~ctx.mask[:, :, None], 0.0)  # padding queries give zeros
        return WindowedAttentionOutput(self.out(y), **weights)

    def _local_with_weights(
        self, x: torch.Tensor, mask: torch.Tensor, glob: GlobalTokens | None, p: float
    ):
        """The band attention of `_local` with explicit scores and probabilities, chunk by
        chunk of queries (never (T, T)).

        x: (B, T, H); mask: (B, T) bool real tokens → ((B, T, H), {"probs": (B, N, T, 2W+1),
        "scores": (B, N, T, 2W+1), "global_key_probs": (B, N, T, G) or None}).
        """
        B, T, H = x.shape
        N, Dh, W = self.num_heads, self.head_dim, self.one_sided
        K = 2 * W + 1  # band width: keys at offsets -W..W
        q, k, v = self.qkv(x).view(B, T, 3, N, Dh).permute(2, 0, 3, 1, 4).unbind(0)  # (B, N, T, Dh)
        q = q / math.sqrt(Dh)
        kp, vp = F.pad(k, (0, 0, W, W)), F.pad(v, (0, 0, W, W))  # (B, N, T + 2W, Dh)
        key_ok = mask if glob is None else mask & ~glob.is_global  # global keys come once
        band_ok = F.pad(key_ok, (W, W), value=False).unfold(1, K, 1)  # (B, T, 2W+1)
        if glob is not None:
            idx = glob.index[:, None, :, None].expand(B, N, -1, Dh)  # (B, N, G, Dh)
            gk, gv = k.gather(2, idx), v.gather(2, idx)  # (B, N, G, Dh)
            g_ok = glob.valid[:, None, None, :]  # (B, 1, 1, G)
        y = x.new_empty(B, N, T, Dh)
        probs = x.new_zeros(B, N, T, K)
        scores = x.new_zeros(B, N, T, K)
        gprobs = x.new_zeros(B, N, T, glob.index.shape[1]) if glob is not None else None
        low = torch.finfo(torch.float32).min
        step = max(1, self.pairs_per_chunk // K)
        for t0 in range(0, T, step):
            t1 = min(T, t0 + step)
            qc = q[:, :, t0:t1]  # (B, N, m, Dh)
            kc = kp[:, :, t0 : t1 + 2 * W].unfold(2, K, 1)  # (B, N, m, Dh, 2W+1) view
            vc = vp[:, :, t0 : t1 + 2 * W].unfold(2, K, 1)
            s = torch.einsum("bnqd,bnqdk->bnqk", qc, kc)  # (B, N, m, 2W+1) band scores
            scores[:, :, t0:t1] = s
            s = s.float().masked_fill(~band_ok[:, None, t0:t1], low)
            if glob is not None:
                sg = torch.einsum("bnqd,bngd->bnqg", qc, gk)  # (B, N, m, G)
                s = torch.cat([sg.float().masked_fill(~g_ok, low), s], dim=-1)
            pc = torch.softmax(s, dim=-1).to(x.dtype)  # (B, N, m, G + 2W+1)
            pd = F.dropout(pc, p, self.training)
            G = pc.shape[-1] - K
            yc = torch.einsum("bnqk,bnqdk->bnqd", pd[..., G:], vc)  # (B, N, m, Dh)
            if glob is not None:
                yc = yc + pd[..., :G] @ gv
                gprobs[:, :, t0:t1] = pc[..., :G]
            y[:, :, t0:t1] = yc
            probs[:, :, t0:t1] = pc[..., G:]
        # Rows of padding and global queries: their attention is elsewhere (transformers zeroes
        # them too); masked columns are exactly 0 already.
        away = ~mask if glob is None else ~mask | glob.is_global  # (B, T)
        probs = probs.masked_fill(away[:, None, :, None], 0.0)
        if gprobs is not None:
            gprobs = gprobs.masked_fill(away[:, None, :, None], 0.0)
        y = y.transpose(1, 2).reshape(B, T, H)
        return y, {"probs": probs, "scores": scores, "global_key_probs": gprobs}

    def _local(
        self, x: torch.Tensor, mask: torch.Tensor, glob: GlobalTokens | None, p: float
    ) -> torch.Tensor:
        """Band (plus global keys) attention of every query with the local projections.

        x: (B, T, H); mask: (B, T) bool real tokens → (B, T, H).
        """
        B, T, H = x.shape
        N, Dh, W = self.num_heads, self.head_dim, self.one_sided
        nb = -(-T // W)  # query blocks of W
        extra = nb * W - T  # padding of the last block
        # The input is padded by W rows in front and W (+ the last block's padding) behind, so
        # that the projections come out padded: block c's queries are padded rows
        # [(c+1)W, (c+2)W), its keys the 3W padded rows [cW, (c+3)W), i.e. original positions
        # [(c-1)W, (c+2)W). Padding rows are never attended to (key_ok) and are cut at the end.
        qkv = self.qkv(F.pad(x, (0, 0, W, W + extra))).view(B, nb * W + 2 * W, 3, N, Dh)
        q, k, v = qkv.unbind(2)  # (B, (nb+2)W, N, Dh) views
        kb = k.unfold(1, 3 * W, W).transpose(-1, -2)  # (B, nb, N, 3W, Dh) views
        vb = v.unfold(1, 3 * W, W).transpose(-1, -2)
        key_ok = mask if glob is None else mask & ~glob.is_global  # global keys come once, below
        key_ok = F.pad(key_ok, (W, W + extra), value=False).unfold(1, 3 * W, W)  # (B, nb, 3W)
        # Query a (of block c) and key b (of its 3W keys) are |i - j| <= W apart iff a <= b <= a+2W.
        a = torch.arange(W, device=x.device)[:, None]
        b = torch.arange(3 * W, device=x.device)[None, :]
        band = (b >= a) & (b <= a + 2 * W)  # (W, 3W)
        allowed = band[None, None] & key_ok[:, :, None, :]  # (B, nb, W, 3W)
        if glob is not None:
            G = glob.index.shape[1]
            idx = (glob.index + W)[:, :, None, None].expand(B, G, N, Dh)  # padded rows
            gk = k.gather(1, idx).transpose(1, 2)[:, None].expand(B, nb, N, G, Dh)
            gv = v.gather(1, idx).transpose(1, 2)[:, None].expand(B, nb, N, G, Dh)
            gok = glob.valid[:, None, None, :].expand(B, nb, W, G)  # (B, nb, W, G)
        # SDPA over groups of blocks, (B·n, N, W, Dh) queries against (B·n, N, S, Dh) keys each:
        # the blocked copies of K and V then never exceed about queries_per_call·3 rows.
        y = x.new_empty(B, nb * W, N, Dh)
        step = max(1, self.queries_per_call // W)
        for c0 in range(0, nb, step):
            c1 = min(nb, c0 + step)
            n = c1 - c0
            kc, vc, ok = kb[:, c0:c1], vb[:, c0:c1], allowed[:, c0:c1]
            if glob is not None:
                kc = torch.cat([gk[:, :n], kc], dim=3)  # (B, n, N, G + 3W, Dh), one copy
                vc = torch.cat([gv[:, :n], vc], dim=3)
                ok = torch.cat([gok[:, :n], ok], dim=3)
            S = kc.shape[3]
            qc = q[:, (c0 + 1) * W : (c1 + 1) * W].reshape(B * n, W, N, Dh).transpose(1, 2)
            bias = torch.zeros(ok.shape, dtype=x.dtype, device=x.device)
            bias = bias.masked_fill_(~ok, torch.finfo(x.dtype).min).view(B * n, 1, W, S)
            yc = F.scaled_dot_product_attention(
                qc,
                kc.reshape(B * n, N, S, Dh),
                vc.reshape(B * n, N, S, Dh),
                attn_mask=bias,
                dropout_p=p,
            )  # (B·n, N, W, Dh)
            y[:, c0 * W : c1 * W] = yc.view(B, n, N, W, Dh).transpose(2, 3).reshape(B, n * W, N, Dh)
        return y[:, :T].reshape(B, T, H)

    def _local_traced(
        self, x: torch.Tensor, mask: torch.Tensor, glob: GlobalTokens | None
    ) -> torch.Tensor:
        """`_local` for the ONNX exporter (eval mode): the same blocks of W queries against
        their 3W keys plus the global keys, built by concatenating shifted block views instead
        of ``unfold`` and run in one `scaled_dot_product_attention` call over all blocks (no
        loop whose length depends on T). x: (B, T, H); mask: (B, T) bool → (B, T, H)."""
        B, T, H = x.shape
        N, Dh, W = self.num_heads, self.head_dim, self.one_sided
        nb = (T + W - 1) // W  # query blocks of W (traced: a graph value, not a constant)
        extra = nb * W - T
        qkv = self.qkv(F.pad(x, (0, 0, W, W + extra))).view(B, nb + 2, W, 3, N, Dh)
        q, k, v = qkv.unbind(3)  # (B, nb + 2, W, N, Dh): padded blocks -1 .. nb

        def around(t: torch.Tensor) -> torch.Tensor:
            """(B, nb + 2, W, ...) padded blocks → (B, nb, 3W, ...): blocks c-1, c, c+1."""
            return torch.cat([t[:, :-2], t[:, 1:-1], t[:, 2:]], dim=2)

        kb = around(k).transpose(2, 3)  # (B, nb, N, 3W, Dh)
        vb = around(v).transpose(2, 3)
        key_ok = mask if glob is None else mask & ~glob.is_global  # global keys come once
        key_ok = around(F.pad(key_ok, (W, W + extra), value=False).view(B, nb + 2, W))
        a = torch.arange(W, device=x.device)[:, None]
        b = torch.arange(3 * W, device=x.device)[None, :]
        band = (b >= a) & (b <= a + 2 * W)  # (W, 3W)
        ok = band[None, None] & key_ok[:, :, None, :]  # (B, nb, W, 3W)
        if glob is not None:
            G = glob.index.shape[1]
            kf, vf = k.reshape(B, -1, N, Dh), v.reshape(B, -1, N, Dh)  # (B, (nb+2)W, N, Dh)
            idx = (glob.index + W)[:, :, None, None].expand(B, G, N, Dh)  # padded rows
            gk = kf.gather(1, idx).transpose(1, 2)[:, None].expand(B, nb, N, G, Dh)
            gv = vf.gather(1, idx).transpose(1, 2)[:, None].expand(B, nb, N, G, Dh)
            kb, vb = torch.cat([gk, kb], dim=3), torch.cat([gv, vb], dim=3)
            ok = torch.cat([glob.valid[:, None, None, :].expand(B, nb, W, G), ok], dim=3)
        S = kb.shape[3]
        bias = torch.zeros(ok.shape, dtype=x.dtype, device=x.device)
        bias = bias.masked_fill(~ok, torch.finfo(x.dtype).min).view(B * nb, 1, W, S)
        qb = q[:, 1:-1].reshape(B * nb, W, N, Dh).transpose(1, 2)  # (B·nb, N, W, Dh)
        y = F.scaled_dot_product_attention(
            qb, kb.reshape(B * nb, N, S, Dh), vb.reshape(B * nb, N, S, Dh), attn_mask=bias
        )  # (B·nb, N, W, Dh)
        return y.view(B, nb, N, W, Dh).transpose(2, 3).reshape(B, nb * W, H)[:, :T]

    def _global_traced(
        self, x: torch.Tensor, y: torch.Tensor, ctx: AttentionContext, glob: GlobalTokens
    ) -> torch.Tensor:
        """`_global` for the ONNX exporter (eval mode, no weights): the global rows are
        written back with a scatter and a select instead of boolean-mask indexing. G may be 0."""
        B, T, H = x.shape
        N, Dh, G = self.num_heads, self.head_dim, glob.index.shape[1]
        xg = x.gather(1, glob.index[:, :, None].expand(B, G, H))  # (B, G, H)
        qg = self.query_global(xg).view(B, G, N, Dh).transpose(1, 2)  # (B, N, G, Dh)
        kg, vg = self.kv_global(x).view(B, T, 2, N, Dh).permute(2, 0, 3, 1, 4).unbind(0)
        out = F.scaled_dot_product_attention(qg, kg, vg, attn_mask=ctx.bias.to(qg.dtype))
        out = out.transpose(1, 2).reshape(B, G, H)
        # Slots without a global token go to an extra column T, dropped after the scatter.
        where = torch.where(glob.valid, glob.index, torch.full_like(glob.index, T))
        rows = torch.zeros(B, T + 1, H, dtype=y.dtype, device=y.device)
        rows = rows.scatter(1, where[:, :, None].expand(B, G, H), out)[:, :T]
        return torch.where(glob.is_global[:, :, None], rows, y)

    def _global(
        self,
        x: torch.Tensor,
        y: torch.Tensor,
        ctx: AttentionContext,
        glob: GlobalTokens,
        p: float,
        need_weights: bool = False,
    ):
        """Replace the rows of global tokens in y (B, T, H) by their global attention:
        softmax(Q_g(x_g) K_g(x)ᵀ / √Dh + padding mask) V_g(x).

        Returns:
            (y (B, T, H), the global rows' probabilities (B, N, G, T) when ``need_weights``
            (0 on padding keys and on the slots of rows with fewer than G global tokens),
            else None).
        """
        B, T, H = x.shape
        N, Dh, G = self.num_heads, self.head_dim, glob.index.shape[1]
        xg = x.gather(1, glob.index[:, :, None].expand(B, G, H))  # (B, G, H)
        qg = self.query_global(xg).view(B, G, N, Dh).transpose(1, 2)  # (B, N, G, Dh)
        kg, vg = self.kv_global(x).view(B, T, 2, N, Dh).permute(2, 0, 3, 1, 4).unbind(0)
        probs = None
        if need_weights:
            s = (qg @ kg.transpose(-1, -2)).float() / math.sqrt(Dh)  # (B, N, G, T)
            probs = torch.softmax(s + ctx.bias.float(), dim=-1).to(x.dtype)
            probs = probs.masked_fill(~glob.valid[:, None, :, None], 0.0)
            out = F.dropout(probs, p, self.training) @ vg  # (B, N, G, Dh)
        else:
            out = F.scaled_dot_product_attention(
                qg, kg, vg, attn_mask=ctx.bias.to(qg.dtype), dropout_p=p
            )  # (B, N, G, Dh)
        out = out.transpose(1, 2).reshape(B, G, H)
        y = y.clone()
        y[glob.is_global] = out[glob.valid]  # both in (row, ascending position) order
        return y, probs
