"""Disentangled attention written out score by score (He et al. 2021 §3.1, eq. 2–4), in float64.

No batching tricks, no strided views: for every batch row b, head n, query i and key j the three
terms are computed from their definitions, with the relative index convention of the published
checkpoints (span s = min(T, k), rows ``table[k - s : k + s]``, row ``clamp(i - j + s, 0, 2s-1)``
for both c2p and p2c).
"""

from __future__ import annotations

import math

import torch


def disentangled_attention(x, mask, table, weights, num_heads, pos_att_type, query_states=None):
    """Reference forward of one attention block.

    Args:
        x: (B, T, H) keys/values input (and queries when ``query_states`` is None).
        mask: (B, T) 0/1, 1 = real token.
        table: (2k, H) relative position embeddings.
        weights: dict with qkv (3H, H) rows [Q; K; V], q_bias (H,), v_bias (H,), pos_key (H, H)
            or None, pos_query (H, H) and pos_query_bias (H,) or None, out (H, H), out_bias (H,).
        num_heads: N.
        pos_att_type: subset of ("c2p", "p2c").
        query_states: (B, T, H) optional separate query input.

    Returns:
        (B, T, H) float64; rows of padding queries get zero attention (the output bias only).
    """
    w = {k: (v.double() if v is not None else None) for k, v in weights.items()}
    x = x.double()
    xq = x if query_states is None else query_states.double()
    B, T, H = x.shape
    N, Dh = num_heads, H // num_heads
    k = table.shape[0] // 2
    s = min(T, k)
    P = table.double()[k - s: k + s]  # (2s, H)
    Wq, Wk, Wv = w["qkv"].split(H)
    Q = xq @ Wq.T + w["q_bias"]
    K = x @ Wk.T
    V = x @ Wv.T + w["v_bias"]
    Kr = P @ w["pos_key"].T if "c2p" in pos_att_type else None
    Qr = P @ w["pos_query"].T + w["pos_query_bias"] if "p2c" in pos_att_type else None
    scale = math.sqrt(Dh * (1 + len(pos_att_type)))
    ctx = torch.zeros(B, T, H, dtype=torch.float64)
    for b in range(B):
        for n in range(N):
            h = slice(n * Dh, (n + 1) * Dh)
            for i in range(T):
                if not mask[b, i]:
                    continue
                scores = torch.full((T,), float("-inf"), dtype=torch.float64)
                for j in range(T):
                    if not mask[b, j]:
                        continue
                    d = min(max(i - j + s, 0), 2 * s - 1)
                    a = Q[b, i, h] @ K[b, j, h]
                    if Kr is not None:
                        a = a + Q[b, i, h] @ Kr[d, h]
                    if Qr is not None:
                        a = a + K[b, j, h] @ Qr[d, h]
                    scores[j] = a / scale
                probs = torch.softmax(scores, dim=0)
                ctx[b, i, h] = probs @ V[b, :, h]
    return ctx @ w["out"].T + w["out_bias"]
