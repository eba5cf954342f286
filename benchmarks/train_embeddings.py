"""Embedding training on the real STS Benchmark (docs/training-embeddings.md), side by side
with sentence-transformers' own trainer.

    python benchmarks/train_embeddings.py --steps 60 [--full]

all-MiniLM-L6-v2 (fetched) is fine-tuned on STS-B train (5,749 pairs, scores / 5) with CoSENT,
batch 16, max_seq_length 64, AdamW lr 5e-5 (transformers' default), weight decay 0.01, eps
1e-6, 10 % linear warm-up, gradient clipping at 1.0, seed 0, a fixed number of optimizer
steps, by

- bertfamily: `recipes.embedding.train_embedding` (`bertfamily finetune --task embedding`);
- sentence-transformers: ``SentenceTransformerTrainer`` with ``CoSENTLoss`` and the same
  settings (its own data order from the same seed);

then both are scored on STS-B **test** (1,379 pairs; Spearman of cosine vs gold ×100): ours
with `SentenceEmbedder` on the saved directory, theirs with its
``EmbeddingSimilarityEvaluator``; the starting model by us (published: 82.0). With ``--full``
it is scored by sentence-transformers too, and sentence-transformers' trained directory by us.
Writes benchmarks/results/train_embeddings.json after every stage (``complete`` false until
the end; the CPU from `machine.cpu_model`).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import time
from pathlib import Path

import torch
from machine import cpu_model

from bertfamily.data.pairs import read_pairs
from bertfamily.evaluation.metrics import evaluate_sts
from bertfamily.pipelines.embedding.embed import SentenceEmbedder
from bertfamily.recipes.embedding import EmbeddingConfig, train_embedding
from bertfamily.resources.cache import fetch
from bertfamily.train import TrainConfig

HERE = Path(__file__).resolve().parent
SETTINGS = dict(batch_size=16, max_seq_length=64, lr=5e-5, weight_decay=0.01, warmup=0.1, seed=0)


def cpu_s() -> float:
    """CPU seconds used by this process so far (user + system, all threads)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def ours_sts(model_dir: Path, test) -> float:
    emb = SentenceEmbedder(model_dir, dtype="fp32")
    m = evaluate_sts(
        lambda t: emb.encode(t, batch_size=64), test.column(0), test.column(1), test.labels
    )
    return 100 * m["spearman"]


def train_ours(minilm: Path, work: Path, steps: int) -> dict:
    t0, c0 = time.time(), cpu_s()
    cfg = EmbeddingConfig(
        minilm, "stsb:train", "cosent", max_seq_length=SETTINGS["max_seq_length"], epochs=None
    )
    train = TrainConfig(
        work / "ours",
        max_steps=steps,
        batch_size=SETTINGS["batch_size"],
        learning_rate=SETTINGS["lr"],
        weight_decay=SETTINGS["weight_decay"],
        warmup_ratio=SETTINGS["warmup"],
        adam_eps=1e-6,
        max_grad_norm=1.0,
        seed=SETTINGS["seed"],
        log_every=10,
        device="cpu",
        progress=False,
    )
    res = train_embedding(cfg, train)
    return {
        "dir": work / "ours" / "model",
        "train_s": round(time.time() - t0, 1),
        "train_cpu_s": round(cpu_s() - c0, 1),
        "final_loss": res["train"]["train"].get("loss"),
    }


def train_theirs(minilm: Path, work: Path, steps: int) -> dict:
    from datasets import Dataset
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )
    from sentence_transformers.sentence_transformer.losses import CoSENTLoss

    t0, c0 = time.time(), cpu_s()
    table = read_pairs("stsb:train")
    data = Dataset.from_dict(
        {"sentence1": table.column(0), "sentence2": table.column(1), "score": table.labels}
    )
    model = SentenceTransformer(str(minilm), device="cpu")
    model.max_seq_length = SETTINGS["max_seq_length"]
    args = SentenceTransformerTrainingArguments(
        output_dir=str(work / "theirs-run"),
        max_steps=steps,
        per_device_train_batch_size=SETTINGS["batch_size"],
        learning_rate=SETTINGS["lr"],
        weight_decay=SETTINGS["weight_decay"],
        warmup_ratio=SETTINGS["warmup"],
        adam_epsilon=1e-6,
        max_grad_norm=1.0,
        seed=SETTINGS["seed"],
        save_strategy="no",
        report_to="none",
        logging_steps=10,
        use_cpu=True,
        dataloader_drop_last=True,
        disable_tqdm=True,
    )
    trainer = SentenceTransformerTrainer(
        model=model, args=args, train_dataset=data, loss=CoSENTLoss(model)
    )
    out = trainer.train()
    model.save(str(work / "theirs"))
    return {
        "model": model,
        "train_s": round(time.time() - t0, 1),
        "train_cpu_s": round(cpu_s() - c0, 1),
        "final_loss": out.training_loss,
    }


