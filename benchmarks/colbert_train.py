"""Train a ColBERT model from MiniLM twice on the same data: with bertfamily
(`recipes.colbert.train_colbert`, what ``bertfamily finetune --task colbert`` runs) and with
PyLate's own training (sentence-transformers' trainer, PyLate's collator and ``Contrastive``
loss, a ColBERT PyLate builds on the same MiniLM), and save both ColBERT directories for the
retrieval benchmark.

Data: the STS Benchmark train pairs (the fetched ``stsb`` resource) scored ≥ 4 of 5, as
(query, positive) rows; the other rows of a batch are each query's negatives (in-batch
negatives, PyLate's ``Contrastive``). One epoch, batch 16, learning rate 3e-5, seed 0, no
warm-up, linear decay, clipping at norm 1 (transformers' defaults, PyLate's trainer's), one
intra-op thread, ``nice`` 10. The two runs see the same rows, each in its own seeded shuffled
order (ours: `data.batching.IndexedBatches`; PyLate: the trainer's random sampler), and start
from their own random projection and marker rows (each library's initialisation), so the two
models are alike, not equal; `tests/training/test_colbert_train.py` shows equal steps from one
start.

PyLate 1.6 runs on sentence-transformers 6 through the shims of
``tests/reference/pylate_colbert.py`` (its loader and query padding hooks are those of
sentence-transformers 5).

Writes ``OUT/ours`` and ``OUT/pylate`` (PyLate ColBERT directories: ``pylate.models.ColBERT``
and `pipelines.embedding.colbert.ColBERTEncoder` load them), ``OUT/data.jsonl`` (the rows) and
``OUT/summary.json`` (rows, steps, seconds of each run, first and last losses, machine).

Usage: ``python benchmarks/colbert_train.py [--out /tmp/colbert_runs] [--limit N]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the PyLate shims (reference/pylate_colbert.py)


def stsb_rows(min_score: float, limit: int | None) -> list[dict[str, str]]:
    """STS-B train pairs scored ≥ ``min_score`` (0-5) as {"query", "positive"} rows."""
    from bertfamily.data.pairs import read_pairs

    table = read_pairs("stsb:train")  # labels are score / 5
    rows = [
        {"query": a, "positive": b}
        for (a, b), y in zip(table.rows, table.labels)
        if y * 5.0 >= min_score
    ]
    return rows[:limit] if limit else rows


def run_ours(model: Path, data: Path, out: Path, args) -> dict:
    from bertfamily.recipes.colbert import ColBERTConfig, train_colbert

    run = out / "ours_run"
    t0 = time.time()
    res = train_colbert(
        ColBERTConfig(model, data, epochs=1.0),
        output_dir=run,
        batch_size=args.batch_size,
        learning_rate=args.lr,
        seed=args.seed,
        progress=False,
    )
    seconds = time.time() - t0
    final = out / "ours"
    if final.exists():
        shutil.rmtree(final)
    shutil.copytree(res["model"], final)
    lines = (run / "metrics.jsonl").read_text().splitlines()
    losses = [r["loss"] for r in map(json.loads, lines) if r.get("split") == "train"]
    return {"seconds": seconds, "steps": res["train"]["step"], "losses": losses[:1] + losses[-1:]}


def run_pylate(model: Path, rows: list[dict], out: Path, args) -> dict:
    from datasets import Dataset
    from pylate import losses
    from pylate.utils import ColBERTCollator
    from sentence_transformers import (
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )

    from reference.pylate_colbert import load_pylate_colbert, make_pylate_colbert

    t0 = time.time()
    initial = make_pylate_colbert(model, out / "pylate_initial", seed=args.seed)
    colbert = load_pylate_colbert(initial).train()
    targs = SentenceTransformerTrainingArguments(
        output_dir=str(out / "pylate_run"),
        num_train_epochs=1,
        per_device_train_batch_size=args.batch_size,
        learning_rate=args.lr,
        seed=args.seed,
        save_strategy="no",
        report_to="none",
        logging_steps=10,
        use_cpu=True,
        disable_tqdm=True,
    )
    trainer = SentenceTransformerTrainer(
        model=colbert,
        args=targs,
        train_dataset=Dataset.from_list(rows),
        loss=losses.Contrastive(colbert),
        data_collator=ColBERTCollator(colbert.tokenize),
    )
    trainer.train()
    seconds = time.time() - t0
    final = out / "pylate"
    if final.exists():
        shutil.rmtree(final)
    colbert._model_config = {}  # sentence-transformers 6 keeps no such dict; pylate's save reads it
    colbert.save(str(final))
    losses_ = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return {
        "seconds": seconds,
        "steps": trainer.state.global_step,
        "losses": losses_[:1] + losses_[-1:],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/colbert_runs"))
    parser.add_argument("--model", default="all-MiniLM-L6-v2")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=3e-5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--min-score", type=float, default=4.0)
    parser.add_argument("--limit", type=int, default=None, help="first N rows only (a smoke run)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--which", default="ours,pylate")
    args = parser.parse_args()
    os.nice(10)
    torch.set_num_threads(args.threads)
    from bertfamily.resources.resolve import resolve_model

    model = resolve_model(args.model)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = stsb_rows(args.min_score, args.limit)
    data = args.out / "data.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary: dict = {
        "rows": len(rows),
        "data": f"STS-B train pairs with score >= {args.min_score} as (query, positive)",
        "batch_size": args.batch_size,
        "learning_rate": args.lr,
        "seed": args.seed,
        "threads": args.threads,
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()},
        "torch": torch.__version__,
    }
    which = args.which.split(",")
    if "ours" in which:
        summary["ours"] = run_ours(model, data, args.out, args)
        print("ours", summary["ours"], flush=True)
    if "pylate" in which:
        summary["pylate"] = run_pylate(model, rows, args.out, args)
        print("pylate", summary["pylate"], flush=True)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
