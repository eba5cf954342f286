"""One full epoch on the real STS Benchmark, bertfamily beside sentence-transformers' own trainers
(docs/training-embeddings.md, "Measured").

    nice -n 10 python benchmarks/embedding_full_epoch.py [--rows cosent,mnrl,...] [--threads 1]

Every row starts from all-MiniLM-L6-v2 (fetched) and is trained for one epoch by
bertfamily (`train_embedding` / `train_reranker`, the code behind `bertfamily finetune --task
embedding|rerank`) and, where the row has a ``theirs`` side, by sentence-transformers 6
(``SentenceTransformerTrainer`` / ``CrossEncoderTrainer``) with the same settings:

- the same data in the same order: the training rows are permuted once with
  ``numpy.random.default_rng(seed)`` and both trainers read them in that order (ours with
  ``shuffle=False``, sentence-transformers with a sequential batch sampler), the last partial
  batch dropped by both;
- the same optimisation, sentence-transformers' (transformers') defaults: AdamW lr 5e-5
  (SimCSE 3e-5), betas (0.9, 0.999), eps 1e-8, weight decay 0.0, linear decay after a linear
  warm-up of ceil(10 % of the steps), gradient clipping at 1.0, fp32, dropout on, seed 0
  (the ``rerank`` row: transformers' warm-up, the first update at rate 0, which the reranker
  recipe defaults to; the embedding rows: ours, the first update at 1/warm-up);
- batch 16 (SimCSE 64), max_seq_length 64 (SimCSE 32; the cross-encoder's pairs 128).

The two runs then differ only by the implementation (and by the dropout masks, which each draws
from its own random stream). Rows:

- ``cosent``: CoSENT on the 5,749 train pairs (score / 5) — 359 steps;
- ``mnrl``: MultipleNegativesRankingLoss on the 1,406 train pairs with score >= 4 — 87 steps;
- ``rerank``: a cross-encoder (a new one-output head on MiniLM) with binary cross-entropy on the
  train pairs, labels score / 5 — 359 steps;
- ``simcse``: unsupervised SimCSE (MNRL of each sentence with itself, two dropout masks) on
  8,192 Austen sentences of 6+ words (a seeded sample of the fetched ``janeausten``) — 128 steps;
- ``matryoshka``: MatryoshkaLoss(CoSENT) over 384/256/128/64 dims, as ``cosent``;
- ``mnrl_no_dropout``: ``mnrl`` from a copy of MiniLM whose config.json sets both dropout
  probabilities to 0, so neither run draws random numbers: what is left between them is the
  implementation (a diagnostic of the ``mnrl`` gap).

Scores: STS-B **test** (1,379 pairs) Spearman of cosine vs gold ×100 (cross-encoder: of its
sigmoid scores); ours with `SentenceEmbedder` / `Reranker`, theirs with its own evaluators
(``EmbeddingSimilarityEvaluator`` / ``CrossEncoderCorrelationEvaluator``); each trained
directory is also scored by the other library. Matryoshka: Spearman of the first d dims
(re-normalised) of the untrained model, the ``cosent`` model and the ``matryoshka`` model.

Each row is written to the JSON when it finishes (``--rows`` runs some; the others are kept
from the file), with the machine (CPU model, flags, load average before and after, torch
threads), the training CPU seconds and the per-step losses of both trainers (first step:
same weights and batch, so equal up to dropout).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import logging
import math
import os
import resource
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import torch
from machine import cpu_flags, cpu_model  # benchmarks/machine.py

from bertfamily.data.pairs import PairTable, read_pairs
from bertfamily.evaluation.metrics import regression_metrics, similarity_metrics
from bertfamily.pipelines.embedding.embed import SentenceEmbedder
from bertfamily.pipelines.reranking.rerank import Reranker
from bertfamily.resources.cache import fetch
from bertfamily.train import TrainConfig

HERE = Path(__file__).resolve().parent
ROWS = ("cosent", "mnrl", "rerank", "simcse", "matryoshka", "mnrl_no_dropout")
DIMS = (384, 256, 128, 64)
COMMON = dict(lr=5e-5, weight_decay=0.0, adam_eps=1e-8, warmup_ratio=0.1, max_grad_norm=1.0)
ROW_SETTINGS = {
    "cosent": dict(loss="cosent", batch_size=16, max_seq_length=64),
    "mnrl": dict(loss="mnrl", batch_size=16, max_seq_length=64, min_score=0.8),
    "rerank": dict(loss="bce", batch_size=16, max_seq_length=128),
    "simcse": dict(loss="simcse", batch_size=64, max_seq_length=32, lr=3e-5, sentences=8192),
    "matryoshka": dict(loss="cosent", batch_size=16, max_seq_length=64, matryoshka_dims=DIMS),
    # a diagnostic: mnrl with dropout off in both (config.json), so the runs are deterministic
    "mnrl_no_dropout": dict(
        loss="mnrl", batch_size=16, max_seq_length=64, min_score=0.8, dropout=0.0
    ),  # fmt: skip
}


def source_commit() -> str:
    """The commit of this checkout (``+dirty`` when tracked files differ from it), or ""."""
    try:
        run = lambda *a: subprocess.run(  # noqa: E731
            ["git", "-C", str(HERE), *a], capture_output=True, text=True, check=True
        ).stdout.strip()
        return run("rev-parse", "HEAD") + ("+dirty" if run("status", "--porcelain", "-uno") else "")
    except (OSError, subprocess.CalledProcessError):
        return ""


def cpu_s() -> float:
    """CPU seconds used by this process so far (user + system, all threads)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


