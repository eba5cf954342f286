"""The price of Ray on one node (#50): rows per second of `bertfamily embed --engine ray` with
its defaults (sized from the cluster: on 2 CPUs one actor of 1 CPU) against the local
`bertfamily embed --input T.parquet --output V.parquet` on the same Parquet file.

Each run is a fresh `python -m bertfamily` process, start-up included (Ray starts a local
instance each run, and loads the model once on the driver for its identity and once per
actor); rows per second is rows / wall time of the whole command. The load average is
recorded around each run: on a shared machine the wall times move with it.

The model is all-MiniLM-L6-v2 (fp32, the default faithful path), the input a Parquet table of
(doc_id, body) with synthetic sentences of 3-12 words (seeded), in one file (the command of
issue #50). Writes benchmarks/results/ray_bulk.json with the CPU model, the thread counts and
the load averages. Run from the repository root: ``nice -n 10 python benchmarks/ray_bulk.py``
(``--rows 1000`` by default; ``--model`` a directory or name).
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

WORDS = (
    "the a model vector corpus shard memory file line stream token batch query index search "
    "river cat music coffee train night city green quickly under over because although"
).split()


def write_table(path: Path, rows: int, seed: int = 0) -> None:
    """One Parquet file of ``rows`` (doc_id, body) rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(seed)
    texts = [" ".join(rng.choices(WORDS, k=rng.randint(3, 12))) for _ in range(rows)]
    pq.write_table(pa.table({"doc_id": [f"d{i}" for i in range(rows)], "body": texts}), path)


def run(args: list[str], timeout: float) -> dict:
    """Wall time and load average around ``python -m bertfamily ARGS`` (its stderr's last
    line: the command's own report)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)  # one machine: a local Ray instance
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "bertfamily", *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        timeout=timeout,
    )
    wall = time.perf_counter() - start
    if proc.returncode:
        raise RuntimeError(f"{args} failed: {proc.stderr[-2000:]}")
    lines = [x for x in proc.stderr.splitlines() if x.startswith("wrote ")]
    return {
        "seconds": round(wall, 2),
        "load_average_before": round(load_before, 2),
        "load_average_after": round(os.getloadavg()[0], 2),
        "report": lines[-1] if lines else "",
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000)
    ap.add_argument("--model", default="all-MiniLM-L6-v2")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per run")
    ap.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "results" / "ray_bulk.json")
    a = ap.parse_args()

    import torch

    from bertfamily.resources.cache import fetch
    from bertfamily.runtime import cpu_info_field

    model = str(fetch(a.model)) if not Path(a.model).exists() else a.model
    work = Path(tempfile.mkdtemp(prefix="ray-bulk-bench-"))
    runs = []
    try:
        table = work / "in.parquet"
        write_table(table, a.rows)
        columns = ["--id-column", "doc_id", "--text-column", "body", "--model", model]
        for engine in ("local", "ray"):
            if engine == "local":
                args = ["embed", "--input", str(table), "--output", str(work / "local.parquet")]
            else:
                args = ["embed", "--engine", "ray", "--input", str(table)]
                args += ["--output", str(work / "ray")]
            r = run([*args, *columns], a.timeout)
            r.update(engine=engine, rows=a.rows, rows_per_second=round(a.rows / r["seconds"], 1))
            print(json.dumps(r), flush=True)
            runs.append(r)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = {
        "machine": {
            "cpu": cpu_info_field("model name") or "unknown",
            "cpus": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
            "load_average": [round(x, 2) for x in os.getloadavg()],
            "note": "a shared machine: see each run's load average; compare within this file",
        },
        "model": f"{a.model}, fp32 (dtype auto), batch size 32",
        "ray": "defaults sized from the cluster (no --concurrency / --actor-cpus)",
        "runs": runs,
        "ray_vs_local": round(runs[1]["rows_per_second"] / runs[0]["rows_per_second"], 3),
    }
    a.json.parent.mkdir(parents=True, exist_ok=True)
    a.json.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
