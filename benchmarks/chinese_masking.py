"""Chinese whole-word masking measured over People's Daily (README "Chinese BERT").

    nice -n 10 python benchmarks/chinese_masking.py            # every training sentence

Each sentence of ``pretrain.jsonl`` (`bertfamily fetch peoples-daily-1998`) is tokenized with
the real bert-base-chinese vocabulary (`bertfamily fetch bert-base-chinese-vocab`) and masked
once (seed 0, rate 0.15, 80/10/10) with three sets of units: the corpus's gold words, jieba's
words (`chinese_word_ids`), and single tokens (BERT's original masking, for contrast). For each:
the share of maskable tokens chosen, how the chosen tokens were corrupted, and how many words
(gold words, for every scheme) were partly masked, i.e. some of their characters chosen and
others not. Also: how well jieba's word boundaries agree with the gold ones (precision, recall
and F1 of word spans). Writes ``benchmarks/results/chinese_masking.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np
import torch
from machine import cpu_model  # benchmarks/machine.py

from bertfamily.data.corpora import read_documents
from bertfamily.objectives.masking import MaskingConfig, chinese_word_ids, mask_tokens
from bertfamily.resources.cache import fetch
from bertfamily.tokenization import load_tokenizer

OUT = Path(__file__).parent / "results" / "chinese_masking.json"


def spans_of(word_ids: np.ndarray, offsets) -> set[tuple[int, int]]:
    """Character spans of the words a word-id row describes."""
    spans: dict[int, list[int]] = {}
    for w, (s, e) in zip(word_ids.tolist(), offsets):
        if w >= 0:
            spans.setdefault(w, [s, e])[1] = e
    return {tuple(v) for v in spans.values()}


def measure(sentences, tok, seed: int = 0) -> dict:
    """Masking statistics of the three unit choices over ``sentences`` (`Sentence`s with
    gold ``words``)."""
    rng = {k: np.random.default_rng(seed) for k in ("gold", "jieba", "token")}
    config = {
        "gold": MaskingConfig(strategy="whole_word"),
        "jieba": MaskingConfig(strategy="whole_word"),
        "token": MaskingConfig(strategy="token"),
    }
    stats = {
        k: dict(maskable=0, chosen=0, to_mask=0, to_random=0, unchanged=0, partly=0, words=0)
        for k in config
    }
    agree = dict(gold=0, jieba=0, both=0)
    specials = tok.all_special_ids
    encodings = tok.backend.encode_batch(list(sentences), add_special_tokens=False)
    for text, enc in zip(sentences, encodings):
        if not enc.ids:
            continue
        ids = np.asarray(enc.ids, dtype=np.int64)
        special = np.zeros(len(ids), dtype=bool)
        gold = chinese_word_ids(text, enc.offsets, special, words=text.words)
        jieba = chinese_word_ids(text, enc.offsets, special)
        g, j = spans_of(gold, enc.offsets), spans_of(jieba, enc.offsets)
        agree["gold"] += len(g)
        agree["jieba"] += len(j)
        agree["both"] += len(g & j)
        for name, word_ids in (("gold", gold), ("jieba", jieba), ("token", None)):
            res = mask_tokens(
                ids,
                special,
                config[name],
                rng[name],
                vocab_size=tok.vocab_size,
                mask_token_id=tok.mask_token_id,
                word_ids=word_ids,
                special_ids=specials,
            )
            chosen = res.labels != -100
            s = stats[name]
            s["maskable"] += len(ids)
            s["chosen"] += int(chosen.sum())
            s["to_mask"] += int((res.input_ids[chosen] == tok.mask_token_id).sum())
            s["unchanged"] += int((res.input_ids[chosen] == ids[chosen]).sum())
            # partly masked words are counted against the gold words (the linguistic unit);
            # for jieba also against its own words, which whole-word masking keeps whole
            for units, key in ((gold, "partly"), (word_ids, "partly_own")):
                if units is None:
                    continue
                for w in np.unique(units):
                    c = chosen[units == w]
                    s[key] = s.get(key, 0) + int(c.any() and not c.all())
            s["words"] += len(np.unique(gold))
    out = {}
    for name, s in stats.items():
        s["to_random"] = s["chosen"] - s["to_mask"] - s["unchanged"]
        out[name] = {
            **s,
            "rate": s["chosen"] / s["maskable"],
            "share_mask": s["to_mask"] / s["chosen"],
            "share_random": s["to_random"] / s["chosen"],
            "share_unchanged": s["unchanged"] / s["chosen"],
            "partly_masked_gold_words_share": s["partly"] / s["words"],
        }
    precision = agree["both"] / agree["jieba"]
    recall = agree["both"] / agree["gold"]
    out["jieba_vs_gold_words"] = {
        **agree,
        "precision": precision,
        "recall": recall,
        "f1": 2 * precision * recall / (precision + recall),
    }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=0, help="first N sentences (0: all)")
    args = parser.parse_args()
    tok = load_tokenizer(fetch("bert-base-chinese-vocab"))
    docs = read_documents(fetch("peoples-daily-1998") / "pretrain.jsonl")
    sentences = [s for d in docs for s in d]
    if args.limit:
        sentences = sentences[: args.limit]
    t0 = time.time()
    result = measure(sentences, tok)
    result.update(
        sentences=len(sentences),
        seconds=round(time.time() - t0, 1),
        machine={"cpu": cpu_model(), "threads": torch.get_num_threads()},
        python=platform.python_version(),
    )
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
