"""How much an MLM uses its context: masked-token accuracy on held-out text with the unmasked
context as written and with it shuffled (README "Acceptance run", the "shuffled context"
figure).

    nice -n 10 python benchmarks/shuffled_context.py            # train, then measure
    python benchmarks/shuffled_context.py --model runs/x/model   # measure a trained model

Training (skipped with ``--model``): the README's run A recipe — bert-tiny (L=2, H=128) with
MLM + NSP, 64-token instances, batch 32, ``--lr 3e-3 --schedule inverse_sqrt``, an 8,000-token
WordPiece tokenizer — on five Austen novels, Persuasion left out entirely, for ``--max-steps``
steps (run A trained 3,123 steps on all six novels under a 23-minute budget).

Measurement: Persuasion as 64-token packed instances (FULL-SENTENCES), masked once (15%,
80/10/10, seed 0); top-1 accuracy at the masked positions (1) as is, (2) with the tokens of the
unmasked, non-special positions of each sequence permuted among themselves (seed 0; masked
positions, [CLS] and [SEP] stay in place), and the unigram baseline (the most frequent token
of the training novels). A model that reads its context loses much accuracy under (2); one that
mostly predicts frequent tokens loses little.

Writes benchmarks/results/shuffled_context.json.
"""

from __future__ import annotations

import argparse
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

import bertfamily as bf
from bertfamily.data.batching import IGNORE_INDEX
from bertfamily.data.corpora import read_documents
from bertfamily.objectives.instances import SpecialIds
from bertfamily.objectives.masking import MaskingConfig
from bertfamily.objectives.pretraining import (
    MLMCollator,
    build_instances,
    static_maskings,
    tokenize_documents,
    unigram_log_probs,
)
from bertfamily.recipes.pretrain import PretrainConfig, pretrain
from bertfamily.resources.cache import fetch
from bertfamily.tokenization import load_tokenizer
from bertfamily.tokenization.training import train_tokenizer
from bertfamily.train import TrainConfig

TRAIN_NOVELS = (
    "emma",
    "mansfield_park",
    "northanger_abbey",
    "pride_and_prejudice",
    "sense_and_sensibility",
)
HELD_OUT = "persuasion"
MAX_LENGTH, BATCH = 64, 32


def train(work: Path, corpus: list[Path], steps: int) -> Path:
    """Run A's recipe for ``steps`` steps; returns the model directory."""
    train_tokenizer(corpus, "wordpiece", 8000, output_dir=work / "tokenizer")
    pretrain(
        PretrainConfig(
            corpus=corpus, tokenizer=work / "tokenizer", preset="bert-tiny", max_length=MAX_LENGTH
        ),
        TrainConfig(
            output_dir=work / "run",
            max_steps=steps,
            batch_size=BATCH,
            learning_rate=3e-3,
            schedule="inverse_sqrt",
            warmup_ratio=0.1,
            log_every=200,
            eval_every=0,
            progress=False,
            device="cpu",
            seed=0,
        ),
    )
    return work / "run" / "model"


def instances(paths: list[Path], tok, seed: int):
    docs = [d for p in paths for d in read_documents(p)]
    special = SpecialIds(cls=tok.cls_token_id, sep=tok.sep_token_id)
    return build_instances(tokenize_documents(docs, tok), "packed", MAX_LENGTH, special, seed)


def shuffle_context(batch: dict[str, torch.Tensor], special: set[int], rng) -> torch.Tensor:
    """(B, T) input_ids with the unmasked, non-special real tokens of each row permuted among
    their own positions."""
    ids = batch["input_ids"].clone()
    for b in range(ids.shape[0]):
        keep = (
            (batch["attention_mask"][b] == 1)
            & (batch["labels"][b] == IGNORE_INDEX)
            & ~torch.isin(ids[b], torch.tensor(sorted(special)))
        )
        pos = keep.nonzero().squeeze(-1)
        ids[b, pos] = ids[b, pos[torch.from_numpy(rng.permutation(len(pos)))]]
    return ids


@torch.no_grad()
def measure(model_dir: Path, train_paths: list[Path], held_out: Path) -> dict:
    tok = load_tokenizer(model_dir)
    model = bf.from_pretrained(model_dir).eval()  # with its pair head, if any (unused)
    inst = instances([held_out], tok, seed=1)
    common = dict(
        vocab_size=tok.vocab_size, mask_token_id=tok.mask_token_id, special_ids=tok.all_special_ids
    )
    masking = MaskingConfig(strategy="token")
    fixed = static_maskings(inst, masking, 1, seed=0, **common)
    collate = MLMCollator(masking, pad_token_id=tok.pad_token_id, **common)
    batches = [collate(fixed[i : i + BATCH], None) for i in range(0, len(fixed), BATCH)]
    unigram = unigram_log_probs(instances(train_paths, tok, 0), tok.vocab_size, tok.all_special_ids)
    top = int(unigram.argmax())
    rng = np.random.default_rng(0)
    special = {tok.cls_token_id, tok.sep_token_id, tok.pad_token_id}
    hits = {"context": 0, "shuffled_context": 0, "unigram": 0}
    total = 0
    for batch in batches:
        sel = batch["labels"] != IGNORE_INDEX
        y = batch["labels"][sel]
        for name, ids in (
            ("context", batch["input_ids"]),
            ("shuffled_context", shuffle_context(batch, special, rng)),
        ):
            types = batch["token_type_ids"] if model.config.type_vocab_size else None
            logits = model(ids, batch["attention_mask"], types, masked_positions=sel).logits
            hits[name] += int((logits.argmax(-1) == y).sum())
        hits["unigram"] += int((y == top).sum())
        total += len(y)
    return {
        "masked_tokens": total,
        "sequences": len(fixed),
        "accuracy": {k: v / total for k, v in hits.items()},
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, help="a trained MLM model directory (skip training)")
    p.add_argument("--max-steps", type=int, default=1000)
    p.add_argument("--work", type=Path, default=Path("/tmp/shuffled_context"))
    p.add_argument("--threads", type=int, default=1)
    p.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "shuffled_context.json"
    )
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(args.threads)
    start = time.time()
    austen = fetch("janeausten")
    corpus = [austen / f"{n}.txt" for n in TRAIN_NOVELS]
    held_out = austen / f"{HELD_OUT}.txt"
    model_dir = args.model or train(args.work, corpus, args.max_steps)
    train_seconds = time.time() - start
    result = measure(model_dir, corpus, held_out)
    acc = result["accuracy"]
    result.update(
        script="benchmarks/shuffled_context.py",
        command=" ".join(["python", *sys.argv]),
        model=str(model_dir) if args.model else "bert-tiny, run A recipe (MLM + NSP)",
        max_steps=None if args.model else args.max_steps,
        train_seconds=round(train_seconds, 1),
        train_corpus=[p.name for p in corpus],
        held_out=held_out.name,
        tokenizer_sha256=hashlib.sha256((model_dir / "tokenizer.json").read_bytes()).hexdigest(),
        accuracy_drop=acc["context"] - acc["shuffled_context"],
        machine={
            "cpu": cpu_model(),
            "torch_threads": torch.get_num_threads(),
            "python": platform.python_version(),
            "torch": torch.__version__,
        },
        total_seconds=round(time.time() - start, 1),
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"masked-token accuracy on {held_out.name}: {acc['context']:.4f} with context, "
        f"{acc['shuffled_context']:.4f} shuffled, unigram {acc['unigram']:.4f} "
        f"({result['masked_tokens']} tokens); wrote {args.out}"
    )


if __name__ == "__main__":
    main()