def theirs_sts(model, test) -> float:
    from sentence_transformers.sentence_transformer.evaluation import (
        EmbeddingSimilarityEvaluator,
    )

    ev = EmbeddingSimilarityEvaluator(
        test.column(0), test.column(1), test.labels, main_similarity="cosine", name="sts-test"
    )
    res = ev(model)
    key = next(k for k in res if k.endswith("spearman_cosine"))
    return 100 * res[key]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--threads", type=int, default=1, help="torch threads (1: no spin-waiting "
                   "on a shared CPU)")  # fmt: skip
    p.add_argument("--full", action="store_true", help="also score the starting model with "
                   "sentence-transformers and its trained directory with bertfamily")  # fmt: skip
    p.add_argument("--work", type=Path, default=Path("/tmp/bertfamily-train-embeddings"))
    p.add_argument("--out", type=Path, default=HERE / "results" / "train_embeddings.json")
    p.add_argument("--quick", action="store_true", help="smoke run: 2 steps, 40 test pairs")
    p.add_argument("--seed", type=int, default=0, help="the seed of both trainers")
    args = p.parse_args()
    SETTINGS["seed"] = args.seed
    if args.quick:
        args.steps, args.out = 2, args.work / "quick.json"
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    minilm = fetch("all-MiniLM-L6-v2")
    test = read_pairs("stsb:test")
    if args.quick:
        test = type(test)(test.columns, test.rows[:40], test.labels[:40])
    t0, c0 = time.time(), cpu_s()
    result: dict = {
        "benchmark": "MiniLM fine-tuned on STS-B train with CoSENT; STS-B test Spearman x100",
        "complete": False,
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "load_average_at_start": os.getloadavg()[0],
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "sentence_transformers": __import__("sentence_transformers").__version__,
        "steps": args.steps,
        "examples_seen": args.steps * SETTINGS["batch_size"],
        "test_pairs": len(test),
        "settings": SETTINGS,
        "published_before": 82.0,
        "before": {},
        "after": {},
        "train_s": {},
        "train_cpu_s": {},
        "final_train_loss": {},
    }

    def save() -> None:  # after every stage, so a cut-short run keeps what it measured
        result["total_s"] = round(time.time() - t0, 1)
        result["total_cpu_s"] = round(cpu_s() - c0, 1)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")

    result["before"]["bertfamily"] = round(ours_sts(minilm, test), 2)
    save()
    if args.full:
        from sentence_transformers import SentenceTransformer

        start = SentenceTransformer(str(minilm), device="cpu")
        result["before"]["sentence_transformers"] = round(theirs_sts(start, test), 2)
        save()
    ours = train_ours(minilm, args.work, args.steps)
    result["after"]["bertfamily"] = round(ours_sts(ours.pop("dir"), test), 2)
    result["train_s"]["bertfamily"] = ours["train_s"]
    result["train_cpu_s"]["bertfamily"] = ours["train_cpu_s"]
    result["final_train_loss"]["bertfamily_last_logged"] = ours["final_loss"]
    save()
    theirs = train_theirs(minilm, args.work, args.steps)
    result["after"]["sentence_transformers"] = round(theirs_sts(theirs.pop("model"), test), 2)
    result["train_s"]["sentence_transformers"] = theirs["train_s"]
    result["train_cpu_s"]["sentence_transformers"] = theirs["train_cpu_s"]
    result["final_train_loss"]["sentence_transformers_mean_over_run"] = theirs["final_loss"]
    result["difference_after"] = round(
        result["after"]["bertfamily"] - result["after"]["sentence_transformers"], 2
    )
    save()
    if args.full:  # the directory sentence-transformers saved, read by us
        theirs_by_us = round(ours_sts(args.work / "theirs", test), 2)
        result["after"]["sentence_transformers_dir_scored_by_bertfamily"] = theirs_by_us
    result["complete"] = True
    save()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
