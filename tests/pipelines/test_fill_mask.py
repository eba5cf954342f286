"""End to end on a toy corpus: train a WordPiece tokenizer, pretrain a tiny model with the
trainer, fill-mask predicts the obvious token (Python pipeline and CLI); continued pretraining
from the real MiniLM with a fresh MLM head."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from bertfamily.cli import app
from bertfamily.objectives.masking import MaskingConfig
from bertfamily.pipelines.tasks.fill_mask import FillMask
from bertfamily.recipes.pretrain import PretrainConfig, load_for_continued_pretraining, pretrain
from bertfamily.tokenization.training import train_tokenizer
from bertfamily.train import TrainConfig

FACTS = [
    "the sky is blue .",
    "the grass is green .",
    "the sun is yellow .",
    "the snow is white .",
    "the night is dark .",
]


# every test here trains a toy model or continues pretraining MiniLM (tens of seconds)
pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.slow]  # conftest.py


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("toy")
    rng = np.random.default_rng(0)
    docs = ["\n".join(FACTS[i] for i in rng.integers(0, 5, 6)) for _ in range(40)]
    corpus = root / "toy.txt"
    corpus.write_text("\n\n".join(docs) + "\n")
    train_tokenizer(corpus, "wordpiece", 120, min_frequency=1, output_dir=root / "tok")
    cfg = PretrainConfig(
        corpus=[corpus],
        tokenizer=root / "tok",
        preset="tiny-bert",
        overrides=dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0),
        objectives=["mlm"],
        max_length=32,
        eval_documents=4,
        eval_batches=2,
        masking=MaskingConfig(strategy="token", mlm_probability=0.3),
    )
    tc = TrainConfig(
        output_dir=root / "run",
        max_steps=600,
        batch_size=16,
        learning_rate=1e-2,
        warmup_steps=10,
        log_every=50,
        eval_every=0,
        progress=False,
        device="cpu",
    )
    summary = pretrain(cfg, tc)
    return root, summary


def test_pretraining_learns_and_fill_mask_predicts(trained):
    root, summary = trained
    assert summary["stopped"] == "max_steps" and summary["step"] == 600
    ev = summary["eval"]
    assert ev["eval_accuracy"] > ev["eval_baseline_accuracy"] + 0.3
    assert ev["eval_perplexity"] < ev["eval_baseline_perplexity"] / 2
    pipe = FillMask(root / "run" / "model")
    for fact in FACTS:
        words = fact.split()
        masked = " ".join(words[:3] + ["[MASK]"] + words[4:])
        (preds,) = pipe(masked, top_k=3)
        assert preds[0].token == words[3], (masked, preds)
        assert preds[0].sequence.startswith(" ".join(words[:4]))
        assert preds[0].score > preds[1].score
    # the other spelling is accepted
    assert pipe("the sky is <mask> .")[0][0].token == "blue"
    with pytest.raises(ValueError, match="no mask token"):
        pipe("the sky is blue .")


def test_fill_mask_cli(trained):
    root, _ = trained
    result = CliRunner().invoke(
        app,
        [
            "fill-mask",
            "the grass is [MASK] .",
            "--model",
            str(root / "run" / "model"),
            "--top-k",
            "2",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "green" in result.output


def test_metrics_and_checkpoint_written(trained):
    root, _ = trained
    run = root / "run"
    assert (run / "metrics.jsonl").is_file() and (run / "checkpoint.pt").is_file()
    assert (run / "model" / "tokenizer.json").is_file()
    assert (run / "loss.png").is_file()


def test_continued_pretraining_from_minilm_adds_fresh_head(minilm_dir):
    model, fresh = load_for_continued_pretraining(minilm_dir, ["mlm"])
    assert model.mlm_head is not None
    assert sorted(fresh) == [
        "mlm_head.bias",
        "mlm_head.dense.bias",
        "mlm_head.dense.weight",
        "mlm_head.norm.bias",
        "mlm_head.norm.weight",
    ]
    assert torch.equal(model.mlm_head.bias, torch.zeros(30522))
    assert model.mlm_head.decoder_weight is model.encoder.embeddings.token.weight
    with pytest.raises(ValueError, match="no masked-LM head"):
        FillMask(minilm_dir)


def test_cli_tokenizer_train_pretrain_and_resume(trained, tmp_path):
    import json

    root, _ = trained
    runner = CliRunner()
    res = runner.invoke(
        app,
        [
            "tokenizer",
            "train",
            str(root / "toy.txt"),
            "-o",
            str(tmp_path / "tok"),
            "--vocab-size",
            "120",
            "--min-frequency",
            "1",
        ],
    )
    assert res.exit_code == 0, res.output
    args = [
        "pretrain",
        str(root / "toy.txt"),
        "-o",
        str(tmp_path / "run"),
        "--tokenizer",
        str(tmp_path / "tok"),
        "--preset",
        "tiny-bert",
        "--objectives",
        "mlm,nsp",
        "--masking",
        "span",
        "--max-length",
        "32",
        "--batch-size",
        "4",
        "--log-every",
        "1",
        "--eval-every",
        "0",
        "--save-every",
        "2",
        "--no-progress",
        "--device",
        "cpu",
    ]
    res = runner.invoke(app, args + ["--max-steps", "3"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, args + ["--max-steps", "5", "--resume"])
    assert res.exit_code == 0, res.output
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in rows if r["split"] == "train"]
    assert steps == [1, 2, 3, 4, 5]  # the second run continued at step 4
    assert all("pair_loss" in r for r in rows if r["split"] == "train")
    res = runner.invoke(
        app,
        [
            "pretrain",
            str(root / "toy.txt"),
            "-o",
            str(tmp_path / "bad"),
            "--tokenizer",
            str(tmp_path / "tok"),
            "--objectives",
            "nsp,sop",
        ],
    )
    assert res.exit_code == 2 and "objectives" in res.output


def test_spanbert_recipe_span_masking_and_sbo(trained, tmp_path):
    import json

    root, _ = trained
    cfg = PretrainConfig(
        corpus=[root / "toy.txt"],
        tokenizer=root / "tok",
        preset="spanbert-base",
        max_length=32,
        eval_documents=4,
        eval_batches=1,
        overrides=dict(
            hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=37
        ),
    )
    tc = TrainConfig(
        output_dir=tmp_path, max_steps=3, batch_size=4, log_every=1, progress=False, device="cpu"
    )
    summary = pretrain(cfg, tc)
    assert summary["objectives"] == ["mlm", "sbo"]
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert all("sbo_loss" in r and "pair_loss" not in r for r in rows if r["split"] == "train")
    assert (tmp_path / "model" / "sbo_head.safetensors").is_file()


def test_doc_sentences_packing_grows_the_batch(trained, tmp_path):
    """pretrain(packing="doc_sentences"): one document per instance (toy documents of six
    5-token facts against max_length 24: 4 + 2 facts, so every document ends a short
    instance), the batch grown
    to keep FULL-SENTENCES' tokens per batch; pair objectives refuse it."""
    root, _ = trained
    cfg = PretrainConfig(
        corpus=[root / "toy.txt"],
        tokenizer=root / "tok",
        preset="tiny-bert",
        objectives=["mlm"],
        packing="doc_sentences",
        max_length=24,
        eval_documents=4,
        eval_batches=1,
    )
    tc = TrainConfig(
        output_dir=tmp_path, max_steps=2, batch_size=8, log_every=1, progress=False, device="cpu"
    )
    summary = pretrain(cfg, tc)
    assert summary["packing"] == "doc_sentences" and summary["batch_size"] >= 10
    full = pretrain(
        dataclasses.replace(cfg, packing="full_sentences"),
        dataclasses.replace(tc, output_dir=tmp_path / "full"),
    )
    assert full["batch_size"] == 8 and full["instances"]["train"] < summary["instances"]["train"]
    with pytest.raises(ValueError, match="sentence pairs"):
        pretrain(dataclasses.replace(cfg, objectives=["mlm", "nsp"]), tc)
    with pytest.raises(ValueError, match="packing"):
        pretrain(dataclasses.replace(cfg, packing="docs"), tc)