# --- data ----------------------------------------------------------------------------------
def shuffled(table: PairTable, seed: int) -> PairTable:
    order = np.random.default_rng(seed).permutation(len(table))
    labels = None if table.labels is None else [table.labels[i] for i in order]
    return PairTable(table.columns, [table.rows[i] for i in order], labels)


def write_jsonl(table: PairTable, path: Path, names: tuple[str, ...]) -> Path:
    with open(path, "w", encoding="utf-8") as f:
        for i, row in enumerate(table.rows):
            rec = dict(zip(names, row))
            if table.labels is not None:
                rec["score"] = table.labels[i]
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    return path


def austen_sentences(n: int, seed: int) -> list[str]:
    lines = (fetch("janeausten") / "austen.txt").read_text(encoding="utf-8").splitlines()
    lines = list(dict.fromkeys(t.strip() for t in lines if len(t.split()) >= 6))
    pick = np.random.default_rng(seed).permutation(len(lines))[:n]
    return [lines[i] for i in pick]


def row_data(row: str, seed: int, work: Path) -> tuple[PairTable, Path]:
    """The row's training rows in their one order, and the same rows as a file for ours."""
    s = ROW_SETTINGS[row]
    if row == "simcse":
        texts = austen_sentences(s["sentences"], seed)
        path = work / "simcse.txt"
        path.write_text("\n".join(texts) + "\n", encoding="utf-8")
        return PairTable(("anchor", "positive"), [(t, t) for t in texts]), path
    table = read_pairs("stsb:train")
    if "min_score" in s:
        keep = [i for i, y in enumerate(table.labels) if y >= s["min_score"]]
        table = PairTable(table.columns, [table.rows[i] for i in keep])  # MNRL: no labels
    table = shuffled(table, seed)
    names = ("anchor", "positive") if table.labels is None else ("sentence1", "sentence2")
    return table, write_jsonl(table, work / f"{row}.jsonl", names)


