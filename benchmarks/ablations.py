"""The source documents' claims about BERT's improvement directions, measured: one small
pretraining setup, one arm per direction (each differing from its reference arm in exactly
one switch), the same downstream evaluation for every arm, seeds, and a paired test.

    nice -n 5 python benchmarks/ablations.py                      # the committed study
    python benchmarks/ablations.py --toy --out /tmp/a.json        # seconds (the CI test)
    python benchmarks/ablations.py --scale 4 --seeds 0,1,2,3,4 --device cuda   # further
    torchrun --nproc-per-node 8 benchmarks/ablations.py --scale 8 --device cuda  # DDP
    python benchmarks/ablations.py --only-task ner --work /tmp/ablations --out /tmp/ner.json
    python benchmarks/ablations.py --merge benchmarks/results/ablations.json /tmp/ner.json

1. Pretraining: preset bert-tiny (tiny-electra for the RTD arm: the same encoder at E = H)
   at L=2, H=E=128, A=2, FFN 512 (``--scale`` multiplies width and steps), 64-token
   instances, batch 32, the same steps, learning rate, schedule and seed for every MLM arm.
   English arms: Austen (`fetch("janeausten")`, the novels of `ENGLISH_TRAIN`; `ENGLISH_EVAL`
   held out) with a WordPiece vocabulary trained on the training novels; Chinese arms: People's
   Daily 1998 (pretrain.jsonl; heldout.jsonl held out) with bert-base-chinese's vocabulary.
2. Arms (`ARMS`): a dict of overrides on `BASELINE` and the arm it is compared with. ELECTRA
   trains the steps whose FLOPs equal the MLM baseline's (`electra_vs_mlm.step_flops`). The
   fine-tuning arms (`DOWNSTREAM` switches: K-BERT's WordNet, FastBERT, TinyBERT distillation
   and its augmentation) pretrain nothing: they fine-tune the baseline's saved run of the same
   seed (`run_downstream`), so the baseline runs first.
3. Evaluation, the same for every arm and seed: held-out MLM accuracy (each arm's own masking,
   so comparable between arms of equal masking only; none for ELECTRA, whose saved model is
   the discriminator), then fine-tuning of the saved model with the seed of its pretraining:
   English: tweet sentiment (accuracy) and WNUT-2016 NER (entity F1, and the token-level F1
   of `entity_token_f1`, the span claims' metric); Chinese: product-review sentiment
   (accuracy). Fixed steps (NER its own, ``ner_ft_steps``), no dev set, test metrics of the
   last step. ``--only-task ner`` redoes only the NER fine-tune of saved runs (see `main`).
4. Statistics: per metric, the paired t-test (scipy.stats.ttest_rel) of the arm against its
   reference over the same seeds. A claim's verdict reads its primary metric (`CLAIMS`):
   "reproduces" when p < ALPHA and the difference has the claimed sign, "contradicted" when
   p < ALPHA and the opposite sign, "no signal" when the metric has one value in every run
   of both arms (no test possible), else "within noise".

Writes the JSON after every run (a partial study is usable): machine, versions, the resolved
configuration per arm, per-seed metrics, and the table; `render_table` turns it into the
Markdown table of docs/ablations.md (``--render`` rewrites the page's table from the JSON).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import logging
import os
import platform
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "ablations.json"
PAGE = ROOT / "docs" / "ablations.md"
TABLE_START, TABLE_END = "<!-- ablations-table:start -->", "<!-- ablations-table:end -->"
ALPHA = 0.05
ENGLISH_TRAIN = ("northanger_abbey", "persuasion")
ENGLISH_EVAL = ("sense_and_sensibility",)

# The one configuration every arm starts from: its pretraining switches (the study's axes).
BASELINE: dict[str, Any] = {
    "language": "en",
    "objectives": ("mlm",),
    "masking": "token",
    "static_copies": 0,  # 0 = dynamic masking (RoBERTa §4.1)
    "packing": "full_sentences",
    "phrases": None,
    # fine-tuning switches (the downstream directions; pretraining as the baseline's):
    "knowledge": None,  # K-BERT: the graph injected while fine-tuning (Liu et al. 2020 §3)
    "self_distill": False,  # FastBERT: students + early exit (Liu et al. 2020 §3.2)
    "task_distill": False,  # TinyBERT task distillation into a 1-layer student (§3.2)
    "augment": False,  # TinyBERT's data augmentation of the distillation set (§3.2, Alg. 1)
}
# The switches that leave pretraining alone: their arms fine-tune the baseline's saved model of
# the same seed (``<work>/baseline-<seed>/``) instead of pretraining again.
DOWNSTREAM = ("knowledge", "self_distill", "task_distill", "augment")
# FastBERT's claim is read at this speed (the uncertainty threshold; Liu et al. 2020 §4).
FASTBERT_SPEED = 0.5
FASTBERT_SPEEDS = (0.1, 0.3, 0.5, 0.8)
# name -> (reference arm, overrides of the reference's switches: exactly one).
ARMS: dict[str, tuple[str | None, dict[str, Any]]] = {
    "baseline": (None, {}),
    "whole_word": ("baseline", {"masking": "whole_word"}),
    "ngram": ("baseline", {"masking": "ngram"}),
    "span": ("baseline", {"masking": "span"}),
    "static": ("baseline", {"static_copies": 1}),
    "nsp": ("baseline", {"objectives": ("mlm", "nsp")}),
    "sop": ("nsp", {"objectives": ("mlm", "sop")}),
    "doc_sentences": ("baseline", {"packing": "doc_sentences"}),
    "span_sbo": ("span", {"objectives": ("mlm", "sbo")}),
    "phrases": ("baseline", {"phrases": "english"}),
    "electra": ("baseline", {"objectives": ("rtd",)}),
    "zh_baseline": ("baseline", {"language": "zh"}),
    "zh_whole_word": ("zh_baseline", {"masking": "whole_word"}),
    "kbert": ("baseline", {"knowledge": "wordnet"}),
    "fastbert": ("baseline", {"self_distill": True}),
    "distill": ("baseline", {"task_distill": True}),
    "distill_augment": ("distill", {"augment": True}),
}
# Arms that are references only (a language, a distillation without augmentation), no claim.
REFERENCE_ONLY = ("zh_baseline", "distill")
# arm -> (the claim of the source documents, its primary metric, the claimed sign of
# arm − reference on it); zh_baseline is a reference only (a language, not a claim).
CLAIMS: dict[str, tuple[str, str, int]] = {
    "whole_word": ("whole-word masking beats token masking", "mean_downstream", +1),
    "ngram": ("n-gram masking beats token masking", "mean_downstream", +1),
    "span": ("span masking helps span tasks", "ner_token_f1", +1),
    "static": ("dynamic masking beats static masking (RoBERTa)", "mean_downstream", -1),
    "nsp": ("dropping NSP helps (RoBERTa)", "mean_downstream", -1),
    "sop": ("SOP is a better sentence objective than NSP (ALBERT)", "mean_downstream", +1),
    "doc_sentences": ("DOC-SENTENCES packing beats FULL-SENTENCES", "mean_downstream", +1),
    "span_sbo": ("the span boundary objective helps span tasks (SpanBERT)", "ner_token_f1", +1),
    "phrases": ("ERNIE phrase masking beats token masking", "mean_downstream", +1),
    "electra": ("RTD beats MLM at equal compute (ELECTRA)", "mean_downstream", +1),
    "zh_whole_word": ("whole-word masking beats token masking for Chinese", "zh_acc", +1),
    "kbert": ("K-BERT's WordNet injection helps fine-tuning", "sentiment_acc", +1),
    # sign 0: the claim is "no loss" (FastBERT keeps accuracy while exiting early)
    "fastbert": (
        f"FastBERT's early exit keeps accuracy (speed {FASTBERT_SPEED})",
        "sentiment_acc",
        0,
    ),
    "distill_augment": (
        "data augmentation helps task distillation (TinyBERT)",
        "sentiment_acc",
        +1,
    ),
}
RULE = (
    f"paired t-test over seeds (scipy ttest_rel, two-sided); p < {ALPHA} and the claimed sign: "
    "reproduces; p < ALPHA, opposite sign: contradicted; the metric has one value in every run "
    "of both arms: no signal; else within noise. A claim of no loss (sign 0, FastBERT): no "
    "signal when no text exited early in any run, contradicted when p < ALPHA and the arm is "
    "lower, else reproduces"
)
METRICS = ("mlm_acc", "sentiment_acc", "ner_f1", "ner_token_f1", "zh_acc", "mean_downstream")
# the downstream arms' extra metrics (in the second table)
DOWNSTREAM_METRICS = ("sentiment_acc_full", "mean_exit_layer", "layers_saved")

# Sizes at scale 1 (the committed study) and for the CI toy run.
SIZES = {
    "full": dict(
        layers=2, hidden=128, max_length=64, batch=32, steps=300, lr=1e-3, vocab=6000,
        ft_steps=100, ft_batch=32, ft_lr=1e-3, ner_ft_steps=300, ner_ft_lr=1e-3,
        sentiment_train=2560, sentiment_test=1000, distill_train=300,
        ner_train=1675, zh_train=2560, zh_test=1000, corpus_lines=None, eval_batches=20,
        knowledge="wordnet",
    ),
    "toy": dict(
        layers=2, hidden=32, max_length=32, batch=8, steps=3, lr=1e-3, vocab=400,
        ft_steps=2, ft_batch=8, ft_lr=5e-4, ner_ft_steps=3, ner_ft_lr=5e-4,
        sentiment_train=40, sentiment_test=30, distill_train=16,
        ner_train=600, zh_train=40, zh_test=30, corpus_lines=400, eval_batches=2,
        knowledge="toy",  # a few hand-written triples (prepare_data), not the 5 s WordNet load
    ),
}  # fmt: skip


def resolved(arm: str) -> dict[str, Any]:
    """The switches of ``arm``: `BASELINE` with the overrides of the chain of reference arms
    that leads to it (sop = baseline + nsp's + its own).

    Raises:
        KeyError: an unknown arm.
    """
    reference, overrides = ARMS[arm]
    base = dict(BASELINE) if reference is None else resolved(reference)
    return {**base, **overrides}


def pretrain_fields(switches: dict[str, Any]) -> dict[str, Any]:
    """The `PretrainConfig` fields that a resolved arm sets. Three switches set two fields, as
    the recipe asks: RTD trains an ELECTRA-layout model (preset tiny-electra; at E = H the
    same encoder as bert-tiny's, see docs/ablations.md), phrase masking masks its phrases with
    the "entity" strategy, and Chinese whole-word masking takes its word boundaries from jieba
    (``chinese_words``)."""
    from bertfamily.objectives.masking import MaskingConfig

    strategy = "entity" if switches["phrases"] else switches["masking"]
    return dict(
        preset="tiny-electra" if switches["objectives"] == ("rtd",) else "bert-tiny",
        objectives=tuple(switches["objectives"]),
        masking=MaskingConfig(strategy=strategy),
        static_copies=switches["static_copies"],
        packing=switches["packing"],
        phrases=switches["phrases"],
        chinese_words=switches["language"] == "zh" and switches["masking"] == "whole_word",
    )


def sizes(toy: bool, scale: float) -> dict[str, Any]:
    """`SIZES` with ``scale`` applied: hidden size (multiple of 64, heads of 64), layers and
    pretraining steps grow with it; fine-tuning stays as it is."""
    s = dict(SIZES["toy" if toy else "full"])
    if scale != 1:
        s["hidden"] = max(64, int(s["hidden"] * scale) // 64 * 64)
        s["layers"] = min(12, max(s["layers"], round(s["layers"] * scale)))
        s["steps"] = round(s["steps"] * scale)
    return s


def model_overrides(s: dict[str, Any]) -> dict[str, Any]:
    heads = max(1, s["hidden"] // 64)
    return dict(
        num_hidden_layers=s["layers"],
        hidden_size=s["hidden"],
        embedding_size=s["hidden"],
        num_attention_heads=heads,
        intermediate_size=4 * s["hidden"],
    )


# ---------------------------------------------------------------- data (written once)


def _first_lines(src: Path, dst: Path, n: int | None) -> Path:
    if n is None:
        return src
    with open(src, encoding="utf-8") as f:
        dst.write_text("".join(line for _, line in zip(range(n), f)), encoding="utf-8")
    return dst


def prepare_data(work: Path, s: dict[str, Any]) -> dict[str, Any]:
    """Corpora, tokenizers and downstream splits under ``work`` (reused when present).

    Splits (numpy default_rng(0) permutations, as finetune_acceptance.py): tweets: test = the
    first ``sentiment_test`` rows, train = ``sentiment_train`` rows from position 2,500 on
    (past that script's dev rows); WNUT-2016: test = the first 479, train = up to
    ``ner_train`` from position 719 on; Chinese reviews: the first ``zh_train`` rows of a
    permutation of train.jsonl, the first ``zh_test`` of test.jsonl's.
    """
    from bertfamily.data.tables import read_conll, read_table
    from bertfamily.resources.cache import fetch
    from bertfamily.tokenization.training import train_tokenizer

    work.mkdir(parents=True, exist_ok=True)
    austen, daily = fetch("janeausten"), fetch("peoples-daily-1998")
    n = s["corpus_lines"]
    en = [_first_lines(austen / f"{b}.txt", work / f"{b}.txt", n) for b in ENGLISH_TRAIN]
    en_eval = [_first_lines(austen / f"{b}.txt", work / f"{b}.txt", n) for b in ENGLISH_EVAL]
    zh = [_first_lines(daily / "pretrain.jsonl", work / "zh.jsonl", n and n // 4)]
    zh_eval = [_first_lines(daily / "heldout.jsonl", work / "zh_eval.jsonl", n and n // 4)]
    tok = work / "tokenizer"
    if not (tok / "tokenizer.json").exists():
        train_tokenizer(en, "wordpiece", s["vocab"], output_dir=tok)

    def write_csv(path: Path, rows) -> Path:
        with open(path, "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(["text", "label"])
            w.writerows([r.text, r.label] for r in rows)
        return path

    tweets = read_table(fetch("tweet-sentiment") / "tweets.csv")
    order = np.random.default_rng(0).permutation(len(tweets))
    sent_test = [tweets[i] for i in order[: s["sentiment_test"]]]
    sent_train = [tweets[i] for i in order[2500 : 2500 + s["sentiment_train"]]]
    sents = read_conll(fetch("wnut16-ner") / "train.conll")
    order = np.random.default_rng(0).permutation(len(sents))
    ner = {"test": order[:479], "train": order[719 : 719 + s["ner_train"]]}
    if s["corpus_lines"] is not None:
        ner["test"] = ner["test"][: s["sentiment_test"]]
    for name, idx in ner.items():
        text = "\n\n".join(
            "\n".join(f"{w}\t{t}" for w, t in zip(sents[i].words, sents[i].tags)) for i in idx
        )
        (work / f"ner_{name}.conll").write_text(text + "\n", encoding="utf-8")
    reviews = fetch("chinese-reviews")
    zh_rows = {}
    for name, size in (("train", s["zh_train"]), ("test", s["zh_test"])):
        rows = read_table(reviews / f"{name}.jsonl")
        order = np.random.default_rng(0).permutation(len(rows))
        zh_rows[name] = write_csv(work / f"zh_{name}.csv", [rows[i] for i in order[:size]])
    distill_rows = sent_train[: s["distill_train"]]  # the low-resource set distillation needs
    knowledge = s["knowledge"]
    if knowledge == "toy":
        knowledge = work / "toy_knowledge.tsv"
        knowledge.write_text("good\tis a\tfeeling\nflight\tis a\ttrip\nbad\tsynonym\tpoor\n")
    return {
        "knowledge": knowledge,
        "distill_train": write_csv(work / "sent_distill.csv", distill_rows),
        "en": {"corpus": en, "eval_corpus": en_eval, "tokenizer": tok},
        "zh": {"corpus": zh, "eval_corpus": zh_eval, "tokenizer": fetch("bert-base-chinese-vocab")},
        "sentiment": (write_csv(work / "sent_train.csv", sent_train),
                      write_csv(work / "sent_test.csv", sent_test)),
        "ner": (work / "ner_train.conll", work / "ner_test.conll"),
        "zh_reviews": (zh_rows["train"], zh_rows["test"]),
        "rows": {"sentiment": [len(sent_train), len(sent_test)], "distill": len(distill_rows),
                 "ner": [len(ner["train"]), len(ner["test"])], "zh_reviews": [*map(len, (
                     read_table(zh_rows["train"]), read_table(zh_rows["test"])))]},
    }  # fmt: skip


# ---------------------------------------------------------------- one arm × seed


def is_main() -> bool:
    """Rank 0 of a torchrun study, or a study of one process (the one that writes the JSON)."""
    import torch.distributed as dist

    return not dist.is_initialized() or dist.get_rank() == 0


def sync() -> None:
    """Wait for every rank of a torchrun study (nothing without one)."""
    import torch.distributed as dist

    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


def clear(path: Path) -> None:
    """Remove ``path`` (a run is always fresh) on rank 0, every rank waiting for it."""
    if is_main():
        shutil.rmtree(path, ignore_errors=True)
    sync()


def electra_steps(s: dict[str, Any], tok_dir: Path, generator_size: float = 0.25) -> dict:
    """RTD steps whose training FLOPs equal ``s["steps"]`` MLM steps (FlopCounterMode, one
    forward + backward of each objective on a full batch; electra_vs_mlm.step_flops)."""
    sys.path.insert(0, str(Path(__file__).parent))
    from electra_vs_mlm import step_flops

    from bertfamily.config import EncoderConfig
    from bertfamily.recipes.common import config_for_tokenizer
    from bertfamily.tokenization import load_tokenizer

    config = config_for_tokenizer(
        EncoderConfig.from_preset("tiny-electra", **model_overrides(s)),
        load_tokenizer(tok_dir),
        s["max_length"],
        pair_head=None,
    )
    flops = step_flops(config, generator_size, batch_size=s["batch"], length=s["max_length"])
    return {"flops_per_step": flops, "steps": round(s["steps"] * flops["mlm"] / flops["rtd"])}


def run_arm(arm: str, seed: int, data: dict, s: dict, work: Path, device: str, rtd: dict):
    """Pretrain ``arm`` with ``seed``, fine-tune the saved model on the downstream tasks of
    its language with the same seed; returns its metrics and times."""
    from bertfamily.recipes.pretrain import PretrainConfig, pretrain
    from bertfamily.train import TrainConfig

    sw = resolved(arm)
    if any(sw[k] != BASELINE[k] for k in DOWNSTREAM):
        return run_downstream(arm, seed, data, s, work, device)
    lang = data[sw["language"]]
    out = work / f"{arm}-{seed}"
    clear(out)  # a fresh run, never a resumed one
    steps = rtd["steps"] if sw["objectives"] == ("rtd",) else s["steps"]
    t0 = time.time()
    summary = pretrain(
        PretrainConfig(
            corpus=lang["corpus"],
            eval_corpus=lang["eval_corpus"],
            tokenizer=lang["tokenizer"],
            overrides=model_overrides(s),
            max_length=s["max_length"],
            eval_batches=s["eval_batches"],
            **pretrain_fields(sw),
        ),
        TrainConfig(
            output_dir=out, max_steps=steps, batch_size=s["batch"], learning_rate=s["lr"],
            warmup_ratio=0.1, schedule="linear", log_every=0, eval_every=0, save_every=0,
            progress=False, device=device, seed=seed,
        ),
    )  # fmt: skip
    sync()  # rank 0 has saved the model
    ev = summary.get("eval") or {}
    metrics: dict[str, float] = {}
    if "rtd" not in sw["objectives"]:  # RTD: eval_accuracy is the discriminator's
        metrics["mlm_acc"] = ev["eval_accuracy"]
    record: dict[str, Any] = {"pretrain_steps": summary["step"], "eval": ev}
    record["pretrain_seconds"] = round(time.time() - t0, 1)
    t1 = time.time()
    for name in ("sentiment", "ner") if sw["language"] == "en" else ("zh_reviews",):
        metrics.update(finetune_task(name, out, data, s, device, seed))
    record["finetune_seconds"] = round(time.time() - t1, 1)
    record["metrics"] = with_mean(metrics)
    return record


def run_downstream(arm: str, seed: int, data: dict, s: dict, work: Path, device: str) -> dict:
    """A fine-tuning arm (a `DOWNSTREAM` switch) on the baseline's saved run of ``seed``:
    tweet sentiment with the baseline's budget (``ft_steps``, ``ft_lr``, ``ft_batch``, the
    seed), changed in its one switch:

    - ``knowledge``: K-BERT fine-tuning and prediction with the graph injected (WordNet 3.0,
      138,589 entities; the toy study a three-triple file);
    - ``self_distill``: FastBERT: the same fine-tuning, then ``ft_steps`` steps of
      self-distillation of the students (training texts, labels unread); test accuracy at
      `FASTBERT_SPEEDS` with the mean exit layer; ``sentiment_acc`` is the one at
      `FASTBERT_SPEED`, ``sentiment_acc_full`` the full model's;
    - ``task_distill``: TinyBERT task distillation of the baseline's fine-tuned sentiment model
      (the teacher) into a 1-layer student (teacher layer 1 copied, fresh head) on the first
      ``distill_train`` training rows, ``ft_steps`` intermediate + ``ft_steps`` prediction
      steps; ``augment`` adds TinyBERT's augmentation (p_t 0.4, N_a 20, K 15; masked-LM
      candidates from the baseline's pretrained model) of those rows.

    Raises:
        FileNotFoundError: the baseline run of ``seed`` is not under ``work`` (run it first).
    """
    from bertfamily.data.augment import AugmentConfig
    from bertfamily.data.task_data import TaskOptions
    from bertfamily.recipes.distill import TaskDistillConfig, distill_task
    from bertfamily.recipes.finetune import FinetuneConfig, finetune, predict
    from bertfamily.train import TrainConfig

    sw, base = resolved(arm), work / f"baseline-{seed}"
    teacher = base / "ft-sentiment" / "model"
    if not (teacher / "config.json").exists():
        raise FileNotFoundError(f"{teacher}: run the baseline arm of seed {seed} first")
    out = work / f"{arm}-{seed}"
    clear(out)
    opts = TaskOptions(max_length=s["max_length"], eval_batch_size=128)
    train_file, test_file = data["sentiment"]
    train = TrainConfig(
        output_dir=out, max_steps=s["ft_steps"], batch_size=s["ft_batch"],
        learning_rate=s["ft_lr"], warmup_ratio=0.1, schedule="linear", log_every=0,
        eval_every=0, save_every=0, progress=False, device=device, seed=seed,
    )  # fmt: skip
    t0, record, metrics = time.time(), {}, {}
    if sw["task_distill"]:
        augment = AugmentConfig() if sw["augment"] else None
        cfg = TaskDistillConfig(
            teacher, data["distill_train"], student=None, max_length=s["max_length"],
            intermediate_steps=s["ft_steps"], prediction_steps=s["ft_steps"],
            augment=augment, augment_model=base / "model" if augment else None,
        )  # fmt: skip
        summary = distill_task(cfg, train)
        sync()
        record["distill"] = {k: summary[k] for k in ("examples", "parameters", "augmentation")
                             if k in summary}  # fmt: skip
        _, test = predict("classify", out / "model", test_file, opts, labelled=True)
        metrics["sentiment_acc"] = test["accuracy"]
    else:
        knowledge = None
        if sw["knowledge"]:
            from bertfamily.data.knowledge import load_knowledge

            knowledge = load_knowledge(data["knowledge"])
            record["knowledge_entities"] = len(knowledge)
        finetune(
            FinetuneConfig("classify", base / "model", train_file, None, opts, epochs=None,
                           self_distill=sw["self_distill"], knowledge=knowledge),
            train,
        )  # fmt: skip
        sync()
        _, test = predict("classify", out / "model", test_file, opts, labelled=True,
                          knowledge=knowledge)  # fmt: skip
        metrics["sentiment_acc"] = test["accuracy"]
        if sw["self_distill"]:
            metrics["sentiment_acc_full"] = metrics["sentiment_acc"]
            record["speeds"] = {}
            for speed in FASTBERT_SPEEDS:
                _, at = predict("classify", out / "model", test_file, opts, labelled=True,
                                speed=speed)  # fmt: skip
                record["speeds"][str(speed)] = {
                    "accuracy": at["accuracy"], "mean_exit_layer": at["mean_exit_layer"],
                }  # fmt: skip
            metrics["sentiment_acc"] = record["speeds"][str(FASTBERT_SPEED)]["accuracy"]
            metrics["mean_exit_layer"] = record["speeds"][str(FASTBERT_SPEED)]["mean_exit_layer"]
            layers = s["layers"]  # the layers an exit saved, on average (0: no text exited)
            metrics["layers_saved"] = layers - metrics["mean_exit_layer"]
    record["finetune_seconds"] = round(time.time() - t0, 1)
    record["metrics"] = metrics
    return record


def with_mean(metrics: dict[str, float]) -> dict[str, float]:
    """``metrics`` with ``mean_downstream``: the mean of the task scores it holds (tweet
    accuracy and NER entity F1, or Chinese review accuracy)."""
    down = [metrics[m] for m in ("sentiment_acc", "ner_f1", "zh_acc") if m in metrics]
    return {**metrics, "mean_downstream": sum(down) / len(down)}


def finetune_task(name: str, run: Path, data: dict, s: dict, device: str, seed: int) -> dict:
    """Fine-tune the saved model ``run/model`` on task ``name`` (sentiment, ner, zh_reviews)
    with ``seed`` into ``run/ft-<name>`` and return its test metrics: ``sentiment_acc`` /
    ``zh_acc`` (accuracy), or for NER ``ner_f1`` (entity F1) and ``ner_token_f1``
    (`entity_token_f1`). NER trains ``ner_ft_steps`` at ``ner_ft_lr``, the others
    ``ft_steps`` at ``ft_lr``; batch ``ft_batch``, 10 % warm-up, linear decay."""
    from bertfamily.data.task_data import TaskOptions
    from bertfamily.recipes.finetune import FinetuneConfig, finetune, predict
    from bertfamily.train import TrainConfig

    task = "ner" if name == "ner" else "classify"
    ner = task == "ner"
    steps, lr = (s["ner_ft_steps"], s["ner_ft_lr"]) if ner else (s["ft_steps"], s["ft_lr"])
    opts = TaskOptions(max_length=s["max_length"], eval_batch_size=128)
    train_file, test_file = data[name]
    ft_dir = run / f"ft-{name}"
    clear(ft_dir)
    finetune(
        FinetuneConfig(task, run / "model", train_file, None, opts, epochs=None),
        TrainConfig(
            output_dir=ft_dir, max_steps=steps, batch_size=s["ft_batch"], learning_rate=lr,
            warmup_ratio=0.1, schedule="linear", log_every=0, eval_every=0, save_every=0,
            progress=False, device=device, seed=seed,
        ),
    )  # fmt: skip
    sync()
    preds, test = predict(task, ft_dir / "model", test_file, opts, labelled=True)
    if task == "ner":
        return {"ner_f1": test["f1"], "ner_token_f1": entity_token_f1(preds)}
    return {"zh_acc" if name == "zh_reviews" else "sentiment_acc": test["accuracy"]}


def entity_token_f1(rows: list[dict]) -> float:
    """Token-level F1 of the entity words: micro-averaged over the words whose gold or
    predicted tag is an entity tag, a word counting as a true positive when its predicted
    entity type equals the gold one (the B-/I- prefix dropped, so a span found with a wrong
    boundary still earns its correct words). ``rows``: `predict`'s CoNLL rows (``tags``,
    ``gold``: one tag per word). 0.0 when no word is a true positive.

    This study's measure (not a standard of the WNUT task, whose metric is entity F1, the
    ``ner_f1``): it gives partial credit to models too small to get whole entities right."""
    tp = fp = fn = 0
    for row in rows:
        for pred, gold in zip(row["tags"], row["gold"]):
            p, g = pred.split("-", 1)[-1], gold.split("-", 1)[-1]  # "O" stays "O"
            if p != "O" and p == g:
                tp += 1
                continue
            fp += p != "O"
            fn += g != "O"
    return 2 * tp / (2 * tp + fp + fn) if tp else 0.0


# ---------------------------------------------------------------- statistics and table


def compare(result: dict) -> dict[str, dict]:
    """Per arm: per metric, mean ± std over seeds; against a reference of the same language,
    the paired difference (arm − reference over the seeds both have) and its two-sided paired
    t-test p-value; the claim's verdict on its primary metric (rule in `RULE`)."""
    from scipy.stats import ttest_rel

    runs = result["runs"]
    table = {}
    for arm, (reference, _) in ARMS.items():
        if arm not in runs:
            continue
        row: dict[str, Any] = {"reference": reference, "seeds": sorted(runs[arm], key=int)}
        for m in METRICS + DOWNSTREAM_METRICS:
            vals = [r["metrics"][m] for r in runs[arm].values() if m in r["metrics"]]
            if not vals:
                continue
            cell = {"mean": statistics.fmean(vals), "std": statistics.pstdev(vals)}
            ref = runs.get(reference, {})
            both = [k for k in runs[arm] if k in ref and m in ref[k]["metrics"]]
            # a language switch changes the tasks: nothing to pair (zh_baseline vs baseline)
            same_tasks = reference and resolved(arm)["language"] == resolved(reference)["language"]
            if same_tasks:
                a = [runs[arm][k]["metrics"][m] for k in both]
                b = [ref[k]["metrics"][m] for k in both]
                if len(both) >= 2:
                    diff = statistics.fmean(x - y for x, y in zip(a, b))
                    p = float(ttest_rel(a, b).pvalue) if any(x != y for x, y in zip(a, b)) else 1.0
                    cell.update(diff=diff, p=p if p == p else 1.0, paired=len(both))
                    cell["constant"] = len(set(a + b)) == 1  # e.g. F1 = 0 everywhere
            row[m] = cell
        if arm in CLAIMS:
            claim, metric, sign = CLAIMS[arm]
            cell = row.get(metric, {})
            verdict = "too few seeds"
            if "p" in cell:
                verdict = "no signal" if cell["constant"] else "within noise"
                saved = [r["metrics"].get("layers_saved") for r in runs[arm].values()]
                if sign == 0 and all(x == 0 for x in saved):
                    verdict = "no signal"  # nothing exited early: the claim was not exercised
                elif sign == 0:  # a claim of no loss
                    lower = cell["p"] < ALPHA and cell["diff"] < 0
                    verdict = "contradicted" if lower else "reproduces"
                elif cell["p"] < ALPHA:
                    same = (cell["diff"] > 0) == (sign > 0)
                    verdict = "reproduces" if same else "contradicted"
            row["claim"] = {"text": claim, "metric": metric, "sign": sign, "verdict": verdict}
        table[arm] = row
    return table


