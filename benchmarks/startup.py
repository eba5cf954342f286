"""Start-up of the `bertfamily` command: how long before the first output, and where it goes.

    python benchmarks/startup.py            # calm machine
    python benchmarks/startup.py --busy     # the same with one core kept busy (a spinning process)

1. Whole commands, ``python -m bertfamily ...`` as a user types them, 3 runs each, median:
   ``--help``, ``fetch --list``, ``models`` (no torch), ``embed "a" "b"`` and ``search`` (a query
   over a 5-line file) on the default model (all-MiniLM-L6-v2, fetched first), and ``serve``
   until ``GET /health`` answers 200. For the commands that print, the time to the first byte
   on stdout is recorded beside the time to exit.
2. The causes, measured in one fresh process per run (the same order a command goes through):
   importing the command line (``bertfamily.cli``, no torch), importing torch, the thread
   choice (`runtime.apply_threads`: the look at the load), loading the model
   (`SentenceEmbedder`: files checked, weights read, kernels prepared) and the first vector.

Writes benchmarks/results/startup.json (or startup_busy.json with ``--busy``) with the CPU
model, the CPU count, the load average before each command, and per-run seconds.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from machine import cpu_model  # benchmarks/machine.py

ROOT = Path(__file__).resolve().parent.parent
RUNS = 3
MODEL = "all-MiniLM-L6-v2"
PROBE = (
    "import sys, runpy; sys.argv = ['bertfamily'] + sys.argv[1:]\n"
    "try:\n    runpy.run_module('bertfamily', run_name='__main__')\n"
    "except SystemExit:\n    pass\n"
    "print('torch' in sys.modules, file=sys.stderr)"
)
# the phases of a model command, in one fresh process (stdout: one JSON object)
PHASES = f"""
import json, time
t0 = time.perf_counter()
import bertfamily.cli
t1 = time.perf_counter()
import torch
t2 = time.perf_counter()
from bertfamily import runtime
runtime.apply_threads(0)
t3 = time.perf_counter()
from bertfamily.pipelines.embedding.embed import SentenceEmbedder
emb = SentenceEmbedder({MODEL!r})
t4 = time.perf_counter()
emb.encode(["a", "b"])
t5 = time.perf_counter()
print(json.dumps({{"import_cli_s": t1 - t0, "import_torch_s": t2 - t1, "thread_choice_s": t3 - t2,
                  "model_load_s": t4 - t3, "first_vectors_s": t5 - t4, "total_s": t5 - t0}}))
"""


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), e.get("PYTHONPATH")]))
    return e


def run_once(args: list[str]) -> tuple[float, float | None]:
    """(seconds to exit, seconds to the first byte on stdout or None)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "bertfamily", *args],
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    first = proc.stdout.read(1)
    t_first = time.perf_counter() - t0 if first else None
    proc.stdout.read()
    if proc.wait() != 0:
        raise RuntimeError(f"bertfamily {' '.join(args)} failed")
    return time.perf_counter() - t0, t_first


def time_command(args: list[str]) -> dict:
    load = os.getloadavg()[0]
    runs = [run_once(args) for _ in range(RUNS)]
    probe = subprocess.run(
        [sys.executable, "-c", PROBE, *args], env=env(), capture_output=True, text=True
    )
    firsts = [f for _, f in runs if f is not None]
    return {
        "command": "python -m bertfamily " + " ".join(args),
        "load_before": round(load, 2),
        "runs_s": [round(t, 3) for t, _ in runs],
        "median_s": round(statistics.median(t for t, _ in runs), 3),
        "first_output_median_s": round(statistics.median(firsts), 3) if firsts else None,
        "imports_torch": probe.stderr.strip().splitlines()[-1] == "True",
    }


def time_serve(port: int = 18731) -> dict:
    """``serve`` from launch to the first 200 of ``GET /health``, 3 runs."""
    load, seconds = os.getloadavg()[0], []
    for _ in range(RUNS):
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", "bertfamily", "serve", "--model", MODEL, "--port", str(port)],
            env=env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            while True:
                if proc.poll() is not None:
                    raise RuntimeError("serve exited before it was ready")
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                        if r.status == 200:
                            break
                except OSError:
                    time.sleep(0.02)
            seconds.append(round(time.perf_counter() - t0, 3))
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    return {
        "command": f"python -m bertfamily serve --model {MODEL} (until /health is 200)",
        "load_before": round(load, 2),
        "runs_s": seconds,
        "median_s": round(statistics.median(seconds), 3),
    }


def phases() -> dict:
    """The causes of a model command's start-up, median of 3 fresh processes."""
    runs = []
    for _ in range(RUNS):
        out = subprocess.run(
            [sys.executable, "-c", PHASES], env=env(), capture_output=True, text=True, check=True
        )
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return {k: round(statistics.median(r[k] for r in runs), 3) for k in runs[0]}


def _spin() -> None:
    while True:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--busy", action="store_true", help="keep one core busy meanwhile")
    args = parser.parse_args()
    subprocess.run(
        [sys.executable, "-m", "bertfamily", "fetch", MODEL],
        env=env(),
        check=True,
        stdout=subprocess.DEVNULL,
    )
    spinner = None
    if args.busy:
        spinner = multiprocessing.Process(target=_spin, daemon=True)
        spinner.start()
        time.sleep(2)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            corpus = Path(tmp) / "docs.txt"
            corpus.write_text(
                "A man is eating food.\nA man is riding a horse.\nThe cat sleeps.\n"
                "Stock markets fell.\nIt rained all day.\n",
                encoding="utf-8",
            )
            commands = [
                ["--help"],
                ["fetch", "--list"],
                ["models"],
                ["embed", "a", "b"],
                ["search", "--corpus", str(corpus), "a man eats"],
            ]
            result = {
                "cpu": cpu_model(),
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
                "busy_core": args.busy,
                "runs": RUNS,
                "commands": [time_command(a) for a in commands] + [time_serve()],
                "phases_median_s": phases(),
            }
    finally:
        if spinner is not None:
            spinner.terminate()
    name = "startup_busy.json" if args.busy else "startup.json"
    out = ROOT / "benchmarks" / "results" / name
    out.write_text(json.dumps(result, indent=2) + "\n")
    for c in result["commands"]:
        first = c.get("first_output_median_s")
        shown = f"  first output {first:.2f} s" if first is not None else ""
        print(f"{c['command'][:60]:60s} median {c['median_s']:.2f} s{shown}")
    print("phases:", result["phases_median_s"])


if __name__ == "__main__":
    main()
