"""How long OpenMP threads spin for work before they sleep (libgomp's ``GOMP_SPINCOUNT``; 0 is
``OMP_WAIT_POLICY=PASSIVE``), and what it costs or gains: all-MiniLM-L6-v2 through
`SentenceEmbedder` (the default path: fp32, batch-invariant) on three workloads — short queries
one at a time (batch 1), 128 sixteen-token texts in batches of 32, 300 Austen lines in batches
of 32 — idle, and with one core taken by a spinning process (``python -c "while True: pass"``)
both under the default thread governor and at a fixed 2 threads.

Each (spin count, phase) runs in a fresh process (libgomp reads the variables once, when torch
loads); each workload is timed 3 times, the median kept, in texts/s. Writes
benchmarks/results/wait_policy.json with the CPU, the load average and the ratios to the
passive policy. Run from the repository root: ``python benchmarks/wait_policy.py`` (about 5 min
on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

SPINS = (0, 10000, 30000, 300000)  # 0: passive; 300000: libgomp's default when nothing is set
MODEL = "all-MiniLM-L6-v2"


def worker(threads: int) -> dict[str, float]:
    """Time the three workloads in this process (its environment already set)."""
    import statistics

    from embed import sentence_sets

    from bertfamily.pipelines.embedding.embed import SentenceEmbedder
    from bertfamily.resources.cache import fetch

    austen, queries = sentence_sets(300, 100)
    model = SentenceEmbedder(fetch(MODEL), threads=threads)
    sixteen = [" ".join(["word"] * 14)] * 128  # 16 tokens with [CLS] and [SEP]
    out = {}
    for name, texts, batch in (
        ("queries, batch 1", queries[:50], 1),
        ("16 tokens, batch 32", sixteen, 32),
        ("austen, batch 32", austen, 32),
    ):
        model.encode(texts[:8], batch_size=batch)
        rates = []
        for _ in range(3):
            start = time.perf_counter()
            model.encode(texts, batch_size=batch)
            rates.append(len(texts) / (time.perf_counter() - start))
        out[name] = round(statistics.median(rates), 1)
    return out


def run(spin: int, threads: int) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env["GOMP_SPINCOUNT"] = str(spin)
    if spin == 0:
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    command = [sys.executable, __file__, "--worker", str(threads)]
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(done.stderr[-2000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    from machine import cpu_model

    from bertfamily.files import write_text_atomic

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, default=ROOT / "benchmarks/results/wait_policy.json")
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)  # threads, in a child
    args = parser.parse_args()
    if args.worker is not None:
        print(json.dumps(worker(args.worker)))
        return
    phases = {}
    for phase, threads, busy in (
        ("idle, governed", 0, False),
        ("one core busy, governed", 0, True),
        ("one core busy, 2 threads fixed", 2, True),
    ):
        spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
        try:
            time.sleep(1.0 if busy else 0.0)
            load = os.getloadavg()[0]
            rows = {str(spin): run(spin, threads) for spin in SPINS}
        finally:
            if spinner is not None:
                spinner.kill()
                spinner.wait()
        passive = rows["0"]
        phases[phase] = {
            "load_before": round(load, 2),
            "texts_per_s": rows,
            "ratio_to_passive": {
                s: {k: round(v / passive[k], 2) for k, v in r.items()} for s, r in rows.items()
            },
        }
        print(phase, json.dumps(phases[phase]["ratio_to_passive"]), flush=True)
    result = {
        "benchmark": "benchmarks/wait_policy.py",
        "cpu": cpu_model(),
        "cpus": os.cpu_count(),
        "model": MODEL,
        "spin_counts": list(SPINS),
        "phases": phases,
    }
    write_text_atomic(args.json, json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