def _cell(c: dict | None, percent: bool = True) -> str:
    if not c:
        return "–"
    k = 100 if percent else 1
    text = f"{c['mean'] * k:.1f} ± {c['std'] * k:.1f}"
    if "diff" in c:
        text += f" ({c['diff'] * k:+.1f}, p={c['p']:.2f})"
    return text


def is_downstream(arm: str) -> bool:
    """Whether ``arm`` changes a fine-tuning switch (`DOWNSTREAM`) and pretrains nothing."""
    sw = resolved(arm)
    return any(sw[k] != BASELINE[k] for k in DOWNSTREAM)


def render_table(result: dict) -> str:
    """The Markdown tables of docs/ablations.md from the study's JSON: per arm, mean ± std
    over seeds (in %) of each metric, with (difference to the reference, paired-t p), and
    the claim's verdict; the pretraining arms first, then the fine-tuning arms (`DOWNSTREAM`:
    tweet accuracy, FastBERT's full-model accuracy and mean exit layer, in layers)."""
    head = (
        "| arm | vs | MLM acc | tweet acc | WNUT F1 | WNUT token F1 | zh reviews acc "
        "| mean downstream | claim (primary metric) | verdict |\n"
        "|---|---|---|---|---|---|---|---|---|---|\n"
    )
    down_head = (
        "| fine-tuning arm | vs | switch | tweet acc | full model acc | mean exit layer "
        "| claim (primary metric) | verdict |\n"
        "|---|---|---|---|---|---|---|---|\n"
    )
    lines, down = [], []
    for arm, row in result["table"].items():
        claim = row.get("claim")
        end = (
            f" | {claim['text'] + ' (' + claim['metric'] + ')' if claim else '–'}"
            + f" | {claim['verdict'] if claim else '–'} |"
        )
        if arm in ARMS and is_downstream(arm):
            (switch,) = ARMS[arm][1].items()
            cells = [_cell(row.get("sentiment_acc")), _cell(row.get("sentiment_acc_full")),
                     _cell(row.get("mean_exit_layer"), percent=False)]  # fmt: skip
            down.append(
                f"| {arm} | {row['reference']} | {switch[0]}={switch[1]} | "
                + " | ".join(cells)
                + end
            )
            continue
        cells = [_cell(row.get(m)) for m in METRICS]
        lines.append(f"| {arm} | {row['reference'] or '–'} | " + " | ".join(cells) + end)
    text = head + "\n".join(lines) + "\n"
    if down:
        text += "\n" + down_head + "\n".join(down) + "\n"
    return text


