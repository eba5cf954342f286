"""Acceptance run of the distillation issue: real all-MiniLM-L6-v2 teacher, a 3-layer student,
the Austen novels; TinyBERT general distillation vs an MLM-only baseline for the same time
from the same initialisation (chosen teacher layers copied, --init-layers); cosine similarity
of mean-pooled sentence embeddings (student vs teacher) on held-out sentences, raw and after a
ridge map student → teacher fitted on training-novel sentences (fair to a student whose space
is rotated).

Usage (long; run niced in the background on the shared machine)::

    PYTHONPATH=src nice -n 10 python benchmarks/distill_acceptance.py OUT [--seconds 540]
        [--device cpu] [--only prepare|distill|baseline|evaluate]

Training corpus: Emma, Mansfield Park, Northanger Abbey, Pride and Prejudice, Sense and
Sensibility. Held out: sentences of Persuasion (never trained on by either student).
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

import numpy as np
import torch

TRAIN_NOVELS = (
    "emma",
    "mansfield_park",
    "northanger_abbey",
    "pride_and_prejudice",
    "sense_and_sensibility",
)
HELD_OUT = "persuasion"


def prepare(out: Path, n_eval: int, n_fit: int, init_layers: list[int]) -> None:
    from bertfamily.build import build_model
    from bertfamily.config import EncoderConfig
    from bertfamily.resources.cache import fetch
    from bertfamily.tokenization import load_tokenizer

    teacher_dir, austen = fetch("all-MiniLM-L6-v2"), fetch("janeausten")
    rng = np.random.default_rng(0)
    held = [
        s.strip()
        for s in (austen / f"{HELD_OUT}.txt").read_text().splitlines()
        if len(s.split()) >= 6
    ]
    fit = [
        s.strip()
        for n in TRAIN_NOVELS
        for s in (austen / f"{n}.txt").read_text().splitlines()
        if len(s.split()) >= 6
    ]
    held = [held[i] for i in rng.choice(len(held), n_eval, replace=False)]
    fit = [fit[i] for i in rng.choice(len(fit), n_fit, replace=False)]
    (out / "heldout.json").write_text(json.dumps({"heldout": held, "fit": fit}))
    # Both students start from the same initialisation: chosen teacher layers copied
    # (DistilBERT's idea; H = 384 = the teacher's, so the student's own hidden
    # states live in the teacher's space). A random 3-layer model is kept as a reference row.
    from bertfamily.pretrained import from_pretrained
    from bertfamily.recipes.distill import init_student

    init_student(from_pretrained(teacher_dir), init_layers).save_pretrained(out / "init")
    load_tokenizer(teacher_dir).save_pretrained(out / "init")
    torch.manual_seed(0)
    teacher_cfg = json.loads((teacher_dir / "config.json").read_text())
    config = EncoderConfig.from_preset(
        "bert-tiny",
        num_hidden_layers=3,
        hidden_size=384,
        num_attention_heads=12,
        intermediate_size=1536,
        vocab_size=teacher_cfg["vocab_size"],
        use_pooler=False,
        pair_head=None,
    )
    build_model(config).save_pretrained(out / "random_init")
    load_tokenizer(teacher_dir).save_pretrained(out / "random_init")


def train_config(out: Path, seconds: float, device: str):
    from bertfamily.train import TrainConfig

    return TrainConfig(
        output_dir=out,
        max_steps=100_000,
        max_time_s=seconds,
        batch_size=16,
        learning_rate=3e-4,
        warmup_steps=10,
        schedule="constant",
        log_every=10,
        eval_every=0,
        save_every=200,
        seed=0,
        device=device,
        progress=False,
    )


def corpus():
    from bertfamily.resources.cache import fetch

    austen = fetch("janeausten")
    return [austen / f"{n}.txt" for n in TRAIN_NOVELS]


def run_distill(out: Path, seconds: float, device: str, max_length: int) -> dict:
    from bertfamily.recipes.distill import DistillConfig, distill
    from bertfamily.resources.cache import fetch

    cfg = DistillConfig(
        teacher=fetch("all-MiniLM-L6-v2"),
        method="tinybert",
        corpus=corpus(),
        student=out / "init",
        max_length=max_length,
        eval_batches=4,
    )
    return distill(cfg, train_config(out / "distilled", seconds, device))


def run_baseline(out: Path, seconds: float, device: str, max_length: int) -> dict:
    from bertfamily.recipes.pretrain import PretrainConfig, pretrain

    cfg = PretrainConfig(
        corpus=corpus(),
        init_from=out / "init",
        objectives=["mlm"],
        max_length=max_length,
        eval_batches=4,
    )
    return pretrain(cfg, train_config(out / "baseline", seconds, device))


def evaluate(out: Path) -> dict:
    from bertfamily.pipelines.embedding.embed import SentenceEmbedder
    from bertfamily.resources.cache import fetch

    data = json.loads((out / "heldout.json").read_text())
    teacher_dir = fetch("all-MiniLM-L6-v2")
    models = {
        "teacher": teacher_dir,
        "random 3-layer init (reference)": out / "random_init",
        "teacher layers copied = both students' start": out / "init",
        "MLM-only baseline": out / "baseline" / "model",
        "TinyBERT-distilled": out / "distilled" / "model",
    }
    emb = {}
    for name, path in models.items():
        if not path.is_dir():
            continue
        e = SentenceEmbedder(path)  # mean pooling, L2-normalised
        emb[name] = {k: e.encode(data[k], batch_size=64) for k in ("heldout", "fit")}
    t_held, t_fit = emb["teacher"]["heldout"], emb["teacher"]["fit"]
    rows = {}
    for name, e in emb.items():
        if name == "teacher":
            continue
        cos = (e["heldout"] * t_held).sum(1)  # both unit vectors
        # Fair to any basis: ridge map student → teacher fitted on training-novel sentences.
        X = np.c_[e["fit"], np.ones(len(e["fit"]))]
        W = np.linalg.solve(X.T @ X + 1e-2 * np.eye(X.shape[1]), X.T @ t_fit)
        p = np.c_[e["heldout"], np.ones(len(e["heldout"]))] @ W
        p /= np.linalg.norm(p, axis=1, keepdims=True)
        rows[name] = {
            "cosine_mean": float(cos.mean()),
            "cosine_std": float(cos.std()),
            "linear_probe_cosine_mean": float((p * t_held).sum(1).mean()),
        }
    result = {
        "heldout_sentences": len(data["heldout"]),
        "fit_sentences": len(data["fit"]),
        "rows": rows,
    }
    for run in ("distilled", "baseline"):
        s = out / run / "summary.json"
        if s.is_file():
            summary = json.loads(s.read_text())
            result[f"{run}_run"] = {
                k: summary.get(k) for k in ("step", "stopped", "elapsed_s", "train", "eval")
            }
    (out / "acceptance.json").write_text(json.dumps(result, indent=2))
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--seconds", type=float, default=540)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--max-length", type=int, default=64)
    ap.add_argument("--only", default=None)
    ap.add_argument(
        "--init-layers",
        default="1,3,5",
        help="teacher layers copied into both students (1,3,5 = the layers the "
        "TinyBERT mapping compares them with)",
    )
    ap.add_argument("--n-eval", type=int, default=500)
    ap.add_argument("--n-fit", type=int, default=2000)
    a = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    a.out.mkdir(parents=True, exist_ok=True)
    steps = [a.only] if a.only else ["prepare", "distill", "baseline", "evaluate"]
    for step in steps:
        t0 = time.time()
        if step == "prepare":
            prepare(a.out, a.n_eval, a.n_fit, [int(x) for x in a.init_layers.split(",")])
        elif step == "distill":
            run_distill(a.out, a.seconds, a.device, a.max_length)
        elif step == "baseline":
            run_baseline(a.out, a.seconds, a.device, a.max_length)
        elif step == "evaluate":
            print(json.dumps(evaluate(a.out), indent=2))
        logging.info("%s took %.1f s wall-clock", step, time.time() - t0)


if __name__ == "__main__":
    main()
