"""DeBERTa's disentangled self-attention and its encoder-level relative position table.

He et al. 2021, "DeBERTa: Decoding-enhanced BERT with Disentangled Attention", §3.1: each token
is represented by its content H and, relative to every other token, by a relative position P.
The attention score of query i and key j sums up to three terms (eq. 2 and 4)::

    Ã[i, j] = Q^c_i · K^c_j                 content-to-content  (c2c)
            + Q^c_i · K^r_δ(i,j)             content-to-position (c2p)
            + K^c_j · Q^r_δ(i,j)             position-to-content (p2c)

    Q^c = H W_q,  K^c = H W_k,  V^c = H W_v,  K^r = P W_k,r,  Q^r = P W_q,r

with δ the clipped relative distance (eq. 3) and the scores scaled by 1/√(Dh·(1 + number of
position terms)) (eq. 4 uses √(3d) for the three terms).

Index convention (the published checkpoints and transformers' DebertaModel): for a sequence of
length T, span s = min(T, k), the table rows used are ``table[k - s : k + s]`` and the pair
(i, j) reads row ``clamp(i - j + s, 0, 2s - 1)`` of that slice, for c2p *and* p2c.

DeBERTa-v2/v3 (the microsoft/DeBERTa code, ``DeBERTa/deberta/da_utils.py`` and
``disentangled_attention.py``; transformers' DebertaV2Model) extend this with config fields:
distances bucketed on a log scale into a (2b, H) table, b = position_buckets
(`log_bucket_position`), row ``clamp(bucket(i - j) + b, 0, 2b - 1)``; an optional LayerNorm on
the table (norm_rel_ebd); position projections that reuse the content projections
(share_att_key); biases on every projection (key_bias, with the v2 checkpoints' separate
query/key/value projections).

Speed: instead of gathering a (B, N, T, T) index out of (B, N, T, 2s) products, the encoder
hands every layer the 2T - 1 rows one per distance d = i - j (clipping already applied, so the
rows beyond ±k repeat the edge row); the products (B, N, T, 2T - 1) are then read as (B, N, T, T)
through a strided view (row i starts one column earlier than row i - 1, the "relative shift" of
Dai et al. 2019 §3.3 / Huang et al. 2018 §3.4.1), and c2c, the mask, softmax and the product with
V run in one `scaled_dot_product_attention` call.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from ..errors import InputError
from .attention import AttentionOutput
from .context import AttentionContext


def log_bucket_position(
    distance: torch.Tensor, position_buckets: int, max_position: int
) -> torch.Tensor:
    """DeBERTa-v2's log-bucketed relative distance (microsoft/DeBERTa,
    ``DeBERTa/deberta/da_utils.py`` ``make_log_bucket_position``; transformers'
    ``modeling_deberta_v2.make_log_bucket_position``).

    With m = position_buckets // 2: distances |d| <= m keep their value; longer ones are
    compressed logarithmically, ``sign(d) · (m + ceil(log(|d| / m) / log((max_position - 1) / m)
    · (m - 1)))``, so |d| = max_position - 1 lands on bucket 2m - 1 and farther distances
    beyond it (then clipped by the caller).

    Args:
        distance: int64 relative distances i - j, any shape.
        position_buckets: b (> 0).
        max_position: k, the distance mapped to the last bucket (k - 1 > b // 2, checked by
            `EncoderConfig`).

    Returns:
        int64 buckets of the same shape. Computed in float32 with the reference's operations,
        so every bucket equals the reference's.
    """
    mid = position_buckets // 2
    sign = torch.sign(distance)
    inside = (distance < mid) & (distance > -mid)
    # |d| < m reads m - 1 here only to keep the log finite; those entries keep d below
    abs_pos = torch.where(inside, torch.full_like(distance, mid - 1), distance.abs())
    scale = torch.log(torch.tensor((max_position - 1) / mid))  # float32, as the reference
    log_pos = torch.ceil(torch.log(abs_pos / mid) / scale * (mid - 1)) + mid
    return torch.where(abs_pos <= mid, distance.to(log_pos.dtype), log_pos * sign).long()


def relative_rows(
    seq_len: int,
    max_relative_positions: int,
    device: torch.device | None = None,
    position_buckets: int = 0,
) -> torch.Tensor:
    """Rows of the relative table read for each distance d = i - j.

    Args:
        seq_len: T.
        max_relative_positions: k.
        position_buckets: b; > 0 = log buckets (`log_bucket_position`) in a (2b, H) table,
            else a (2k, H) table read by plain distance.

    Returns:
        (2T - 1,) int64; entry r is the table row for distance d = r - (T - 1): without
        buckets ``k - s + clamp(d + s, 0, 2s - 1)`` with s = min(T, k) (distances beyond ±k
        clipped), with buckets ``clamp(bucket(d) + b, 0, 2b - 1)``.
    """
    # With s = min(T, k): for T <= k every d + s lies in [1, 2T - 1], so the entry is k + d;
    # for T > k it is clamp(d + k, 0, 2k - 1). Both are clamp(d + k, 0, 2k - 1), which needs
    # no Python int taken from T (the ONNX exporter traces it with a dynamic T).
    d = torch.arange(-(seq_len - 1), seq_len, device=device)
    span = max_relative_positions
    if position_buckets > 0:
        d = log_bucket_position(d, position_buckets, max_relative_positions)
        span = position_buckets
    return (d + span).clamp(0, 2 * span - 1)


class RelativePositionEmbeddings(nn.Module):
    """The relative position table P (2k, H) or, with buckets, (2b, H), owned by the encoder
    and shared by all layers.

    Called once per forward as the encoder's ``attention_inputs`` provider.

    Args:
        max_relative_positions: k (distances are clipped to [-k, k)).
        hidden_size: H.
        position_buckets: b; > 0 = log-bucketed distances (DeBERTa-v2), see `relative_rows`.
        norm: a norm over H applied to the table rows (DeBERTa-v2's norm_rel_ebd
            "layer_norm"), or None.
    """

    inputs = ()  # reads no forward keyword of Encoder/Model

    def __init__(
        self,
        max_relative_positions: int,
        hidden_size: int,
        position_buckets: int = 0,
        norm: nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.max_relative_positions = max_relative_positions
        self.position_buckets = max(position_buckets, 0)
        span = self.position_buckets or max_relative_positions
        self.embeddings = nn.Embedding(2 * span, hidden_size)
        self.norm = norm

    def forward(self, x: torch.Tensor, ctx: AttentionContext) -> dict[str, torch.Tensor]:
        """x: (B, T, H) → the context fields to set: {"relative_embeddings": (2T - 1, H)},
        row r for distance r - (T - 1)."""
        rows = relative_rows(
            x.shape[1], self.max_relative_positions, x.device, self.position_buckets
        )
        rel = self.embeddings(rows)  # (2T - 1, H)
        # the norm is per row: normalising the rows read equals normalising the whole table
        return {"relative_embeddings": rel if self.norm is None else self.norm(rel)}


def _relative_view(full: torch.Tensor) -> torch.Tensor:
    """(B, N, T, 2T - 1) with unit stride on the last axis (any strides elsewhere) → (B, N, T, T)
    view ``out[.., a, b] = full[.., a, b - a + T - 1]``.

    Row a of the result starts at column T - 1 - a of row a of ``full`` (offset
    a·(row stride - 1) + T - 1 + b from the row start), a strided view without a copy or a
    gather. While the ONNX exporter traces, the same entries are read with a gather instead
    (``as_strided`` has no ONNX form with dynamic sizes): identical values.
    """
    if torch.jit.is_tracing():
        T = full.shape[-2]
        a = torch.arange(T, device=full.device)
        index = a[None, :] - a[:, None] + (T - 1)  # (T, T): b - a + T - 1
        return full.gather(-1, index.expand_as(full[..., :T]))  # sizes read in the graph
    B, N, T, _ = full.shape
    s0, s1, s2, s3 = full.stride()
    if s3 != 1:
        raise InputError(f"_relative_view needs unit stride on the last axis, got {s3}")
    return full.as_strided((B, N, T, T), (s0, s1, s2 - 1, 1), full.storage_offset() + T - 1)


def _per_head_products(x: torch.Tensor, rel: torch.Tensor, fold: bool = True) -> torch.Tensor:
    """x (B, N, T, Dh) · rel (N, R, Dh)ᵀ → (B, N, T, R), as one (N, B·T, Dh) @ (N, Dh, R)
    product: the relative rows are shared by the batch, so they are not expanded (and copied)
    to B copies as a broadcast matmul would; x in the (B, T, N, Dh) memory layout of the fused
    projection is read without a copy. The result is a (B, N, T, R) view of an (N, B, T, R)
    tensor (unit stride on R, as `_relative_view` needs). While the ONNX exporter traces, the
    broadcast product (same values; sizes read in the graph), and with ``fold=False`` (attention
    weights requested: the dataflow view shows the (B, N, T, R) product itself)."""
    if torch.jit.is_tracing() or not fold:
        return x @ rel.transpose(-1, -2)
    B, N, T, Dh = x.shape
    flat = x.transpose(0, 1).reshape(N, B * T, Dh)  # a view when B, T are adjacent in memory
    # R named, not -1: an empty batch (B = 0) has no size to infer
    return (flat @ rel.transpose(-1, -2)).view(N, B, T, rel.shape[-2]).transpose(0, 1)


class DisentangledSelfAttention(nn.Module):
    """Multi-head disentangled self-attention (He et al. 2021 §3.1, eq. 2–4).

    Parameters follow the checkpoints: one fused Q/K/V projection without bias (our rows
    [Q; K; V]; v1 checkpoints interleave them per head, see `checkpoints.convert.JOINS`; v2
    ones store three projections), separate Q and V biases (and a K bias with ``key_bias``), a
    K^r projection (c2p; biased with ``key_bias``) and a Q^r projection with bias (p2c), then
    the output projection. With ``share_att_key`` (DeBERTa-v2) there is no K^r / Q^r: the
    relative embeddings go through the content K / Q projections, biases included.

    Masking: keys are masked with the batch's finite additive bias (the dtype's minimum), the
    softmax runs in fp32, and rows of padding queries are zeroed, so every masked entry of the
    probabilities is exactly zero (the original XSoftmax).

    Reads ``ctx.relative_embeddings`` (2T - 1, H) from
    `RelativePositionEmbeddings` (without it only c2c is computed), and optionally
    ``ctx.key_value_states`` (B, T, H): keys and values come from these instead of the layer input
    (the enhanced mask decoder queries with absolute positions added; §3.3).

    Args:
        hidden_size: H.
        num_heads: N.
        dropout: attention-probability dropout.
        position_dropout: dropout on the relative embeddings (the hidden dropout in DeBERTa).
        pos_att_type: position terms, a subset of ("c2p", "p2c").
        relative: build the position projections (relative_attention).
        share_att_key: position terms reuse the content Q/K projections (DeBERTa-v2).
        key_bias: K^c and K^r have biases (DeBERTa-v2); v1 has neither.
    """

    supports_attention_matrix = True  # honours a (B, 1, T, S) bias (a visibility matrix)

    def __init__(
        self,
        hidden_size: int,
        num_heads: int,
        dropout: float,
        position_dropout: float,
        pos_att_type: tuple[str, ...],
        relative: bool = True,
        share_att_key: bool = False,
        key_bias: bool = False,
    ) -> None:
        super().__init__()
        H = hidden_size
        self.num_heads = num_heads
        self.head_dim = H // num_heads
        self.pos_att_type = tuple(pos_att_type)
        # eq. 4: √(3d) with c2p and p2c; in general √(Dh · (1 + number of position terms)).
        self.scale = math.sqrt(self.head_dim * (1 + len(self.pos_att_type)))
        self.qkv = nn.Linear(H, 3 * H, bias=False)
        self.q_bias = nn.Parameter(torch.zeros(H))
        self.k_bias = nn.Parameter(torch.zeros(H)) if key_bias else None
        self.v_bias = nn.Parameter(torch.zeros(H))
        self.share_att_key = share_att_key
        own = relative and not share_att_key  # separate position projections
        self.pos_key = (
            nn.Linear(H, H, bias=key_bias) if own and "c2p" in self.pos_att_type else None
        )
        self.pos_query = nn.Linear(H, H) if own and "p2c" in self.pos_att_type else None
        self.out = nn.Linear(H, H)
        self.dropout = dropout
        self.position_dropout = position_dropout

    def _heads(self, t: torch.Tensor) -> torch.Tensor:
        """(.., T, H) → (.., N, T, Dh)."""
        # A view over the traced leading sizes (the exporter folds unflatten's to constants).
        return t.view(t.shape[:-1] + (self.num_heads, self.head_dim)).transpose(-3, -2)

    def _project(self, x: torch.Tensor, ctx: AttentionContext):
        """Q (scaled, with bias), K, V, each (B, N, T, Dh)."""
        B, T, H = x.shape
        kv_states = ctx.key_value_states
        if kv_states is None:
            qkv = self.qkv(x).view(B, T, 3, self.num_heads, self.head_dim)
            q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (B, N, T, Dh)
        else:
            w_q, w_kv = self.qkv.weight.split([H, 2 * H])
            q = self._heads(F.linear(x, w_q))  # (B, N, T, Dh)
            kv = F.linear(kv_states, w_kv).view(B, T, 2, self.num_heads, self.head_dim)
            k, v = kv.permute(2, 0, 3, 1, 4).unbind(0)  # each (B, N, T, Dh)
        q = (q + self.q_bias.view(self.num_heads, 1, self.head_dim)) / self.scale
        if self.k_bias is not None:
            k = k + self.k_bias.view(self.num_heads, 1, self.head_dim)
        v = v + self.v_bias.view(self.num_heads, 1, self.head_dim)
        return q, k, v

    def _position_projections(self, rel: torch.Tensor):
        """(R, H) relative embeddings → (K^r, Q^r), each (R, H) or None: the own position
        projections, or (share_att_key) the content K and Q projections with their biases."""
        if not self.share_att_key:
            pk = self.pos_key(rel) if self.pos_key is not None else None
            pq = self.pos_query(rel) if self.pos_query is not None else None
            return pk, pq
        H = rel.shape[-1]
        w_q, w_k, _ = self.qkv.weight.split([H, H, H])
        pk = F.linear(rel, w_k, self.k_bias) if "c2p" in self.pos_att_type else None
        pq = F.linear(rel, w_q, self.q_bias) if "p2c" in self.pos_att_type else None
        return pk, pq

    def relative_scores(
        self, q: torch.Tensor, k: torch.Tensor, rel: torch.Tensor, fold: bool = True
    ) -> torch.Tensor | None:
        """c2p + p2c scores (B, N, T, T) (eq. 2, second and third terms), or None.

        Args:
            q: (B, N, T, Dh) queries, already divided by the scale.
            k: (B, N, T, Dh) keys.
            rel: (2T - 1, H) relative embeddings, row r for distance i - j = r - (T - 1).
            fold: the batch folded into one product per head (`_per_head_products`).
        """
        rel = F.dropout(rel, self.position_dropout, self.training)
        pk, pq = self._position_projections(rel)  # each (2T - 1, H) or None
        score = None
        if pk is not None:
            # Rows in descending distance so that row i of the product, read from column
            # T - 1 - i on, gives distances i - 0, i - 1, ... (the strided view).
            pk = self._heads(pk.flip(0))  # (N, 2T-1, Dh)
            score = _relative_view(_per_head_products(q, pk, fold))  # (B, N, T, T)
        if pq is not None:
            pq = self._heads(pq) / self.scale  # (N, 2T-1, Dh), ascending
            # (k @ pqᵀ)[j, i - j + T - 1] read as [j, i], then transposed to [i, j].
            p2c = _relative_view(_per_head_products(k, pq, fold)).transpose(-1, -2)  # (B, N, T, T)
            score = p2c if score is None else score + p2c
        return score

    def forward(self, x: torch.Tensor, ctx: AttentionContext) -> AttentionOutput:
        """x: (B, T, H) float → AttentionOutput with hidden (B, T, H)."""
        B, T, H = x.shape
        q, k, v = self._project(x, ctx)
        rel = ctx.relative_embeddings
        rel_scores = (
            self.relative_scores(q, k, rel, fold=not ctx.need_weights) if rel is not None else None
        )
        p = self.dropout if self.training else 0.0
        query_keep = ctx.mask[:, None, :, None]  # (B, 1, T, 1)
        probs = scores = None
        if ctx.need_weights:
            scores = q @ k.transpose(-1, -2)  # (B, N, T, S)
            if rel_scores is not None:
                scores = scores + rel_scores
            probs = torch.softmax(scores.float() + ctx.bias.float(), dim=-1)
            probs = probs.masked_fill(~(query_keep & ctx.mask[:, None, None, :]), 0.0)
            probs = probs.to(q.dtype)
            y = F.dropout(probs, p, self.training) @ v  # (B, N, T, Dh)
        else:
            bias = ctx.bias.to(q.dtype) if ctx.padded else None  # (B, 1, 1|T, S); none: no mask
            if rel_scores is not None:
                bias = rel_scores if bias is None else rel_scores + bias  # (B, N, T, S)
            y = F.scaled_dot_product_attention(
                q, k, v, attn_mask=bias, dropout_p=p, scale=1.0
            )  # (B, N, T, Dh)
            if ctx.padded:
                y = y * query_keep.to(y.dtype)  # padding queries attend to nothing (XSoftmax)
        y = y.transpose(1, 2).reshape(B, T, H)  # (B, T, H)
        return AttentionOutput(self.out(y), probs, scores)
