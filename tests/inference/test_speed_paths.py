"""The fast paths of issue 20: no mask when nothing is padded, per-sequence attention over packed
tokens, DeBERTa's batch-shared relative products, and the benchmark's FLOP formula."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch.nn import functional as F

import bertfamily as bf
from bertfamily.modules import attention as attention_module
from bertfamily.modules.attention import SelfAttention
from bertfamily.modules.attention_disentangled import _per_head_products, _relative_view
from bertfamily.modules.context import AttentionContext

ROOT = Path(__file__).resolve().parents[2]


def _tiny_bert(**overrides):
    config = bf.EncoderConfig.from_preset(
        "bert-base",
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        vocab_size=100,
        **overrides,
    )
    torch.manual_seed(0)
    return bf.build_model(config).eval()


def _batch(lengths):
    T = max(lengths)
    mask = (torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]).long()
    ids = torch.randint(5, 100, (len(lengths), T), generator=torch.Generator().manual_seed(1))
    return ids.masked_fill(mask == 0, 0), mask


def test_context_padded_flag():
    ones = torch.ones(2, 5, dtype=torch.long)
    assert AttentionContext.from_mask(ones, torch.float32).padded is False
    ones[1, 4] = 0
    assert AttentionContext.from_mask(ones, torch.float32).padded is True


def test_no_padding_calls_sdpa_without_mask(monkeypatch):
    """An all-real batch reaches attention (`attention.attend`) with mask=None; a padded one
    (padded path) with the additive mask; both give the outputs of the padded computation."""
    seen = []
    real = attention_module.attend

    def spy(q, k, v, mask, p):
        seen.append(mask)
        return real(q, k, v, mask, p)

    model = _tiny_bert()
    ids, _ = _batch([6, 6])
    full = torch.ones_like(ids)
    monkeypatch.setattr(attention_module, "attend", spy)
    with torch.inference_mode():
        fast = model(ids, full).last_hidden_state
        assert len(seen) == 2 and all(m is None for m in seen)
        # the same batch with one extra padding column: the real rows must not change
        padded_ids = torch.cat([ids, torch.zeros_like(ids[:, :1])], 1)
        padded_mask = torch.cat([full, torch.zeros_like(full[:, :1])], 1)
        model.encoder.unpad = False
        slow = model(padded_ids, padded_mask).last_hidden_state[:, :6]
    assert seen[2] is not None and seen[2].shape == (2, 1, 1, 7)
    torch.testing.assert_close(fast, slow, atol=1e-5, rtol=0)


@pytest.mark.parametrize("strategy", ["per_sequence", "padded", "bucketed"])
def test_packed_strategies_equal_padded_path(monkeypatch, strategy):
    monkeypatch.setattr(SelfAttention, "packed_strategy", strategy)
    model = _tiny_bert()
    ids, mask = _batch([7, 1, 4, 7])
    with torch.inference_mode():
        packed = model(ids, mask).last_hidden_state
        model.encoder.unpad = False
        reference = model(ids, mask).last_hidden_state
    assert packed.abs().max() > 0.1  # not a trivially zero output
    torch.testing.assert_close(packed, reference * mask[..., None], atol=1e-5, rtol=0)


def test_auto_packed_strategy_is_per_sequence_on_one_thread_and_bucketed_on_more(monkeypatch):
    from bertfamily.modules.unpad import Unpadded

    # measured: benchmarks/results/packed_attention.json (one thread: per-sequence 1.13x)
    assert SelfAttention.packed_strategy == "auto"
    attn = SelfAttention(8, 2, dropout=0.0).eval()
    x = torch.randn(7, 8)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])
    ctx = AttentionContext.from_mask(mask, torch.float32, unpadded=Unpadded.from_mask(mask))
    called = []
    monkeypatch.setattr(attn, "_packed", lambda *a: called.append("per_sequence") or x)
    monkeypatch.setattr(attn, "_packed_bucketed", lambda *a: called.append("bucketed") or x)
    before = torch.get_num_threads()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            attn(x, ctx)
    finally:
        torch.set_num_threads(before)
    assert called == ["per_sequence", "bucketed"]


def test_auto_packed_strategy_is_per_sequence_for_long_sequences(monkeypatch):
    """Two threads: sequences averaging LONG_SEQUENCE tokens or more attend one by one."""
    from bertfamily.modules.attention import LONG_SEQUENCE
    from bertfamily.modules.unpad import Unpadded

    attn = SelfAttention(8, 2, dropout=0.0).eval()
    called = []
    monkeypatch.setattr(attn, "_packed", lambda x, *a: called.append("per_sequence") or x)
    monkeypatch.setattr(attn, "_packed_bucketed", lambda x, *a: called.append("bucketed") or x)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        for n in (LONG_SEQUENCE - 1, LONG_SEQUENCE):
            mask = torch.ones(2, n + 1, dtype=torch.long)
            mask[0, -1] = mask[1, -1] = 0  # n real tokens each, padded by one
            ctx = AttentionContext.from_mask(mask, torch.float32, unpadded=Unpadded.from_mask(mask))
            attn(torch.randn(2 * n, 8), ctx)
    finally:
        torch.set_num_threads(before)
    assert called == ["bucketed", "per_sequence"]


def test_buckets_group_by_wasted_attention_and_cover_every_token():
    """H = 384 (budget 6·0.05·384 = 115.2 per token): 512 and 500 share a bucket (waste
    12,144 ≤ 115.2·1,012), 100 does not join them (264,288 > 115.2·1,112); 100, 90 and 3 share
    the second (11,891 ≤ 115.2·193). The empty row is in none; every real token is in exactly
    one bucket, at its padded slot."""
    from bertfamily.modules.unpad import Unpadded

    lengths = [512, 100, 500, 0, 3, 90]
    mask = (torch.arange(512)[None, :] < torch.tensor(lengths)[:, None]).long()
    buckets = Unpadded.from_mask(mask).buckets(384)
    assert [(b.rows, b.length) for b in buckets] == [(2, 512), (3, 100)]
    src = torch.cat([b.src for b in buckets]).sort().values
    assert src.tolist() == list(range(sum(lengths)))
    first, second = buckets
    assert first.dest.tolist() == list(range(512)) + list(range(512, 1012))
    assert first.mask[:, 0, 0].sum(1).tolist() == [512, 500] and not first.contiguous
    assert second.mask[:, 0, 0].sum(1).tolist() == [100, 3, 90]
    same = Unpadded.from_mask(torch.tensor([[1, 1, 1], [1, 1, 1], [1, 0, 0]])).buckets(384)
    assert [(b.rows, b.length) for b in same] == [(3, 3)]
    two = Unpadded.from_mask(torch.tensor([[1, 1, 0], [1, 1, 0]]))
    assert two is not None and two.buckets(384)[0].contiguous  # no mask, a plain view
    assert two.buckets(384)[0].mask is None


def test_length_sorted_batch_attends_in_one_call_per_layer(monkeypatch):
    """A batch of similar lengths (what `embed` feeds, sorted by length) makes one attention
    call per layer, not one per sequence."""
    monkeypatch.setattr(SelfAttention, "packed_strategy", "bucketed")
    calls = []
    real = attention_module.attend
    monkeypatch.setattr(attention_module, "attend", lambda *a: calls.append(a[0].shape) or real(*a))
    model = _tiny_bert()
    ids, mask = _batch([10, 10, 9, 9, 9, 8])
    with torch.inference_mode():
        model(ids, mask)
    assert len(calls) == len(model.encoder.layers) and calls[0][0] == 6


@pytest.mark.parametrize("t", [1, 5, 32])
@pytest.mark.parametrize("mask_kind", ["none", "keys", "full"])
def test_short_attention_equals_sdpa(t, mask_kind):
    """Up to SHORT_ATTENTION keys an fp32 CPU inference call is two batched products and a
    softmax, equal to SDPA's fused kernel to float rounding (fully masked rows included)."""
    from bertfamily.modules.attention import SHORT_ATTENTION, attend

    assert t <= SHORT_ATTENTION
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 4, t, 8), torch.randn(3, 4, t, 8), 3 * torch.randn(3, 4, t, 8)
    mask = None
    if mask_kind == "keys":  # (b, 1, 1, t) padding mask as the encoder builds it
        mask = torch.zeros(3, 1, 1, t)
        mask[1, ..., t // 2 + 1 :] = torch.finfo(torch.float32).min
        mask[2] = torch.finfo(torch.float32).min  # a row with every key masked
    elif mask_kind == "full":  # (1, 4, t, t) additive bias
        mask = torch.randn(1, 4, t, t)
    with torch.inference_mode():
        got = attend(q, k, v, mask, 0.0)
        want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert got.shape == want.shape == (3, 4, t, 8) and got.dtype == torch.float32
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    exact = F.scaled_dot_product_attention(
        q.double(), k.double(), v.double(), attn_mask=None if mask is None else mask.double()
    )
    assert (got - exact).abs().max() <= 2 * (want - exact).abs().max() + 1e-6  # as accurate


def test_short_attention_leaves_the_other_calls_to_sdpa(monkeypatch):
    from bertfamily.modules.attention import SHORT_ATTENTION, attend

    calls = []
    real = F.scaled_dot_product_attention
    monkeypatch.setattr(
        attention_module.F,
        "scaled_dot_product_attention",
        lambda *a, **k: calls.append(a[0].shape[-2]) or real(*a, **k),
    )
    q = torch.randn(2, 2, 4, 8)
    long = torch.randn(2, 2, SHORT_ATTENTION + 1, 8)
    bool_mask = torch.ones(2, 1, 1, 4, dtype=torch.bool)
    with torch.inference_mode():
        attend(q, q, q, None, 0.0)  # short fp32 inference: not SDPA
        assert calls == []
        attend(long, long, long, None, 0.0)  # long
        attend(q.bfloat16(), q.bfloat16(), q.bfloat16(), None, 0.0)  # bf16
        attend(q, q, q, bool_mask, 0.0)  # a boolean mask
    attend(q, q, q, None, 0.1)  # dropout
    grad = q.clone().requires_grad_(True)
    attend(grad, grad, grad, None, 0.0).sum().backward()  # autograd
    assert calls == [SHORT_ATTENTION + 1, 4, 4, 4, 4] and grad.grad is not None


def test_relative_view_reads_any_layout():
    """The strided view equals the gather out[.., a, b] = full[.., a, b - a + T - 1] for a
    contiguous (B, N, T, R) tensor and for the (N, B, T, R) layout `_per_head_products`
    returns."""
    B, N, T = 2, 3, 5
    R = 2 * T - 1
    a = torch.arange(T)
    index = (a[None, :] - a[:, None] + T - 1).expand(B, N, T, T)
    contiguous = torch.randn(B, N, T, R)
    head_major = torch.randn(N, B, T, R).transpose(0, 1)
    for full in (contiguous, head_major):
        torch.testing.assert_close(_relative_view(full), full.gather(-1, index), atol=0, rtol=0)


def test_per_head_products_equal_broadcast_matmul():
    B, N, T, Dh, R = 2, 3, 4, 8, 7
    qkv = torch.randn(B, T, 3, N, Dh)  # the fused projection's layout
    q = qkv[:, :, 0].transpose(1, 2)  # (B, N, T, Dh) strided view
    rel = torch.randn(N, R, Dh)
    expected = q @ rel.transpose(-1, -2)
    got = _per_head_products(q, rel)
    assert got.shape == (B, N, T, R)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_encoder_flops_formula_matches_flop_counter(monkeypatch):
    """The benchmark's dense FLOPs, L · Σn · (8H² + 4HI), equal what torch's FLOP counter
    sees in the projections and feed-forward of an unpadded forward (so they ran on real
    tokens only); the pooler's one (H, H) product per row is the only other matmul."""
    from torch.utils.flop_counter import FlopCounterMode

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from run import encoder_flops

    monkeypatch.setattr(attention_module, "SHORT_ATTENTION", 0)  # SDPA: not counted as matmuls
    model = _tiny_bert()
    lengths = [5, 9, 3]
    ids, mask = _batch(lengths)
    H, I, L = 32, 64, 2
    with FlopCounterMode(display=False) as counter, torch.inference_mode():
        model(ids, mask)
    attention = L * sum(4 * n * n * H for n in lengths)
    pooler = len(lengths) * 2 * H * H
    assert counter.get_total_flops() - pooler == encoder_flops(lengths, H, I, L) - attention


def test_varlen_plumbing_equals_bucketed(monkeypatch):
    """The CUDA variable-length path (cumulative lengths, one call, window_size) gives what the
    bucketed path gives, with a reference varlen kernel standing in for flash attention (CPU:
    the real kernel is CUDA-only; benchmarks/gpu_check.py compares the two on a GPU)."""
    calls = []

    def reference_varlen(q, k, v, cu_q, cu_k, max_q, max_k, *, window_size=(-1, -1)):
        calls.append((cu_q.tolist(), max_q, window_size))
        out = torch.empty_like(q)
        for a, b in zip(cu_q.tolist(), cu_q.tolist()[1:]):
            qs, ks, vs = (t[a:b].transpose(0, 1)[None] for t in (q, k, v))  # (1, N, n, Dh)
            out[a:b] = F.scaled_dot_product_attention(qs, ks, vs)[0].transpose(0, 1)
        return out

    model = _tiny_bert()
    ids, mask = _batch([7, 1, 4, 7])
    with torch.inference_mode():
        reference = model(ids, mask).last_hidden_state
        monkeypatch.setattr(attention_module, "_varlen_attn", lambda: reference_varlen)
        monkeypatch.setattr(SelfAttention, "_varlen_applies", lambda self, x, ctx: True)
        varlen = model(ids, mask).last_hidden_state
    assert calls[0] == ([0, 7, 8, 12, 19], 7, (-1, -1))
    assert len(calls) == len(model.encoder.layers)
    torch.testing.assert_close(varlen, reference, atol=1e-5, rtol=0)


def test_varlen_is_not_taken_on_cpu():
    model = _tiny_bert()
    layer = model.encoder.layers[0].attention
    assert not layer._varlen_applies(torch.zeros(3, 32), None)
