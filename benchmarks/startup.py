"""Start-up time of the `bertfamily` command: `python -m bertfamily ...`, 3 runs each, median.

Writes benchmarks/results/startup.json with the CPU model, the Python and the per-run seconds.
Run from the repository root: ``python benchmarks/startup.py``.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from machine import cpu_model  # benchmarks/machine.py

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = (["--help"], ["fetch", "--list"], ["models"])
RUNS = 3
PROBE = (
    "import sys, runpy; sys.argv = ['bertfamily'] + sys.argv[1:]\n"
    "try:\n    runpy.run_module('bertfamily', run_name='__main__')\n"
    "except SystemExit:\n    pass\n"
    "print('torch' in sys.modules, file=sys.stderr)"
)


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), e.get("PYTHONPATH")]))
    return e


def time_command(args: list[str]) -> dict:
    seconds = []
    for _ in range(RUNS):
        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "bertfamily", *args],
            env=env(),
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        seconds.append(round(time.perf_counter() - t0, 3))
    probe = subprocess.run(
        [sys.executable, "-c", PROBE, *args], env=env(), capture_output=True, text=True
    )
    imports_torch = probe.stderr.strip().splitlines()[-1] == "True"
    return {
        "command": "python -m bertfamily " + " ".join(args),
        "runs_s": seconds,
        "median_s": statistics.median(seconds),
        "imports_torch": imports_torch,
    }


def main() -> None:
    result = {
        "cpu": cpu_model(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "runs": RUNS,
        "commands": [time_command(a) for a in COMMANDS],
    }
    out = ROOT / "benchmarks" / "results" / "startup.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    for c in result["commands"]:
        print(f"{c['command']:40s} median {c['median_s']:.2f} s  torch: {c['imports_torch']}")


if __name__ == "__main__":
    main()
