"""`heads.late_interaction.maxsim`: ColBERT's sum (equal to PyLate's `colbert_scores`), BGE-M3's
mean over the query's real tokens, masks, and the errors."""

from __future__ import annotations

import pytest
import torch

from bertfamily.errors import InputError
from bertfamily.heads.late_interaction import maxsim


def _inputs():
    g = torch.Generator().manual_seed(0)
    q, d = torch.randn(2, 4, 3, generator=g), torch.randn(3, 5, 3, generator=g)
    q_mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    d_mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [0, 0, 0, 0, 0]])
    return q, d, q_mask, d_mask


def _by_hand(q, d, q_mask, d_mask, mean=False):
    out = torch.zeros(q.shape[0], d.shape[0])
    for a in range(q.shape[0]):
        for b in range(d.shape[0]):
            real_d = d[b][d_mask[b].bool()]
            total = 0.0
            for i in range(q.shape[1]):
                if q_mask[a, i] and len(real_d):
                    total += max(float(q[a, i] @ t) for t in real_d)
            out[a, b] = total / (int(q_mask[a].sum()) if mean else 1)
    return out


def test_sum_and_mean_equal_the_definition():
    q, d, qm, dm = _inputs()
    assert torch.allclose(maxsim(q, d, qm, dm), _by_hand(q, d, qm, dm), atol=1e-6)
    mean = maxsim(q, d, qm, dm, reduce="mean")
    assert torch.allclose(mean, _by_hand(q, d, qm, dm, mean=True), atol=1e-6)
    assert torch.equal(maxsim(q, d, qm, dm)[:, 2], torch.zeros(2))  # no real document token


def test_equals_pylate_colbert_scores():
    scores = pytest.importorskip("pylate.scores")
    q, d, _, dm = _inputs()
    theirs = scores.colbert_scores(q, d[:2], documents_mask=dm[:2])
    ours = maxsim(q, d[:2], None, dm[:2], padding_scores_zero=True)
    assert torch.allclose(ours, theirs, atol=1e-6)
    # the definition differs exactly where a query token's best real similarity is negative
    exact = maxsim(q, d[:2], None, dm[:2])
    assert not torch.allclose(exact, theirs) and torch.all(exact <= theirs + 1e-6)
    full = torch.ones(2, 5)  # no padding: both rules agree
    assert torch.allclose(maxsim(q, d[:2], None, full), scores.colbert_scores(q, d[:2]), atol=1e-6)


@pytest.mark.parametrize(
    "args, kwargs, message",
    [
        ((torch.zeros(2, 3), torch.zeros(1, 2, 3)), {}, "maxsim needs"),
        ((torch.zeros(1, 2, 3), torch.zeros(1, 2, 4)), {}, "maxsim needs"),
        ((torch.zeros(1, 2, 3), torch.zeros(1, 2, 3), torch.ones(1, 3)), {}, "query_mask"),
        ((torch.zeros(1, 2, 3), torch.zeros(1, 2, 3)), {"reduce": "max"}, "reduce"),
    ],
)
def test_errors(args, kwargs, message):
    with pytest.raises(InputError, match=message):
        maxsim(*args, **kwargs)