def plain_hf_copy(st_dir: Path, dest: Path) -> Path:
    """The encoder of a sentence-transformers directory alone (config, weights, tokenizer), the
    start of both cross-encoders."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for f in st_dir.iterdir():
        if f.is_file() and f.name not in (
            "modules.json",
            "sentence_bert_config.json",
            "config_sentence_transformers.json",
            "README.md",
        ):
            shutil.copy2(f, dest / f.name)
    return dest


# --- scoring -------------------------------------------------------------------------------
def ours_sts(model_dir: Path, test: PairTable, dims=(None,)) -> dict:
    emb = SentenceEmbedder(model_dir, dtype="fp32")
    a = emb.encode(test.column(0), batch_size=64)
    b = emb.encode(test.column(1), batch_size=64)
    out = {}
    for d in dims:
        m = similarity_metrics(a[:, :d], b[:, :d], test.labels)  # cosine: re-normalised
        out[str(d or a.shape[1])] = round(100 * m["spearman"], 2)
    return out


def theirs_sts(model, test: PairTable) -> float:
    from sentence_transformers.sentence_transformer.evaluation import (
        EmbeddingSimilarityEvaluator,
    )

    ev = EmbeddingSimilarityEvaluator(
        test.column(0), test.column(1), test.labels, main_similarity="cosine", name="sts-test"
    )
    res = ev(model)
    return round(100 * res[next(k for k in res if k.endswith("spearman_cosine"))], 2)


def ours_rerank_sts(model_dir: Path, test: PairTable) -> float:
    scores = Reranker(model_dir, dtype="fp32").predict(list(zip(test.column(0), test.column(1))))
    return round(100 * regression_metrics(test.labels, np.asarray(scores))["spearman"], 2)


def theirs_rerank_sts(model, test: PairTable) -> float:
    from sentence_transformers.cross_encoder.evaluation import CrossEncoderCorrelationEvaluator

    ev = CrossEncoderCorrelationEvaluator(
        list(zip(test.column(0), test.column(1))), test.labels, name="sts-test"
    )
    res = ev(model)
    return round(100 * res[next(k for k in res if k.endswith("spearman"))], 2)


# --- training ------------------------------------------------------------------------------
def settings_of(row: str, n_rows: int) -> dict:
    s = {**COMMON, **ROW_SETTINGS[row]}
    s["steps"] = n_rows // s["batch_size"]
    s["warmup_steps"] = math.ceil(s["warmup_ratio"] * s["steps"])  # transformers' rounding
    return s


def our_losses(run_dir: Path) -> list[float]:
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in rows if r.get("split") == "train" and "loss" in r]


def train_ours(row: str, s: dict, start: Path, data: Path, out: Path, seed: int) -> dict:
    if out.exists():
        shutil.rmtree(out)
    train = TrainConfig(
        out,
        max_steps=s["steps"],
        batch_size=s["batch_size"],
        learning_rate=s["lr"],
        weight_decay=s["weight_decay"],
        adam_eps=s["adam_eps"],
        warmup_steps=s["warmup_steps"],
        # the reranker recipe's default: transformers' warm-up (the first update at rate 0)
        transformers_warmup=row == "rerank",
        max_grad_norm=s["max_grad_norm"],
        seed=seed,
        log_every=1,
        device="cpu",
        progress=False,
    )
    c0 = cpu_s()
    if row == "rerank":
        from bertfamily.recipes.rerank import RerankConfig, train_reranker

        cfg = RerankConfig(start, data, "bce", max_length=s["max_seq_length"], epochs=None,
                           shuffle=False)  # fmt: skip
        train_reranker(cfg, train)
    else:
        from bertfamily.recipes.embedding import EmbeddingConfig, train_embedding

        cfg = EmbeddingConfig(
            start,
            data,
            s["loss"],
            max_seq_length=s["max_seq_length"],
            matryoshka_dims=tuple(s.get("matryoshka_dims", ())),
            epochs=None,
            shuffle=False,
        )
        train_embedding(cfg, train)
    losses = our_losses(out)
    return {"dir": out / "model", "cpu_s": round(cpu_s() - c0, 1), "losses": losses}


def _sequential(dataset, batch_size, drop_last, valid_label_columns=None, generator=None, seed=0):
    """sentence-transformers' batch sampler over the rows in their order (no shuffling)."""
    from sentence_transformers.base.sampler import DefaultBatchSampler
    from torch.utils.data import SequentialSampler

    del generator, seed
    return DefaultBatchSampler(
        SequentialSampler(dataset),
        batch_size=batch_size,
        drop_last=drop_last,
        valid_label_columns=valid_label_columns,
    )


def _their_args(cls, s: dict, out: Path, seed: int):
    return cls(
        output_dir=str(out / "run"),
        num_train_epochs=1,
        per_device_train_batch_size=s["batch_size"],
        learning_rate=s["lr"],
        weight_decay=s["weight_decay"],
        adam_epsilon=s["adam_eps"],
        warmup_steps=s["warmup_steps"],
        lr_scheduler_type="linear",
        max_grad_norm=s["max_grad_norm"],
        seed=seed,
        save_strategy="no",
        report_to="none",
        logging_steps=1,
        use_cpu=True,
        dataloader_drop_last=True,
        disable_tqdm=True,
        batch_sampler=_sequential,
    )


