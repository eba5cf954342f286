"""Which packed-attention strategy embeds fastest: "per_sequence" (one SDPA call per sequence),
"bucketed" (one call per bucket of similar lengths, padded to the bucket's longest) and
"padded" (one masked call on the whole padded batch), on the real all-MiniLM-L6-v2 and real
Austen lines, with 1 and 2 threads, in one process with interleaved rounds.

All three give the same vectors (within 1e-5, tests/core/test_unpad.py); only the time differs.
`SelfAttention.packed_strategy` picks one; the default is the fastest measured here.

    python benchmarks/packed_attention.py            # ~2 min on an idle 2-core machine

Writes benchmarks/results/packed_attention.json (CPU model and flags, load average).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from machine import cpu_flags, cpu_model  # noqa: E402

STRATEGIES = ("per_sequence", "bucketed", "padded")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sentences", type=int, default=400)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--json", type=Path, default=ROOT / "benchmarks/results/packed_attention.json")
    args = p.parse_args()

    from bertfamily.modules.attention import SelfAttention
    from bertfamily.pipelines.embedding.embed import SentenceEmbedder
    from bertfamily.resources.cache import fetch

    lines = (fetch("janeausten") / "austen.txt").read_text(encoding="utf-8").splitlines()
    lines = [t for t in lines if len(t.split()) >= 3]
    texts = lines[:: max(1, len(lines) // args.sentences)][: args.sentences]
    embedder = SentenceEmbedder(fetch("all-MiniLM-L6-v2"), dtype="fp32")
    load_before = os.getloadavg()
    rows: dict[str, dict] = {}
    for threads in (1, 2):
        torch.set_num_threads(threads)
        times: dict[str, list[float]] = {s: [] for s in STRATEGIES}
        for r in range(args.rounds):
            order = STRATEGIES[r % 3 :] + STRATEGIES[: r % 3]  # rotate the order
            for strategy in order:
                SelfAttention.packed_strategy = strategy
                embedder.encode(texts[:64], batch_size=32)  # warm-up
                t0 = time.perf_counter()
                embedder.encode(texts, batch_size=32)
                times[strategy].append(time.perf_counter() - t0)
        rows[f"{threads} thread{'s' if threads > 1 else ''}"] = {
            s: {
                "sentences_per_s": round(len(texts) / statistics.median(t), 1),
                "times_s": [round(x, 3) for x in t],
            }
            for s, t in times.items()
        }
        print(threads, {s: v["sentences_per_s"] for s, v in rows[list(rows)[-1]].items()})
    result = {
        "benchmark": "packed attention strategies",
        "cpu": cpu_model(),
        "cpu_flags": cpu_flags(),
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "model": "all-MiniLM-L6-v2 (real, fetched), fp32, batch 32",
        "sentences": len(texts),
        "rounds": args.rounds,
        "results": rows,
        "ratios per_sequence / bucketed": {
            k: round(v["per_sequence"]["sentences_per_s"] / v["bucketed"]["sentences_per_s"], 3)
            for k, v in rows.items()
        },
        "command": "python benchmarks/packed_attention.py",
    }
    args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result["ratios per_sequence / bucketed"], indent=2))


if __name__ == "__main__":
    main()
