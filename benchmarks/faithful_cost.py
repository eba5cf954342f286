"""What the faithful default costs: MiniLM fp32 embeddings with batch invariance (the default
since issue 42: packed batches, attention per sequence, Linear products in fixed blocks of 64
rows) against the same embedder without it, and sentence-transformers fp32, in one process,
interleaved rounds, medians. Also checks the invariance itself: the vectors of texts embedded
alone against the same texts in the benchmark's batches (rows that differ, bitwise).

    python benchmarks/faithful_cost.py [--rounds 3] [--threads 2] [--busy --output F]

Writes benchmarks/results/faithful_cost.json (``--busy``: one core kept busy by a spinning
process; faithful_cost_busy.json) with the CPU model, thread count and load.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from bertfamily.inference.precision import austen_calibration
from bertfamily.modules.kernels import make_batch_invariant
from bertfamily.pipelines.embedding.embed import SentenceEmbedder
from bertfamily.runtime import cpu_info_field

OUT = Path(__file__).resolve().parent / "results" / "faithful_cost.json"


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2, help="0: the default thread policy")
    ap.add_argument("--lines", type=int, default=512)
    ap.add_argument("--busy", action="store_true", help="keep one core busy while it runs")
    ap.add_argument("--output", type=Path, default=OUT)
    args = ap.parse_args()
    if args.busy:  # a spinning process on one core, as a neighbour would be
        import subprocess
        import sys

        spin = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        run(args)
    finally:
        if args.busy:
            spin.kill()


def run(args: argparse.Namespace) -> None:
    """The interleaved rounds and the invariance check; writes ``args.output``."""
    if args.threads:  # 0: each engine as it runs by default (ours: the load governor)
        torch.set_num_threads(args.threads)
    sentences, queries = austen_calibration()
    sets = {"austen": list(sentences)[: args.lines], "queries": list(queries)[: args.lines]}
    ours = SentenceEmbedder("all-MiniLM-L6-v2", threads=args.threads)
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(ours.path), device="cpu")
    runners = {
        "bertfamily fp32 (default: batch-invariant)": lambda t: ours.encode(t, batch_size=32),
        "bertfamily fp32 (invariance off)": lambda t: ours.encode(t, batch_size=32),
        "sentence-transformers fp32": lambda t: st.encode(t, batch_size=32),
    }
    times: dict[str, dict[str, list[float]]] = {k: {s: [] for s in sets} for k in runners}
    for _ in range(args.rounds):
        for name, run in runners.items():
            on = "off" not in name
            make_batch_invariant(ours.model, on)
            make_batch_invariant(ours.dense, on)
            for set_name, texts in sets.items():
                run(texts[:32])  # warm
                times[name][set_name].append(timed(lambda r=run, t=texts: r(t)))
    make_batch_invariant(ours.model, True)
    make_batch_invariant(ours.dense, True)
    check = sets["austen"][:64] + sets["queries"][:64]
    alone = np.stack([ours.encode([t])[0] for t in check])
    batched = ours.encode(check, batch_size=32)
    differ = int((~(alone == batched).all(axis=1)).sum())
    ref = st.encode(check, batch_size=32)
    base = "sentence-transformers fp32"
    rows = {}
    for name in runners:
        rows[name] = {}
        for set_name, texts in sets.items():
            med = statistics.median(times[name][set_name])
            ref_med = statistics.median(times[base][set_name])
            rows[name][set_name] = {
                "texts_per_s": round(len(texts) / med, 1),
                "x_sentence_transformers": round(ref_med / med, 3),
            }
    result = {
        "cpu": cpu_info_field("model name") or platform.processor(),
        "threads": args.threads,
        "rounds": args.rounds,
        "lines": args.lines,
        "one_core_busy": args.busy,
        "rows": rows,
        "invariant_vs_off": {
            s: round(
                statistics.median(times["bertfamily fp32 (invariance off)"][s])
                / statistics.median(times["bertfamily fp32 (default: batch-invariant)"][s]),
                3,
            )
            for s in sets
        },
        "rows_differing_alone_vs_batched_bitwise": differ,
        "max_abs_diff_to_sentence_transformers": float(np.abs(batched - ref).max()),
        "load_average": list(np.round(np.array(__import__("os").getloadavg()), 2)),
    }
    args.output.parent.mkdir(exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
