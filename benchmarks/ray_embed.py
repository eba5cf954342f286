"""Rows per second and peak memory of bulk embedding into (id, vector) Parquet: one process
(`bertfamily embed --input T.parquet --output V.parquet`) against Ray Data with 2 actors
(`bertfamily embed --engine ray --concurrency 2`), each at two input sizes.

Each run is a fresh `python -m bertfamily` process. Peak memory is the largest sum of the
resident set sizes of that process and all its descendants (Ray's raylet, GCS, workers and
actors included), sampled every 0.1 s with psutil, so the Ray figure is the whole local
cluster's; CPU seconds are those of the same tree (each process's last sample). Rows per
second is rows / wall time of the whole command, start-up included (Ray starts a local
instance each run: on a small input that start-up dominates). The marginal rate
(`marginal_rates`), the extra rows of the large run per extra CPU second, is the steady cost of
a row without the start-up. The load average is recorded around every run: on a shared machine
the wall times move with it.

The model is a tiny random BERT (H=32, L=2, MiniLM's WordPiece tokenizer): the run measures the
data path (reading, tokenizing, scheduling, writing), not a large model. The input is a Parquet
table of (id, text), synthetic sentences of 3–12 words (seeded), in 8 files.

Writes benchmarks/results/ray_embed.json with the CPU model (benchmarks/machine.py).
Run from the repository root: ``nice -n 10 python benchmarks/ray_embed.py`` (``--quick``:
1,000 and 4,000 rows, one process only; ``--sizes 10000 40000`` to choose).
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

FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_int8")  # what torch's CPU kernels use


def cpu_flags() -> list[str]:
    """The `FLAGS` this CPU has (from /proc/cpuinfo)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    line = next((x for x in text.splitlines() if x.startswith("flags")), "")
    have = set(line.split(":", 1)[-1].split())
    return [f for f in FLAGS if f in have]


WORDS = (
    "the a model vector corpus shard memory file line stream token batch query index search "
    "river cat music coffee train night city green quickly under over because although"
).split()


def write_table(directory: Path, rows: int, files: int = 8, seed: int = 0) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(seed)
    texts = [" ".join(rng.choices(WORDS, k=rng.randint(3, 12))) for _ in range(rows)]
    directory.mkdir(parents=True)
    for f in range(files):
        lo, hi = f * rows // files, (f + 1) * rows // files
        table = pa.table({"id": list(range(lo, hi)), "text": texts[lo:hi]})
        pq.write_table(table, directory / f"part-{f:02d}.parquet")


def tiny_model(path: Path) -> Path:
    import torch

    import bertfamily as bf
    from bertfamily.resources.cache import fetch

    config = bf.EncoderConfig.from_preset(
        "tiny-bert", vocab_size=30522, max_position_embeddings=512
    )
    torch.manual_seed(0)
    bf.build_model(config).save_pretrained(path)
    minilm = fetch("all-MiniLM-L6-v2")
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"):
        if (minilm / name).exists():
            shutil.copy(minilm / name, path / name)
    return path


def run(args: list[str]) -> dict:
    """Wall time, peak tree RSS, tree CPU seconds and load of ``python -m bertfamily ARGS``."""
    import psutil

    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "RAY_ADDRESS": ""}
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    load_before = os.getloadavg()[0]
    cpu: dict[int, float] = {}
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "bertfamily", *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    root, peak = psutil.Process(proc.pid), 0
    while proc.poll() is None:
        try:
            tree = [root, *root.children(recursive=True)]
            total = 0
            for p in tree:
                try:
                    total += p.memory_info().rss
                    times = p.cpu_times()
                    cpu[p.pid] = times.user + times.system
                except psutil.Error:
                    pass
            peak = max(peak, total)
        except psutil.Error:
            pass
        time.sleep(0.1)
    wall = time.perf_counter() - start
    if proc.returncode:
        raise RuntimeError(f"{args} failed: {proc.stderr.read()[-2000:]}")
    return {
        "seconds": round(wall, 2),
        "cpu_seconds": round(sum(cpu.values()), 1),
        "peak_rss_mib": round(peak / 2**20, 1),
        "load_average_before": round(load_before, 2),
        "load_average_after": round(os.getloadavg()[0], 2),
    }


def marginal_rates(runs: list[dict], engines: list[str], sizes: list[int]) -> dict:
    """Per engine, the rows the large run embedded beyond the small one per CPU second it
    spent beyond it (the whole process tree's): the steady cost of a row without the start-up,
    and, unlike wall time, hardly moved by other jobs on the machine."""
    out = {}
    for engine in engines:
        small, large = (next(r for r in runs if r["engine"] == engine and r["rows"] == n)
                        for n in sizes)  # fmt: skip
        extra = large["cpu_seconds"] - small["cpu_seconds"]
        out[engine] = round((large["rows"] - small["rows"]) / extra) if extra > 0 else None
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--sizes", type=int, nargs=2, default=None)
    ap.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "results" / "ray_embed.json")
    ap.add_argument(
        "--note",
        default="a shared machine: other jobs ran at the same time (see each run's load "
        "average); compare within this file only",
    )
    a = ap.parse_args()
    sizes = a.sizes or ([1_000, 4_000] if a.quick else [10_000, 40_000])
    engines = ["local"] if a.quick else ["local", "ray"]
    work = Path(tempfile.mkdtemp(prefix="ray-embed-bench-"))
    rows_out = []
    try:
        model = tiny_model(work / "model")
        for n in sizes:
            table = work / f"in-{n}"
            write_table(table, n)
            for engine in engines:
                if engine == "local":
                    out = work / f"out-{n}.parquet"
                    args = ["embed", "--input", str(table), "--output", str(out)]
                else:
                    out = work / f"out-{n}-ray"
                    args = [
                        "embed",
                        "--engine",
                        "ray",
                        "--concurrency",
                        "2",
                        "--actor-cpus",
                        "0.5",
                        "--input",
                        str(table),
                        "--output",
                        str(out),
                    ]
                r = run([*args, "--model", str(model), "--dtype", "fp32"])
                r.update(engine=engine, rows=n, rows_per_second=round(n / r["seconds"], 1))
                print(json.dumps(r), flush=True)
                rows_out.append(r)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    marginal = marginal_rates(rows_out, engines, sizes)
    result = {
        "machine": {
            "cpu": cpu_model(),
            "cpus": os.cpu_count(),
            "flags": cpu_flags(),
            "note": a.note,
        },
        "model": "tiny random BERT (H=32, L=2), MiniLM tokenizer, fp32",
        "sizes": sizes,
        "ray_actors": 2,
        "ray_actor_cpus": 0.5,
        "runs": rows_out,
        "marginal_rows_per_cpu_second": marginal,
    }
    if not a.quick:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    else:
        print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
