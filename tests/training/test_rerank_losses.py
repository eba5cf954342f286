"""Reranker losses against sentence-transformers 6's cross-encoder losses: from the same tiny
random cross-encoder (dropout off), the same batches and AdamW settings, the first 5 training
steps' losses agree within 1e-5 (our `Trainer` + `objectives.ranking` vs CrossEncoder, its loss
and a plain torch AdamW loop) for BCE, ListNet (listwise, queries with different numbers of
passages) and MNRL (in-batch negatives, with a hard-negative column); the ListNet and MNRL
batches are built by the losses themselves; `finetune --task rerank --loss listnet` runs."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from bertfamily.data.pairs import PairTable
from bertfamily.errors import InputError
from bertfamily.inference.loading import load_model_and_tokenizer
from bertfamily.objectives.ranking import MODEL_INPUTS, build_rerank_loss
from bertfamily.train.config import TrainConfig
from bertfamily.train.loop import Trainer
from retrieval_dirs import classic_cross_encoder

st = pytest.importorskip("sentence_transformers")
ce_losses = pytest.importorskip("sentence_transformers.cross_encoder.losses")

WORDS = "the cat sat on a mat dog ran far away red blue car fast slow big small tree".split()
LR, STEPS = 1e-3, 5


def _text(rng: np.random.Generator) -> str:
    return " ".join(rng.choice(WORDS, size=int(rng.integers(2, 7))))


@pytest.fixture(scope="module")
def ce_dir(tmp_path_factory, minilm_dir):
    no_dropout = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return classic_cross_encoder(tmp_path_factory.mktemp("ce") / "ce", minilm_dir, **no_dropout)


def tables() -> dict[str, PairTable]:
    rng = np.random.default_rng(0)
    scored = [(_text(rng), _text(rng)) for _ in range(STEPS * 4)]
    graded, labels = [], []  # 10 queries with 1-4 passages each, graded 0-3
    for q in range(2 * STEPS):
        query = f"query {q} " + _text(rng)
        for _ in range(int(rng.integers(1, 5))):
            graded.append((query, _text(rng)))
            labels.append(float(rng.integers(0, 4)))
    triplets = [(_text(rng), _text(rng), _text(rng)) for _ in range(STEPS * 5)]  # batches of 3
    return {
        "bce": PairTable(("q", "p"), scored, [float(x) for x in rng.random(len(scored))]),
        "listnet": PairTable(("q", "p"), graded, labels),
        "mnrl": PairTable(("anchor", "positive", "negative"), triplets),
    }


BATCH = {"bce": 4, "listnet": 2, "mnrl": 3}
#: every in-batch negative (sampling a few draws from each library's own random stream)
OPTIONS = {"mnrl": {"num_negatives": None}}


def our_batches(name: str, table: PairTable, tokenize) -> list[dict]:
    loss = build_rerank_loss(name, **OPTIONS.get(name, {}))
    source = loss.batches(table, tokenize, BATCH[name], shuffle=False)
    return list(source(0))[:STEPS]


def their_inputs(name: str, table: PairTable) -> list[tuple[list, object]]:
    """The same batches in sentence-transformers' (inputs, labels) form."""
    out, b = [], BATCH[name]
    if name == "listnet":
        groups: dict[str, list[int]] = {}
        for i, r in enumerate(table.rows):
            groups.setdefault(r[0], []).append(i)
        order = list(groups.values())
        for s in range(STEPS):
            chunk = order[s * b : (s + 1) * b]
            queries = [table.rows[g[0]][0] for g in chunk]
            docs = [[table.rows[i][1] for i in g] for g in chunk]
            labels = [torch.tensor([table.labels[i] for i in g]) for g in chunk]
            out.append(([queries, docs], labels))
        return out
    for s in range(STEPS):
        rows = table.rows[s * b : (s + 1) * b]
        columns = [list(c) for c in zip(*rows)]
        labels = (
            torch.tensor(table.labels[s * b : (s + 1) * b])
            if table.labels is not None
            else torch.zeros(0)
        )
        out.append((columns, labels))
    return out


def ours(ce_dir, name: str, table: PairTable, tmp) -> list[float]:
    loaded = load_model_and_tokenizer(ce_dir, dtype="fp32")
    model, tok = loaded.model.train(), loaded.tokenizer

    def tokenize(q, p):
        enc = tok(q, p, max_length=64)
        return {k: v for k, v in enc.items() if k in MODEL_INPUTS}

    batches = our_batches(name, table, tokenize)
    loss = build_rerank_loss(name, **OPTIONS.get(name, {}))
    seen: list[float] = []

    def loss_fn(m, batch):
        value, parts = loss(m, batch)
        seen.append(float(value.detach()))
        return value, parts

    cfg = TrainConfig(
        tmp,
        max_steps=STEPS,
        learning_rate=LR,
        weight_decay=0.0,
        schedule="constant",
        max_grad_norm=None,
        log_every=1,
        device="cpu",
        progress=False,
    )
    Trainer(model, loss_fn, batches, cfg).train()
    return seen


