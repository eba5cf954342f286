"""The two trained models `retrieval.py` measures, made here because none is reachable offline:

- ``train_cross_encoder``: our own recipe (`recipes.rerank.train_reranker`, the same as
  ``bertfamily finetune --task rerank``) from all-MiniLM-L6-v2 on STS-B **train** pairs with
  label = score / 5 (binary cross-entropy on graded labels, as sentence-transformers' STS-B
  cross-encoder example);
- ``train_splade``: a SPLADE model built with sentence-transformers' ``SparseEncoder``
  (``MLMTransformer`` + ``SpladePooling``, max of log(1 + ReLU(logits))) from all-MiniLM-L6-v2
  with a masked-LM head (decoder tied to the word embeddings; the head is new, initialised by
  `init_mlm_head` so that a token's logits start as the dot products of its last hidden state
  with the word embeddings, a lexical expansion: "guitar" → guitar, guitarist, guitars) and
  trained on the STS-B **train** pairs scored >= 4 with ``SpladeLoss`` (in-batch negatives,
  ``SparseMultipleNegativesRankingLoss``, plus the FLOPS regularisers of Paria et al. 2020 on
  queries and documents). sentence-transformers is a test dependency of bertfamily; the
  directory it saves is read by bertfamily's own `pipelines.sparse.SparseEncoder`.

The retrieval benchmark is derived from the STS-B **test** split. To keep test text out of
training, every training pair that shares a sentence (either side) with the test split is
dropped (`train_rows`): the STS-B splits share some short sentences.

Both are seeded and run on CPU; each writes a ``done.json`` beside the model and is reused
when it exists (delete the directory to train again). Called by `retrieval.py`.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from bertfamily.data.pairs import read_pairs  # noqa: E402
from bertfamily.files import write_text_atomic  # noqa: E402

SEED = 0
#: `init_mlm_head`: logits = ALPHA · LayerNorm(h) · E + BIAS, special tokens BIAS_SPECIAL (about
#: 170 active vocabulary ids per STS-B sentence before training).
ALPHA, BIAS, BIAS_SPECIAL = 1.0, -3.0, -10.0


def init_mlm_head(mlm, tokenizer) -> None:
    """Initialise a new BERT masked-LM head (``cls.predictions``; its decoder is tied to the
    word embeddings E) so that it passes the last hidden state h through: the transform's
    dense layer is 0.01 · I (GELU is then close to linear, and LayerNorm undoes the scale),
    LayerNorm's weight ALPHA and bias 0, the output bias BIAS (BIAS_SPECIAL for the special
    tokens, which every text holds). Then logits ≈ ALPHA · LayerNorm(h) · Eᵀ + BIAS."""
    head = mlm.cls.predictions
    assert head.decoder.weight.data_ptr() == mlm.get_input_embeddings().weight.data_ptr()
    with torch.no_grad():
        head.transform.dense.weight.copy_(0.01 * torch.eye(head.transform.dense.in_features))
        head.transform.dense.bias.zero_()
        head.transform.LayerNorm.weight.fill_(ALPHA)
        head.transform.LayerNorm.bias.zero_()
        head.bias.fill_(BIAS)
        head.bias[tokenizer.all_special_ids] = BIAS_SPECIAL


def train_rows(min_label: float | None = None) -> tuple[list[tuple[str, str, float]], dict]:
    """STS-B train rows (s1, s2, score / 5) sharing no sentence with STS-B test, with counts.

    Args:
        min_label: keep only rows with score / 5 >= this (SPLADE's positive pairs).
    """
    train, test = read_pairs("stsb:train"), read_pairs("stsb:test")
    test_texts = {t.strip() for t in test.column(0) + test.column(1)}

    def shares(r) -> bool:
        return r[0].strip() in test_texts or r[1].strip() in test_texts

    rows = [(a, b, y) for (a, b), y in zip(train.rows, train.labels)]
    kept = [r for r in rows if not shares(r)]
    if min_label is not None:
        kept = [r for r in kept if r[2] >= min_label]
    counts = {
        "stsb_train_rows": len(rows),
        "dropped_sharing_a_test_sentence": sum(map(shares, rows)),
        "rows_used": len(kept),
    }
    return kept, counts


def _done(path: Path, model: str) -> dict | None:
    """The record of a finished run in ``path`` (its model in ``path / model``), or None."""
    f = path / "done.json"
    if not f.is_file():
        return None
    return json.loads(f.read_text()) | {"model": str(path / model)}


def train_cross_encoder(
    out: Path, base: str, epochs: float = 0.25, batch_size: int = 16, learning_rate: float = 5e-5
) -> dict:
    """Train (or reuse) the STS-B cross-encoder in ``out``; returns its record (``model``:
    the directory `Reranker` loads)."""
    done = _done(out, "run/model")
    if done is not None:
        return done
    from bertfamily.recipes.rerank import RerankConfig, train_reranker
    from bertfamily.resources.resolve import resolve_model

    rows, counts = train_rows()
    out.mkdir(parents=True, exist_ok=True)
    data = out / "train.jsonl"
    write_text_atomic(
        data,
        "".join(
            json.dumps({"sentence1": a, "sentence2": b, "score": y}, ensure_ascii=False) + "\n"
            for a, b, y in rows
        ),
    )
    t, cpu = time.perf_counter(), time.process_time()
    cfg = RerankConfig(resolve_model(base), data, loss="bce", max_length=128, epochs=epochs)
    res = train_reranker(
        cfg,
        output_dir=out / "run",
        batch_size=batch_size,
        learning_rate=learning_rate,
        seed=SEED,
        device="cpu",
        eval_every=0,
        progress=False,
    )
    record = {
        "model": str(out / "run" / "model"),
        "recipe": "recipes.rerank.train_reranker (= finetune --task rerank), loss bce",
        "base": base,
        "data": "STS-B train, label = score / 5, pairs sharing a sentence with STS-B test dropped",
        "epochs": epochs,
        "batch_size": batch_size,
        "learning_rate": learning_rate,
        "max_length": 128,
        "seed": SEED,
        "steps": res["train"]["step"],
        "last_logged_train": res["train"]["train"],
        "train_seconds": round(time.perf_counter() - t, 1),
        "train_cpu_seconds": round(time.process_time() - cpu, 1),
        **counts,
    }
    write_text_atomic(out / "done.json", json.dumps(record, indent=2) + "\n")
    return record


def train_splade(
    out: Path,
    base: str,
    epochs: float = 1.0,
    batch_size: int = 32,
    learning_rate: float = 5e-5,
    query_reg: float = 5e-5,
    document_reg: float = 3e-5,
) -> dict:
    """Train (or reuse) the SPLADE model in ``out`` with sentence-transformers (see the module
    docstring); returns its record (``model``: the directory `SparseEncoder` loads)."""
    done = _done(out, "model")
    if done is not None:
        return done
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("WANDB_DISABLED", "true")
    from datasets import Dataset
    from sentence_transformers import (
        SparseEncoder,
        SparseEncoderTrainer,
        SparseEncoderTrainingArguments,
    )
    from sentence_transformers.sparse_encoder.losses import (
        SparseMultipleNegativesRankingLoss,
        SpladeLoss,
    )
    from sentence_transformers.sparse_encoder.modules import MLMTransformer, SpladePooling
    from transformers import set_seed

    from bertfamily.resources.resolve import resolve_model

    rows, counts = train_rows(min_label=0.8)
    set_seed(SEED)
    mlm = MLMTransformer(str(resolve_model(base)), max_seq_length=128)
    init_mlm_head(mlm.auto_model, mlm.tokenizer)
    model = SparseEncoder(modules=[mlm, SpladePooling("max")], device="cpu")
    loss = SpladeLoss(
        model,
        SparseMultipleNegativesRankingLoss(model),
        query_regularizer_weight=query_reg,
        document_regularizer_weight=document_reg,
    )
    data = Dataset.from_dict({"anchor": [r[0] for r in rows], "positive": [r[1] for r in rows]})
    args = SparseEncoderTrainingArguments(
        output_dir=str(out / "trainer"),
        num_train_epochs=epochs,
        per_device_train_batch_size=batch_size,
        learning_rate=learning_rate,
        warmup_ratio=0.1,
        seed=SEED,
        use_cpu=True,
        batch_sampler="no_duplicates",
        logging_steps=10,
        save_strategy="no",
        report_to="none",
        dataloader_num_workers=0,
    )
    t, cpu = time.perf_counter(), time.process_time()
    trainer = SparseEncoderTrainer(model=model, args=args, train_dataset=data, loss=loss)
    trainer.train()
    seconds, cpu = round(time.perf_counter() - t, 1), round(time.process_time() - cpu, 1)
    model.save(str(out / "model"))
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    record = {
        "model": str(out / "model"),
        "built_with": "sentence-transformers "
        + __import__("sentence_transformers").__version__
        + " SparseEncoder(MLMTransformer, SpladePooling('max')), SpladeLoss("
        "SparseMultipleNegativesRankingLoss) + FLOPS regularisers",
        "base": f"{base} + a new masked-LM head (decoder tied to the word embeddings)",
        "head_init": f"dense 0.01·I, LayerNorm weight {ALPHA}, output bias {BIAS} "
        f"(special tokens {BIAS_SPECIAL})",
        "data": "STS-B train pairs with score >= 4 (anchor, positive), pairs sharing a "
        "sentence with STS-B test dropped",
        "epochs": epochs,
        "batch_size": batch_size,
        "learning_rate": learning_rate,
        "query_regularizer_weight": query_reg,
        "document_regularizer_weight": document_reg,
        "seed": SEED,
        "first_logged_loss": losses[0] if losses else None,
        "last_logged_loss": losses[-1] if losses else None,
        "train_seconds": seconds,
        "train_cpu_seconds": cpu,
        "torch_threads": torch.get_num_threads(),
        **counts,
    }
    write_text_atomic(out / "done.json", json.dumps(record, indent=2) + "\n")
    return record
