"""Unpadded execution equals the padded path (real tokens), for every family that uses it."""

from __future__ import annotations

import pytest
import torch

from bertfamily import EncoderConfig, build_model
from bertfamily.modules.unpad import Unpadded


def _random_right_padded(B, T, vocab, pad, seed):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    lengths[0] = T  # one full row
    lengths[-1] = 1  # one row that is all padding except [CLS]
    mask = (torch.arange(T)[None, :] < lengths[:, None]).long()
    ids = torch.randint(3, vocab, (B, T), generator=g).masked_fill(mask == 0, pad)
    return ids, mask


@pytest.mark.parametrize("preset", ["tiny-bert", "tiny-roberta", "tiny-distilbert", "tiny-albert"])
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("strategy", ["padded", "per_sequence", "bucketed"])
def test_unpadded_equals_padded(preset, seed, strategy, monkeypatch):
    from bertfamily.modules.attention import SelfAttention

    monkeypatch.setattr(SelfAttention, "packed_strategy", strategy)
    model = build_model(EncoderConfig.from_preset(preset), heads=["mlm"]).eval()
    ids, mask = _random_right_padded(6, 11, 99, model.config.pad_token_id, seed)
    assert Unpadded.from_mask(mask) is not None  # the packed path really runs
    with torch.no_grad():
        fast = model(ids, mask, output_hidden_states=True)
        model.encoder.unpad = False
        slow = model(ids, mask, output_hidden_states=True)
    real = mask.bool()
    torch.testing.assert_close(
        fast.last_hidden_state[real], slow.last_hidden_state[real], atol=1e-5, rtol=0
    )
    torch.testing.assert_close(fast.logits[real], slow.logits[real], atol=1e-5, rtol=0)
    for a, b in zip(fast.hidden_states, slow.hidden_states):
        torch.testing.assert_close(a[real], b[real], atol=1e-5, rtol=0)
    assert torch.all(fast.last_hidden_state[~real] == 0)  # documented: zeros at padding
    if fast.pooler_output is not None:
        torch.testing.assert_close(fast.pooler_output, slow.pooler_output, atol=1e-5, rtol=0)


def test_plan_does_not_apply_to_left_padding_or_full_batches():
    assert Unpadded.from_mask(torch.ones(2, 4)) is None
    assert Unpadded.from_mask(torch.tensor([[0, 1, 1], [1, 1, 1]])) is None
    plan = Unpadded.from_mask(torch.tensor([[1, 1, 0], [1, 0, 0]]))
    assert plan.lengths == [2, 1] and plan.index.tolist() == [0, 1, 3]


def test_unpadded_gradients_equal_padded():
    torch.manual_seed(0)
    model = build_model(
        EncoderConfig.from_preset(
            "tiny-bert", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0
        )
    )
    ids, mask = _random_right_padded(4, 9, 99, 0, 3)
    grads = []
    for unpad in (True, False):
        model.zero_grad()
        model.encoder.unpad = unpad
        out = model(ids, mask).last_hidden_state
        (out[mask.bool()] ** 2).sum().backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys() and len(grads[0]) > 20
    for name in grads[0]:
        torch.testing.assert_close(grads[0][name], grads[1][name], atol=1e-4, rtol=1e-3)