def train_theirs(row: str, s: dict, start: Path, table: PairTable, out: Path, seed: int) -> dict:
    from datasets import Dataset

    if out.exists():
        shutil.rmtree(out)
    c0 = cpu_s()
    torch.manual_seed(seed)  # the new cross-encoder head
    if table.labels is not None:
        cols = {"sentence1": table.column(0), "sentence2": table.column(1), "score": table.labels}
    else:
        cols = {"anchor": table.column(0), "positive": table.column(1)}
    data = Dataset.from_dict(cols)
    if row == "rerank":
        from sentence_transformers.cross_encoder import (
            CrossEncoder,
            CrossEncoderTrainer,
            CrossEncoderTrainingArguments,
        )
        from sentence_transformers.cross_encoder.losses import BinaryCrossEntropyLoss

        model = CrossEncoder(str(start), num_labels=1, max_length=s["max_seq_length"],
                             device="cpu")  # fmt: skip
        args = _their_args(CrossEncoderTrainingArguments, s, out, seed)
        trainer = CrossEncoderTrainer(
            model=model, args=args, train_dataset=data, loss=BinaryCrossEntropyLoss(model)
        )
    else:
        from sentence_transformers import (
            SentenceTransformer,
            SentenceTransformerTrainer,
            SentenceTransformerTrainingArguments,
        )
        from sentence_transformers.sentence_transformer import losses

        model = SentenceTransformer(str(start), device="cpu")
        model.max_seq_length = s["max_seq_length"]
        if s["loss"] == "cosent":
            loss = losses.CoSENTLoss(model)
        else:  # mnrl, simcse
            loss = losses.MultipleNegativesRankingLoss(model)
        if s.get("matryoshka_dims"):
            loss = losses.MatryoshkaLoss(model, loss, list(s["matryoshka_dims"]))
        args = _their_args(SentenceTransformerTrainingArguments, s, out, seed)
        trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=data, loss=loss)
    trainer.train()
    model.save(str(out / "model"))
    losses_ = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return {"model": model, "dir": out / "model", "cpu_s": round(cpu_s() - c0, 1),
            "losses": losses_, "steps": trainer.state.global_step}  # fmt: skip


def loss_summary(losses: list[float]) -> dict:
    if not losses:
        return {}
    tail = losses[-50:]
    return {
        "steps_logged": len(losses),
        "first_step": round(losses[0], 4),
        "mean_first_10": round(float(np.mean(losses[:10])), 4),
        "mean_last_50": round(float(np.mean(tail)), 4),
        "mean_all": round(float(np.mean(losses)), 4),
    }


