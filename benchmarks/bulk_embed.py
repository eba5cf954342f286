"""Peak memory of `bertfamily embed --input FILE --output DIR` (bulk mode, `pipelines.bulk`) at
two file sizes; with ``--compare``, also the in-memory mode (`--output FILE.npy`) on the same
files, whose peak grows with the file (it shows the measurement can see growth).

The model is a tiny random BERT (H=32, L=2, MiniLM's WordPiece tokenizer), so the run measures
the streaming machinery (reading, tokenizing, shard writes), not a large model's weights; the
vectors are 32-dimensional. Each run is a fresh `python -m bertfamily` process; its peak RSS is
the kernel's ``ru_maxrss`` for that child (`os.wait4`). Lines are synthetic sentences of 3–12
words (seeded).

Writes benchmarks/results/bulk_embed.json with the CPU model and thread count.
Run from the repository root: ``nice -n 10 python benchmarks/bulk_embed.py`` (``--quick``: 2,000
and 20,000 lines).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from machine import cpu_model  # noqa: E402  (benchmarks/machine.py)

from bertfamily.files import write_text_atomic  # noqa: E402

SHARD_SIZE = 5_000
WORDS = (
    "the a model vector corpus shard memory file line stream token batch query index search "
    "river cat music coffee train night city green quickly under over because although"
).split()


def write_corpus(path: Path, lines: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as fh:
        for _ in range(lines):
            fh.write(" ".join(rng.choices(WORDS, k=rng.randint(3, 12))) + ".\n")


def tiny_model(path: Path) -> Path:
    import torch

    import bertfamily as bf
    from bertfamily.resources.cache import fetch

    minilm = fetch("all-MiniLM-L6-v2")
    config = bf.EncoderConfig.from_preset(
        "tiny-bert", vocab_size=30522, max_position_embeddings=512
    )
    torch.manual_seed(0)
    bf.build_model(config).save_pretrained(path)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"):
        if (minilm / name).exists():
            shutil.copy(minilm / name, path / name)
    return path


def run(args: list[str], threads: int) -> dict:
    """One `python -m bertfamily` child: wall time and its own peak RSS (MiB)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": str(threads)}
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "bertfamily", *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    stderr = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"bertfamily {' '.join(args)} failed:\n{stderr}")
    return {"wall_s": round(wall, 1), "peak_rss_mib": round(usage.ru_maxrss / 1024, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2,000 and 20,000 lines")
    parser.add_argument("--compare", action="store_true", help="also the in-memory .npy mode")
    parser.add_argument("--json", type=Path, default=ROOT / "benchmarks/results/bulk_embed.json")
    args = parser.parse_args()
    sizes = (2_000, 20_000) if args.quick else (20_000, 200_000)
    threads = min(2, os.cpu_count() or 1)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model = tiny_model(tmp / "model")
        for n in sizes:
            corpus = tmp / f"corpus-{n}.txt"
            write_corpus(corpus, n)
            size_mib = corpus.stat().st_size / 2**20
            common = ["embed", "--input", str(corpus), "--model", str(model), "--batch-size", "64"]
            bulk = run([*common, "--output", str(tmp / f"out-{n}"), "--shard-size",
                        str(SHARD_SIZE)], threads)  # fmt: skip
            row = {
                "lines": n,
                "file_mib": round(size_mib, 1),
                "bulk": {**bulk, "lines_per_s": round(n / bulk["wall_s"])},
            }
            if args.compare:
                memory = run([*common, "--output", str(tmp / f"out-{n}.npy")], threads)
                row["in_memory_npy"] = {**memory, "lines_per_s": round(n / memory["wall_s"])}
            rows.append(row)
            print(json.dumps(rows[-1]), flush=True)
            shutil.rmtree(tmp / f"out-{n}")
    growth = {
        mode: round(rows[1][mode]["peak_rss_mib"] - rows[0][mode]["peak_rss_mib"], 1)
        for mode in ("bulk", "in_memory_npy")
        if mode in rows[0]
    }
    result = {
        "benchmark": "bulk_embed",
        "cpu": cpu_model(),
        "threads": threads,
        "cpus": os.cpu_count(),
        "model": "tiny random BERT (H=32, L=2, I=37; MiniLM's WordPiece tokenizer), dim 32",
        "shard_size": SHARD_SIZE,
        "batch_size": 64,
        "runs": rows,
        "peak_rss_growth_mib": growth,
    }
    write_text_atomic(args.json, json.dumps(result, indent=2) + "\n")
    print(json.dumps(growth))


if __name__ == "__main__":
    main()
