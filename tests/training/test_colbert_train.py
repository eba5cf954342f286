"""ColBERT training against PyLate (pylate 1.6, run as it means to run by
`reference.pylate_colbert`): our `objectives.late_interaction` losses give PyLate's
``Contrastive`` / ``Distillation`` values and gradients on PyLate's own model; four training
steps of our `Trainer` on a `ColBERTEncoder` (a new model from `recipes.colbert.new_colbert`)
equal a hand loop of PyLate's loss on PyLate's model (loaded from the same initial directory)
with torch's AdamW, step by step, and the trained model saved loads in PyLate with equal token
vectors; `train_colbert` writes directories PyLate loads; bad input is refused with our
errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from bertfamily.errors import DataError, InputError
from bertfamily.objectives.late_interaction import (
    Contrastive,
    Distillation,
    build_late_interaction_loss,
)
from bertfamily.pipelines.embedding.colbert import ColBERTEncoder
from bertfamily.recipes.colbert import (
    ColBERTConfig,
    load_for_training,
    loss_settings,
    new_colbert,
    save_trained,
    token_vectors,
    train_colbert,
    training_features,
)
from bertfamily.train.config import TrainConfig
from bertfamily.train.loop import Trainer

pylate_losses = pytest.importorskip("pylate.losses")
from helpers import save_wordpiece_bert, tiny_wordpiece_vocab, write_jsonl  # noqa: E402
from reference.pylate_colbert import load_pylate_colbert  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

WORDS = "the cat sat on a mat dog ran far away red blue car fast slow big small tree".split()
SETTINGS = dict(dim=16, query_length=12, document_length=20)


def sentences(n: int, seed: int) -> list[str]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        k = int(torch.randint(2, 9, (1,), generator=g))
        words = [WORDS[int(i)] for i in torch.randint(len(WORDS), (k,), generator=g)]
        out.append(" ".join(words) + ".!,?"[int(torch.randint(4, (1,), generator=g))])
    return out


@pytest.fixture(scope="module")
def tiny_hf(tmp_path_factory) -> Path:
    """A tiny random BERT (H=32, L=2) whose vocabulary has a few punctuation marks (so the
    skiplist masks real tokens), as a plain Hugging Face directory."""
    vocab = [*tiny_wordpiece_vocab(), *".,!?"]
    return save_wordpiece_bert(tmp_path_factory.mktemp("tiny-colbert-base"), vocab)


@pytest.fixture(scope="module")
def initial(tiny_hf, tmp_path_factory) -> Path:
    """Our new ColBERT on the tiny encoder (seed 0), saved: the start of both trainings."""
    torch.manual_seed(0)
    return new_colbert(tiny_hf, tmp_path_factory.mktemp("colbert-initial"), **SETTINGS)


@pytest.fixture(scope="module")
def tok(initial) -> ColBERTEncoder:
    """A model whose features the batches are made with (the same for ours and PyLate's)."""
    return load_for_training(initial)


def contrastive_batch(model: ColBERTEncoder, seed: int, size: int = 4) -> dict:
    q, p, n = (sentences(size, 10 * seed + j) for j in range(3))
    docs = training_features(model, p + n, is_query=False)
    return {
        "features": [
            training_features(model, q, is_query=True),
            {k: v[:size] for k, v in docs.items()},
            {k: v[size:] for k, v in docs.items()},
        ]
    }


def distillation_batch(model: ColBERTEncoder, seed: int, size: int = 3, n: int = 3) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {
        "features": [
            training_features(model, sentences(size, 50 + seed), is_query=True),
            training_features(model, sentences(size * n, 70 + seed), is_query=False),
        ],
        "scores": torch.randn(size, n, generator=g) * 3,
    }


def grads(module: torch.nn.Module) -> list[torch.Tensor]:
    return [p.grad.clone() for p in module.parameters() if p.grad is not None]


def reference_call(ref, loss, batch):
    features = [dict(f) for f in batch["features"]]
    if "scores" in batch:
        return loss(features, batch["scores"])
    return loss(features)


@pytest.mark.parametrize("temperature, size_average", [(1.0, True), (0.05, False)])
def test_contrastive_value_and_gradients_equal_pylate(tok, initial, temperature, size_average):
    ref = load_pylate_colbert(initial).train()
    batch = contrastive_batch(tok, 1)
    theirs = pylate_losses.Contrastive(ref, temperature=temperature, size_average=size_average)
    value = reference_call(ref, theirs, batch)
    value.backward()
    ours = Contrastive(
        temperature=temperature, size_average=size_average, skiplist_ids=ref.skiplist
    )
    expected = grads(ref)
    ref.zero_grad()
    mine, parts = ours(lambda f, is_query: ref(f)["token_embeddings"], batch)
    assert parts == {}
    mine.backward()
    assert float(mine) == pytest.approx(float(value), abs=1e-5)
    got = grads(ref)
    assert len(got) == len(expected) > 0
    for a, b in zip(got, expected):
        assert torch.allclose(a, b, atol=1e-5 * max(1.0, float(b.abs().max()))), (a - b).abs().max()
    # the skiplist changes the value: punctuation is in the batch
    plain, _ = Contrastive(temperature=temperature, size_average=size_average)(
        lambda f, is_query: ref(f)["token_embeddings"], batch
    )
    assert float(plain) != pytest.approx(float(value), abs=1e-4)


@pytest.mark.parametrize("normalize", [True, False])
def test_distillation_value_and_gradients_equal_pylate(tok, initial, normalize):
    ref = load_pylate_colbert(initial).train()
    batch = distillation_batch(tok, 2)
    theirs = pylate_losses.Distillation(ref, normalize_scores=normalize)
    value = reference_call(ref, theirs, batch)
    value.backward()
    expected = grads(ref)
    ref.zero_grad()
    mine, _ = Distillation(normalize_scores=normalize, skiplist_ids=ref.skiplist)(
        lambda f, is_query: ref(f)["token_embeddings"], batch
    )
    mine.backward()
    assert float(mine) == pytest.approx(float(value), abs=1e-5)
    for a, b in zip(grads(ref), expected):
        assert torch.allclose(a, b, atol=1e-5 * max(1.0, float(b.abs().max())))


LR = 1e-3


@pytest.mark.parametrize("kind", ["contrastive", "distillation"])
def test_training_steps_equal_pylate_loss_loop(initial, tmp_path, kind):
    model = load_for_training(initial)
    make = contrastive_batch if kind == "contrastive" else distillation_batch
    batches = [make(model, s) for s in range(4)]
    loss = build_late_interaction_loss(kind, **loss_settings(model))
    seen: list[float] = []

    def loss_fn(m, batch):
        value, parts = loss(token_vectors(m), batch)
        seen.append(float(value.detach()))
        return value, parts

    cfg = TrainConfig(
        tmp_path / "run",
        max_steps=len(batches),
        learning_rate=LR,
        weight_decay=0.0,
        schedule="constant",
        max_grad_norm=None,
        log_every=1,
        device="cpu",
        progress=False,
    )
    Trainer(model, loss_fn, batches, cfg).train()

    ref = load_pylate_colbert(initial).train()
    theirs = (pylate_losses.Contrastive if kind == "contrastive" else pylate_losses.Distillation)(
        ref
    )
    opt = torch.optim.AdamW(ref.parameters(), lr=LR, weight_decay=0.0, eps=cfg.adam_eps)
    reference: list[float] = []
    for batch in batches:
        value = reference_call(ref, theirs, batch)
        reference.append(float(value.detach()))
        opt.zero_grad()
        value.backward()
        opt.step()
    assert seen == pytest.approx(reference, abs=1e-5), (seen, reference)
    assert seen[0] != pytest.approx(seen[-1], abs=1e-4)  # the steps did train
    assert torch.allclose(model.embedder.dense[0][0].weight, ref[1].linear.weight, atol=1e-5)
    # the trained model saved: PyLate's own encode of it gives our token vectors
    model.eval()
    saved = load_pylate_colbert(save_trained(model, tmp_path / "saved"))
    texts = sentences(3, 7) + ["a long text, " * 12]
    for is_query in (True, False):
        theirs = saved.encode(texts, is_query=is_query)
        with torch.no_grad():
            vectors, keep = model(**model.features(texts, is_query=is_query), is_query=is_query)
        for i, t in enumerate(theirs):
            assert vectors[i][keep[i]].shape == t.shape
            assert torch.allclose(vectors[i][keep[i]], torch.as_tensor(t), atol=1e-5)


def test_recipe_saves_a_directory_pylate_loads(tiny_hf, tmp_path):
    rows = [{"query": q, "positive": p} for q, p in zip(sentences(8, 1), sentences(8, 2))]
    data = write_jsonl(tmp_path / "train.jsonl", rows)
    cfg = ColBERTConfig(tiny_hf, data, **SETTINGS)
    res = train_colbert(
        cfg, output_dir=tmp_path / "run", batch_size=4, learning_rate=1e-3, progress=False
    )
    assert res["train"]["step"] == 2 and res["rows"] == 8
    ref = load_pylate_colbert(res["model"])
    assert (ref.query_length, ref.document_length, ref[1].linear.out_features) == (12, 20, 16)
    assert (ref.query_prefix_id, ref.document_prefix_id) == (61, 62)  # the markers we added
    start = load_pylate_colbert(tmp_path / "run" / "initial")
    assert not torch.allclose(ref[1].linear.weight, start[1].linear.weight)  # it trained
    query = ref.encode(["a red car."], is_query=True)[0]
    assert query.shape == (12, 16)  # [CLS] [Q] the text [SEP] and the [MASK] expansion
    # distillation rows, and a ColBERT directory trained further (its own settings)
    lines = [
        {"query": q, "documents": sentences(3, 20 + i), "scores": [3.0, 1.0, -2.0]}
        for i, q in enumerate(sentences(4, 9))
    ]
    kd = write_jsonl(tmp_path / "kd.jsonl", lines)
    more = train_colbert(
        ColBERTConfig(res["model"], kd, loss="distillation"),
        output_dir=tmp_path / "kd-run", batch_size=2, learning_rate=1e-3, progress=False,
    )  # fmt: skip
    assert more["train"]["step"] == 2 and not (tmp_path / "kd-run" / "initial").exists()
    further = load_pylate_colbert(more["model"])
    assert further.query_length == 12
    assert not torch.allclose(further[1].linear.weight, ref[1].linear.weight)
    with pytest.raises(InputError, match="its own"):
        train_colbert(
            ColBERTConfig(res["model"], kd, "distillation", dim=8), output_dir=tmp_path / "r3"
        )


def test_bad_input_is_refused(tiny_hf, tmp_path):
    with pytest.raises(InputError, match="temperature"):
        Contrastive(temperature=0)
    with pytest.raises(InputError, match="unknown late-interaction loss"):
        build_late_interaction_loss("margin")
    with pytest.raises(TypeError):
        build_late_interaction_loss("contrastive", scale=2)
    model = load_for_training(new_colbert(tiny_hf, tmp_path / "new", **SETTINGS))
    batch = contrastive_batch(model, 1)
    with pytest.raises(InputError, match="query and at least one document"):
        Contrastive()(token_vectors(model), {"features": batch["features"][:1]})
    short = dict(batch["features"][2])
    short = {k: v[:, :-1] for k, v in short.items()}
    with pytest.raises(InputError, match="one padded length"):
        Contrastive()(token_vectors(model), {"features": [*batch["features"][:2], short]})
    kd = distillation_batch(model, 1)
    with pytest.raises(InputError, match="teacher's scores"):
        Distillation()(token_vectors(model), {"features": kd["features"]})
    with pytest.raises(InputError, match="need 12 documents"):
        Distillation()(token_vectors(model), {**kd, "scores": torch.zeros(3, 4)})
    with pytest.raises(InputError, match="finite"):
        Distillation()(token_vectors(model), {**kd, "scores": torch.full((3, 3), float("nan"))})
    with pytest.raises(InputError, match="query_length"):
        new_colbert(tiny_hf, tmp_path / "long", query_length=100)
    bad = tmp_path / "kd.jsonl"
    for text, message in [
        ('{"query": "a", "documents": ["b", "c"], "scores": [1]}', "one per document"),
        ('{"query": "a", "documents": ["b"], "scores": [1]}\n'
         '{"query": "a", "documents": ["b", "c"], "scores": [1, 2]}', "same number"),
        ('{"query": " ", "documents": ["b"], "scores": [1]}', "non-blank"),
        ("[1, 2]", "expected an object"),
        ('{"query": "a", "docs": ["b"], "scores": [1]}', "expected an object"),
    ]:  # fmt: skip
        bad.write_text(text + "\n")
        with pytest.raises(DataError, match=message):
            train_colbert(
                ColBERTConfig(tiny_hf, bad, loss="distillation"), output_dir=tmp_path / "r"
            )
    labelled = tmp_path / "labelled.csv"
    labelled.write_text("query,positive,score\na b,c d,0.9\ne f,g h,0.1\n")
    with pytest.raises(InputError, match="min_score"):
        train_colbert(ColBERTConfig(tiny_hf, labelled), output_dir=tmp_path / "r2")


def test_padding_one_more_equals_pylate_padding_to_document_length(tok, initial):
    """Documents padded to one more than the longest (ours) score as PyLate's collator padding
    them to ``document_length`` (every shorter document has a padding token, similarity 0,
    either way), and not as padding to the longest only: with 1-d token vectors, +1 for every
    token but [Q], the [Q] token's best similarity is -1 with a document without padding and
    0 with one that has some."""
    table = torch.ones(len(tok.tokenizer), 1)
    table[tok.query_prefix_id] = -1.0

    def encode(features, is_query):
        return table[features["input_ids"]]

    texts = ["the dog", "mat!", "sat on", "far", "blue", "tree big"]
    queries = training_features(tok, ["a cat.", "red car", "big"], is_query=True)

    def loss_of(docs):
        cols = [{k: v[:3] for k, v in docs.items()}, {k: v[3:] for k, v in docs.items()}]
        return float(Contrastive(skiplist_ids=loss_settings(tok)["skiplist_ids"])(
            encode, {"features": [queries, *cols]})[0])  # fmt: skip

    ours = training_features(tok, texts, is_query=False)
    longest = tok.features(texts, is_query=False)
    assert ours["input_ids"].shape[1] == longest["input_ids"].shape[1] + 1 < 20
    extra = SETTINGS["document_length"] - longest["input_ids"].shape[1]
    full = {
        k: torch.cat([v, torch.full((6, extra), 4 if k == "input_ids" else 0)], dim=1)
        for k, v in longest.items()
    }
    assert loss_of(ours) == pytest.approx(loss_of(full), abs=1e-6)
    assert loss_of(ours) != pytest.approx(loss_of(longest), abs=1e-4)


def test_cli_trains_a_colbert(cli, tiny_hf, tmp_path):
    rows = [{"query": q, "positive": p} for q, p in zip(sentences(6, 3), sentences(6, 4))]
    data = write_jsonl(tmp_path / "pairs.jsonl", rows)
    res = cli(
        "finetune", "--task", "colbert", "--model", tiny_hf, "--train", data,
        "-o", tmp_path / "run", "--batch-size", "3", "--epochs", "1", "--query-length", "10",
        "--document-length", "16", "--colbert-dim", "8",
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    assert summary["loss"] == "contrastive" and summary["rows"] == 6
    ref = load_pylate_colbert(summary["model"])
    assert (ref.query_length, ref.document_length, ref[1].linear.out_features) == (10, 16, 8)
    bad = cli("finetune", "--task", "colbert", "--model", tiny_hf, "--train", data,
              "-o", tmp_path / "r2", "--loss", "margin")  # fmt: skip
    assert bad.exit_code == 2 and "unknown late-interaction loss" in bad.output


def test_recipe_equals_pylate_trainer(tiny_hf, tmp_path):
    """`train_colbert` (its defaults: sentence-transformers' trainer schedule, clipping at 1)
    against PyLate's own training: sentence-transformers' trainer with PyLate's collator and
    ``Contrastive`` loss, the same rows in the same order, from the same initial directory:
    every step's loss and the trained projection agree."""
    from datasets import Dataset
    from pylate.utils import ColBERTCollator
    from sentence_transformers import (
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )
    from sentence_transformers.base.sampler import DefaultBatchSampler
    from torch.utils.data import SequentialSampler

    rows = [{"query": q, "positive": p} for q, p in zip(sentences(16, 5), sentences(16, 6))]
    data = write_jsonl(tmp_path / "train.jsonl", rows)
    lr, fields = 1e-3, dict(batch_size=4, warmup_ratio=0.1, log_every=1, progress=False)
    res = train_colbert(
        ColBERTConfig(tiny_hf, data, shuffle=False, **SETTINGS),
        output_dir=tmp_path / "ours", learning_rate=lr, **fields,
    )  # fmt: skip
    lines = (tmp_path / "ours" / "metrics.jsonl").read_text().splitlines()
    mine = [r["loss"] for r in map(json.loads, lines) if r.get("split") == "train"]

    def sequential(dataset, batch_size, drop_last, valid_label_columns=None, **_):
        return DefaultBatchSampler(
            SequentialSampler(dataset), batch_size=batch_size, drop_last=drop_last,
            valid_label_columns=valid_label_columns,
        )  # fmt: skip

    ref = load_pylate_colbert(tmp_path / "ours" / "initial").train()
    args = SentenceTransformerTrainingArguments(
        output_dir=str(tmp_path / "theirs"), num_train_epochs=1, per_device_train_batch_size=4,
        learning_rate=lr, warmup_steps=0.1, seed=0, save_strategy="no", report_to="none",
        logging_steps=1, use_cpu=True, disable_tqdm=True, batch_sampler=sequential,
    )  # fmt: skip
    trainer = SentenceTransformerTrainer(
        model=ref, args=args, train_dataset=Dataset.from_list(rows),
        loss=pylate_losses.Contrastive(ref), data_collator=ColBERTCollator(ref.tokenize),
    )  # fmt: skip
    trainer.train()
    theirs = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(mine) == len(theirs) == 4
    assert mine == pytest.approx(theirs, abs=1e-5)
    assert theirs[0] != pytest.approx(theirs[-1], abs=1e-3)  # it trained
    trained = load_pylate_colbert(res["model"])
    assert torch.allclose(trained[1].linear.weight, ref[1].linear.weight, atol=1e-5)