# --- the rows ------------------------------------------------------------------------------
def run_row(row: str, args, minilm: Path, test: PairTable, result: dict) -> dict:
    work = args.work
    table, data_file = row_data(row, args.seed, work)
    s = settings_of(row, len(table))
    rec: dict = {
        "settings": {k: (list(v) if isinstance(v, tuple) else v) for k, v in s.items()},
        "train_rows": len(table),
        "load_average_before": round(os.getloadavg()[0], 2),
        "after": {},
        "cross_scored": {},
        "train_cpu_s": {},
        "losses": {},
    }
    start = minilm
    if row == "rerank":
        start = plain_hf_copy(minilm, work / "minilm-encoder")
    if "dropout" in s:
        start = work / "minilm-no-dropout"
        if start.exists():
            shutil.rmtree(start)
        shutil.copytree(minilm, start)
        cfg = json.loads((start / "config.json").read_text())
        cfg.update(hidden_dropout_prob=s["dropout"], attention_probs_dropout_prob=s["dropout"])
        (start / "config.json").write_text(json.dumps(cfg, indent=2))
    ours = train_ours(row, s, start, data_file, work / f"{row}-ours", args.seed)
    rec["train_cpu_s"]["bertfamily"] = ours["cpu_s"]
    rec["losses"]["bertfamily"] = loss_summary(ours["losses"])
    if row == "rerank":
        rec["after"]["bertfamily"] = ours_rerank_sts(ours["dir"], test)
    elif row == "matryoshka":
        rec["after"]["bertfamily"] = ours_sts(ours["dir"], test)["384"]
        rec["by_dim"] = {
            "untrained (plain truncation)": ours_sts(minilm, test, DIMS),
            "cosent only (plain truncation)": ours_sts(work / "cosent-ours" / "model", test, DIMS)
            if (work / "cosent-ours" / "model").is_dir()
            else None,
            "matryoshka, bertfamily": ours_sts(ours["dir"], test, DIMS),
        }
    else:
        rec["after"]["bertfamily"] = ours_sts(ours["dir"], test)["384"]
    if not args.no_theirs:
        theirs = train_theirs(row, s, start, table, work / f"{row}-theirs", args.seed)
        rec["theirs_steps"] = theirs["steps"]
        rec["train_cpu_s"]["sentence_transformers"] = theirs["cpu_s"]
        rec["losses"]["sentence_transformers"] = loss_summary(theirs["losses"])
        if row == "rerank":
            rec["after"]["sentence_transformers"] = theirs_rerank_sts(theirs["model"], test)
            rec["cross_scored"]["sentence_transformers_dir_by_bertfamily"] = ours_rerank_sts(
                theirs["dir"], test
            )
            from sentence_transformers.cross_encoder import CrossEncoder

            mine = CrossEncoder(str(ours["dir"]), device="cpu")
            rec["cross_scored"]["bertfamily_dir_by_sentence_transformers"] = theirs_rerank_sts(
                mine, test
            )
        else:
            from sentence_transformers import SentenceTransformer

            rec["after"]["sentence_transformers"] = theirs_sts(theirs["model"], test)
            rec["cross_scored"]["sentence_transformers_dir_by_bertfamily"] = ours_sts(
                theirs["dir"], test
            )["384"]
            mine = SentenceTransformer(str(ours["dir"]), device="cpu")
            rec["cross_scored"]["bertfamily_dir_by_sentence_transformers"] = theirs_sts(mine, test)
            if row == "matryoshka":
                rec["by_dim"]["matryoshka, sentence-transformers"] = ours_sts(
                    theirs["dir"], test, DIMS
                )
        rec["difference_after"] = round(
            rec["after"]["bertfamily"] - rec["after"]["sentence_transformers"], 2
        )
        rec["within_0.5"] = abs(rec["difference_after"]) <= 0.5
    rec["load_average_after"] = round(os.getloadavg()[0], 2)
    return rec


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated subset of {ROWS}")
    p.add_argument("--threads", type=int, default=1, help="torch threads, both libraries")
    p.add_argument("--seed", type=int, default=0, help="the data order and both trainers' seed")
    p.add_argument("--no-theirs", action="store_true", help="bertfamily only")
    p.add_argument("--work", type=Path, default=Path("/tmp/bertfamily-embedding-full-epoch"))
    p.add_argument("--out", type=Path, default=HERE / "results" / "embedding_full_epoch.json")
    args = p.parse_args()
    rows = [r for r in args.rows.split(",") if r]
    unknown = sorted(set(rows) - set(ROWS))
    if unknown:
        p.error(f"unknown rows {unknown}; expected {ROWS}")
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    torch.set_num_threads(args.threads)
    args.work.mkdir(parents=True, exist_ok=True)
    minilm = fetch("all-MiniLM-L6-v2")
    test = read_pairs("stsb:test")
    result = json.loads(args.out.read_text()) if args.out.is_file() else {}
    result.update(
        benchmark="one epoch on STS-B train from all-MiniLM-L6-v2, bertfamily vs "
        "sentence-transformers 6 with the same data order and settings; STS-B test Spearman x100",
        machine={
            "cpu": cpu_model(),
            "cpu_flags": cpu_flags(),
            "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "note": "shared with other jobs (nice); wall times are not figures, CPU seconds are "
            "indicative, the scores are the result",
        },
        versions={
            "torch": torch.__version__,
            "sentence_transformers": __import__("sentence_transformers").__version__,
            "transformers": __import__("transformers").__version__,
        },
        seed=args.seed,
        test_pairs=len(test),
        published_before=82.0,
    )
    result.setdefault("rows", {})
    commit = source_commit()
    done: list[str] = []

    def save() -> None:
        """Merge this run's rows into the JSON as it is now (another run of this script may
        be writing other rows of the same file), under a lock, atomically."""
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with open(args.work / "json.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            now = json.loads(args.out.read_text()) if args.out.is_file() else {}
            rows_now = {**now.get("rows", {}), **{r: result["rows"][r] for r in done}}
            merged = {**now, **{k: v for k, v in result.items() if k != "rows"}}
            merged["rows"] = {r: rows_now[r] for r in ROWS if r in rows_now}
            tmp = args.out.with_suffix(".tmp")
            tmp.write_text(json.dumps(merged, indent=2) + "\n")
            os.replace(tmp, args.out)

    if "before" not in result:
        from sentence_transformers import SentenceTransformer

        result["before"] = {
            "bertfamily": ours_sts(minilm, test)["384"],
            "sentence_transformers": theirs_sts(
                SentenceTransformer(str(minilm), device="cpu"), test
            ),
        }
        save()
    for row in rows:
        t0 = time.time()
        rec = run_row(row, args, minilm, test, result)
        rec["wall_s"] = round(time.time() - t0, 1)
        rec["commit"] = commit
        result["rows"][row] = rec
        done.append(row)
        save()
        print(row, json.dumps(rec["after"]), flush=True)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
