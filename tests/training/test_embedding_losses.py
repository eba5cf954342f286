"""Embedding losses against sentence-transformers' loss classes: from the same tiny random
sentence-transformers directory, the same batches and AdamW settings, the first 5 training
steps' losses agree within 1e-5 (our `Trainer` + `BiEncoder` + `objectives.contrastive` vs
sentence-transformers' model, loss and a plain torch AdamW loop); GradCache's gradients equal
the uncached loss's; SimCSE's two views differ under dropout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from bertfamily.objectives.contrastive import (
    GradCache,
    MultipleNegativesRanking,
    build_loss,
)
from bertfamily.pipelines.embedding.bi_encoder import BiEncoder
from bertfamily.pipelines.embedding.embed import PoolingSpec
from bertfamily.train.config import TrainConfig
from bertfamily.train.loop import Trainer
from helpers import make_tiny

st = pytest.importorskip("sentence_transformers")
losses = pytest.importorskip("sentence_transformers.sentence_transformer.losses")

WORDS = "the cat sat on a mat dog ran far away red blue car fast slow big small tree".split()


def sentences(n: int, seed: int) -> list[str]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        k = int(torch.randint(2, 7, (1,), generator=g))
        out.append(" ".join(WORDS[int(i)] for i in torch.randint(len(WORDS), (k,), generator=g)))
    return out


def text_batches(columns: int, labelled: bool, steps: int = 5, size: int = 6) -> list[dict]:
    batches = []
    for s in range(steps):
        cols = [sentences(size, 100 * s + j) for j in range(columns)]
        labels = torch.rand(size, generator=torch.Generator().manual_seed(s)) if labelled else None
        batches.append({"columns": cols, "labels": labels})
    return batches


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return make_tiny(tmp_path_factory.mktemp("tiny-st"))


LR = 1e-3


def ours(directory: Path, loss, batches: list[dict], tmp: Path) -> list[float]:
    model = BiEncoder.from_directory(directory)
    prepared = []
    for b in batches:
        batch = {"features": [model.tokenize(c) for c in b["columns"]]}
        if b["labels"] is not None:
            batch["labels"] = b["labels"]
        prepared.append(batch)
    seen: list[float] = []

    def loss_fn(m, batch):
        value, parts = loss(m, batch)
        seen.append(float(value.detach()))
        return value, parts

    cfg = TrainConfig(
        tmp,
        max_steps=len(batches),
        learning_rate=LR,
        weight_decay=0.0,
        schedule="constant",
        max_grad_norm=None,
        log_every=1,
        device="cpu",
        progress=False,
    )
    Trainer(model, loss_fn, prepared, cfg).train()
    return seen


def theirs(directory: Path, make_loss, batches: list[dict]) -> list[float]:
    model = st.SentenceTransformer(str(directory), device="cpu")
    model.train()
    loss = make_loss(model)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0, eps=1e-6)
    seen = []
    for b in batches:
        feats = [model.tokenize(c) for c in b["columns"]]
        value = loss(feats, b["labels"] if b["labels"] is not None else torch.zeros(0))
        seen.append(float(value.detach()))
        opt.zero_grad()
        value.backward()
        opt.step()
    return seen


CASES = {
    "mnrl": (3, False, lambda m: losses.MultipleNegativesRankingLoss(m)),
    "mnrl_symmetric": (
        2,
        False,
        lambda m: losses.MultipleNegativesRankingLoss(
            m, directions=("query_to_doc", "doc_to_query"), partition_mode="per_direction"
        ),
    ),
    "cached_mnrl": (
        3,
        False,
        lambda m: losses.CachedMultipleNegativesRankingLoss(m, mini_batch_size=4),
    ),
    "cosent": (2, True, lambda m: losses.CoSENTLoss(m)),
    "cosine": (2, True, lambda m: losses.CosineSimilarityLoss(m)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_first_five_steps_match_sentence_transformers(tiny, tmp_path, name):
    columns, labelled, make = CASES[name]
    batches = text_batches(columns, labelled)
    a = ours(tiny, build_loss(name, mini_batch_size=4), batches, tmp_path / "run")
    b = theirs(tiny, make, batches)
    assert len(a) == len(b) == 5
    assert a == pytest.approx(b, abs=1e-5), (a, b)
    assert a[0] != pytest.approx(a[-1], abs=1e-4)  # the steps did train


def test_matryoshka_matches_sentence_transformers(tiny, tmp_path):
    dims = [32, 16, 8]
    batches = text_batches(2, True)
    loss = build_loss("cosent", matryoshka_dims=dims)
    a = ours(tiny, loss, batches, tmp_path / "run")
    b = theirs(tiny, lambda m: losses.MatryoshkaLoss(m, losses.CoSENTLoss(m), dims), batches)
    assert a == pytest.approx(b, abs=1e-5), (a, b)


def test_simcse_is_mnrl_on_duplicated_text_and_dropout_makes_two_views(tmp_path):
    d = make_tiny(tmp_path / "drop", dropout=0.1)
    model = BiEncoder.from_directory(d).train()
    feats = model.tokenize(sentences(6, 1))
    torch.manual_seed(0)
    a, b = model(**feats), model(**feats)
    assert not torch.allclose(a, b)  # two dropout masks: the augmentation
    loss = build_loss("simcse")
    value, _ = loss(model, {"features": [feats, feats]})
    assert float(value) > 0
    model.eval()
    same, _ = loss(model, {"features": [feats, feats]})  # no dropout: the views coincide
    exact = MultipleNegativesRanking().from_embeddings([model(**feats)] * 2, None)
    assert float(same) == pytest.approx(float(exact), abs=1e-6)


@pytest.mark.parametrize("base", ["mnrl", "cosent"])
def test_grad_cache_gives_the_uncached_gradients(tiny, base):
    rows = text_batches(3 if base == "mnrl" else 2, base == "cosent", steps=1, size=10)[0]

    def grads(loss):
        model = BiEncoder.from_directory(tiny)
        batch = {"features": [model.tokenize(c) for c in rows["columns"]]}
        if rows["labels"] is not None:
            batch["labels"] = rows["labels"]
        value, _ = loss(model, batch)
        (value * 0.5).backward()  # the trainer scales the loss (accumulation); so here
        return float(value), {
            n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None
        }

    plain_value, plain = grads(build_loss(base))
    cached_value, cached = grads(GradCache(build_loss(base), mini_batch_size=3))
    assert cached_value == pytest.approx(plain_value, abs=1e-6)
    assert plain and cached.keys() == plain.keys()
    for name, g in plain.items():
        torch.testing.assert_close(cached[name], g, atol=1e-5, rtol=0, msg=name)


def test_grad_cache_replays_dropout(tmp_path):
    d = make_tiny(tmp_path / "drop", dropout=0.1)
    rows = text_batches(2, False, steps=1, size=8)[0]

    def grads(loss):
        model = BiEncoder.from_directory(d).train()
        batch = {"features": [model.tokenize(c) for c in rows["columns"]]}
        torch.manual_seed(3)
        value, _ = loss(model, batch)
        value.backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    # one mini-batch = the whole batch: the replayed masks must equal those of the first pass,
    # so the gradients equal the uncached loss's with the same RNG
    plain = grads(build_loss("mnrl"))
    cached = grads(GradCache(build_loss("mnrl"), mini_batch_size=8))
    assert plain and cached.keys() == plain.keys()
    for name, g in plain.items():
        torch.testing.assert_close(cached[name], g, atol=1e-5, rtol=0, msg=name)


def test_losses_refuse_data_that_does_not_fit():
    with pytest.raises(ValueError, match="unknown embedding loss"):
        build_loss("triplet")
    with pytest.raises(ValueError, match="2 to 2"):
        build_loss("cosent").check_columns(3)
    with pytest.raises(ValueError, match="label"):
        build_loss("cosent")(lambda **f: f["x"], {"features": [{"x": torch.ones(2, 3)}] * 2})
    json.dumps(PoolingSpec().modes)