def page_table(page: str) -> str:
    """The table between the markers of docs/ablations.md (without the blank lines that
    Markdown wants around it)."""
    return page.split(TABLE_START, 1)[1].split(TABLE_END, 1)[0].strip("\n") + "\n"


def write_page_table(result: dict, page: Path = PAGE) -> None:
    """Replace the table between the markers of ``page`` by the one ``result`` renders."""
    text = page.read_text(encoding="utf-8")
    head, rest = text.split(TABLE_START, 1)
    tail = rest.split(TABLE_END, 1)[1]
    table = render_table(result)
    page.write_text(f"{head}{TABLE_START}\n\n{table}\n{TABLE_END}{tail}", encoding="utf-8")


# ---------------------------------------------------------------- main


def machine() -> dict[str, Any]:
    import torch
    from machine import cpu_model

    import bertfamily

    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "bertfamily": getattr(bertfamily, "__version__", "unknown"),
    }


def redo_ner(args, argv, arms: list[str], seeds: list[int], data: dict, s: dict) -> dict:
    """``--only-task ner``: fine-tune NER again (``ner_ft_steps``, ``ner_ft_lr`` of the
    current `SIZES`) from the pretrained ``model/`` that a study's runs left in ``--work``
    (``<arm>-<seed>/``), without pretraining again. Writes to ``--out`` the study ``--base``
    restricted to ``arms``, each run's NER metrics (and mean downstream) replaced, the sizes
    updated and ``ner_rerun`` (command, machine, budget, seconds); join it with the base by
    ``--merge BASE OUT``.

    Raises:
        FileNotFoundError: a run's saved model is not under ``--work``.
    """
    base = json.loads(args.base.read_text())
    command = " ".join(["python", "benchmarks/ablations.py", *(argv or sys.argv[1:])])
    budget = {k: s[k] for k in ("ner_ft_steps", "ner_ft_lr", "ft_batch", "max_length")}
    result = {**base, "sizes": {**base["sizes"], **budget}, "runs": {}}
    result["ner_rerun"] = {"command": command, "machine": machine(), "budget": budget}
    start = time.time()
    for seed in seeds:
        for arm in arms:
            run = args.work / f"{arm}-{seed}"
            if not (run / "model" / "config.json").exists():
                raise FileNotFoundError(f"{run}/model: no saved pretrained model to fine-tune")
            t0 = time.time()
            metrics = finetune_task("ner", run, data, s, args.device, seed)
            rec = dict(base["runs"][arm][str(seed)])
            rec["metrics"] = with_mean({**rec["metrics"], **metrics})
            rec["ner_finetune_seconds"] = round(time.time() - t0, 1)
            result["runs"].setdefault(arm, {})[str(seed)] = rec
            result["table"] = compare(result)
            result["ner_rerun"]["total_seconds"] = round(time.time() - start, 1)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(result, indent=1, default=list) + "\n")
            print(arm, seed, json.dumps(metrics), rec["ner_finetune_seconds"], flush=True)
    return result


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--toy", action="store_true", help="tiny sizes, seconds (the CI test)")
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies width and steps")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--arms", default=",".join(ARMS), help="comma-separated subset of ARMS")
    ap.add_argument("--device", default="cpu", help="cpu | cuda (several: torchrun, DDP)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--work", type=Path, default=Path("/tmp/ablations"))
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--resume", action="store_true", help="keep the runs already in --out")
    ap.add_argument("--render", action="store_true", help="only rewrite the page's table")
    ap.add_argument("--merge", type=Path, nargs="+", help="join the runs of these JSONs")
    ap.add_argument("--only-task", choices=["ner"], help="redo only this fine-tune (see main)")
    ap.add_argument("--base", type=Path, default=OUT, help="--only-task: the study to redo")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).parent))
    if args.merge:  # studies split over processes (disjoint --arms): one JSON, one table
        parts = [json.loads(p.read_text()) for p in args.merge]
        runs: dict[str, Any] = {}
        for part in parts:  # a later part's arms replace an earlier part's
            runs.update(part["runs"])
        result = {**parts[-1], "runs": runs}  # the last part's sizes and setup
        keys = ("command", "machine", "tokenizer_sha256", "total_seconds", "parts", "ner_rerun")
        result["parts"] = [{k: p[k] for k in keys if k in p} for p in parts]
        result["table"], result["rule"] = compare(result), RULE
        result["command"] = " ".join(["python", "benchmarks/ablations.py", *(argv or sys.argv[1:])])
        result["total_seconds"] = max(p["total_seconds"] for p in parts)  # ran side by side
        args.out.write_text(json.dumps(result, indent=1, default=list) + "\n")
        return result
    if args.render:
        result = json.loads(args.out.read_text())
        write_page_table(result)
        return result
    import torch

    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(args.threads)
    arms = [a for a in args.arms.split(",") if a]
    unknown = set(arms) - set(ARMS)
    if unknown:
        ap.error(f"unknown arms {sorted(unknown)}; known: {list(ARMS)}")
    arms.sort(key=list(ARMS).index)  # the baseline before the arms that fine-tune its model
    seeds = [int(x) for x in args.seeds.split(",")]
    s = sizes(args.toy, args.scale)
    start = time.time()
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # under torchrun: one group for the study
        from bertfamily.train.distributed import broadcast_object, init_distributed

        init_distributed(args.device)
        data = prepare_data(args.work, s) if is_main() else None
        data = broadcast_object(data)
    else:
        data = prepare_data(args.work, s)
    if args.only_task:
        english = [a for a in arms if resolved(a)["language"] == "en" and not is_downstream(a)]
        return redo_ner(args, argv, english, seeds,
                        data, s)  # fmt: skip
    rtd = electra_steps(s, data["en"]["tokenizer"])
    result: dict[str, Any] = {
        "script": "benchmarks/ablations.py",
        "command": " ".join(["python", "benchmarks/ablations.py", *(argv or sys.argv[1:])]),
        "machine": machine(),
        "sizes": s,
        "model": model_overrides(s),
        "preset": "bert-tiny (MLM arms), tiny-electra (RTD), with the model's overrides",
        "corpora": {"en": [*ENGLISH_TRAIN], "en_eval": [*ENGLISH_EVAL],
                    "zh": "peoples-daily-1998 pretrain.jsonl", "zh_eval": "heldout.jsonl"},
        "downstream_rows": data["rows"],
        "tokenizer_sha256": hashlib.sha256(
            (data["en"]["tokenizer"] / "tokenizer.json").read_bytes()
        ).hexdigest(),
        "electra": rtd,
        "rule": RULE,
        "arms": {a: {"reference": ARMS[a][0], "overrides": ARMS[a][1], "switches": resolved(a)}
                 for a in ARMS},
        "runs": {},
    }  # fmt: skip
    if args.resume and args.out.exists():
        result["runs"] = json.loads(args.out.read_text()).get("runs", {})
    for seed in seeds:  # seeds outermost: a partial study has every arm at its first seeds
        for arm in arms:
            if str(seed) in result["runs"].get(arm, {}):
                continue
            rec = run_arm(arm, seed, data, s, args.work, args.device, rtd)
            result["runs"].setdefault(arm, {})[str(seed)] = rec
            result["table"] = compare(result)
            result["total_seconds"] = round(time.time() - start, 1)
            if not is_main():
                continue
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(result, indent=1, default=list) + "\n")
            print(arm, seed, json.dumps(rec["metrics"]), rec.get("pretrain_seconds", 0),
                  rec["finetune_seconds"], flush=True)  # fmt: skip
    return result


if __name__ == "__main__":
    main()