def theirs(ce_dir, name: str, table: PairTable) -> list[float]:
    model = st.CrossEncoder(str(ce_dir), device="cpu", max_length=64)
    model.train()
    loss = {
        "bce": ce_losses.BinaryCrossEntropyLoss,
        "listnet": ce_losses.ListNetLoss,
        "mnrl": ce_losses.MultipleNegativesRankingLoss,
    }[name](model, **OPTIONS.get(name, {}))
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0, eps=1e-6)
    seen = []
    for inputs, labels in their_inputs(name, table):
        value = loss(inputs, labels)
        seen.append(float(value.detach()))
        opt.zero_grad()
        value.backward()
        opt.step()
    return seen


@pytest.mark.parametrize("name", ["bce", "listnet", "mnrl"])
def test_first_five_steps_match_sentence_transformers(ce_dir, tmp_path, name):
    table = tables()[name]
    a = ours(ce_dir, name, table, tmp_path / "run")
    b = theirs(ce_dir, name, table)
    assert len(a) == len(b) == STEPS
    assert a == pytest.approx(b, abs=1e-5), (a, b)
    assert a[0] != pytest.approx(a[-1], abs=1e-4)  # the steps did train


def test_listnet_groups_queries_and_mnrl_samples_its_negatives():
    table = tables()["listnet"]
    seen = []
    loss = build_rerank_loss("listnet")
    source = loss.batches(table, lambda q, p: {"q": q, "p": p}, 3, shuffle=False)
    for batch in source(0):
        seen += batch["features"]["q"]
        assert len(batch["docs_per_query"]) == 3 and sum(batch["docs_per_query"]) == len(
            batch["labels"]
        )
    assert len(source) == 10 // 3  # 10 queries, batches of 3 queries
    assert seen == [q for q, _ in table.rows][: len(seen)]  # every passage of each query

    mnrl = build_rerank_loss("mnrl", num_negatives=2)
    rows = tables()["mnrl"]
    batch = next(iter(mnrl.batches(rows, lambda q, p: {"q": q, "p": p}, 5, shuffle=False)(0)))
    assert batch["candidates"] == 1 + 2 + 1  # positive, 2 sampled in-batch, 1 hard negative
    q, p = batch["features"]["q"], batch["features"]["p"]
    for i, row in enumerate(rows.rows[:5]):
        own = p[4 * i : 4 * i + 4]
        assert q[4 * i : 4 * i + 4] == [row[0]] * 4
        assert own[0] == row[1] and own[3] == row[2]
        others = {t for r in rows.rows[:5] if r != row for t in r[1:]}
        assert set(own[1:3]) <= others and own[1] != own[2]


def test_errors():
    scored = PairTable(("q", "p"), [("a", "b")], [2.0])
    with pytest.raises(InputError, match=r"\[0, 1\]"):
        build_rerank_loss("bce").check(scored, "f.csv")
    build_rerank_loss("listnet").check(scored, "f.csv")  # graded labels are fine
    with pytest.raises(InputError, match="label"):
        build_rerank_loss("listnet").check(PairTable(("q", "p"), [("a", "b")]), "f.csv")
    with pytest.raises(InputError, match="unknown rerank loss"):
        build_rerank_loss("lambda")
    with pytest.raises(InputError, match="num_negatives"):
        build_rerank_loss("mnrl", num_negatives=0)


def test_cli_listnet(cli, ce_dir, tmp_path):
    data = tmp_path / "graded.jsonl"
    table = tables()["listnet"]
    data.write_text(
        "".join(
            json.dumps({"query": q, "passage": p, "label": y})
            for (q, p), y in zip(table.rows, table.labels)
        ).replace("}{", "}\n{")
        + "\n"
    )
    out = tmp_path / "run"
    res = cli(
        "finetune", "--task", "rerank", "--loss", "listnet", "--model", ce_dir, "--train", data,
        "-o", out, "--max-steps", "2", "--batch-size", "4", "--no-progress", "--threads", "1",
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["loss"] == "listnet"
    assert (out / "model" / "config.json").is_file()
    run = json.loads((out / "run.json").read_text())["config"]
    assert run["rerank"]["loss"] == "listnet"
    assert (run["train"]["weight_decay"], run["train"]["adam_eps"]) == (0.0, 1e-8)
