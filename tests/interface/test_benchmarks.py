"""The benchmark script runs in quick mode so it cannot rot (no timing is asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_benchmark_quick_mode(tmp_path):
    out = tmp_path / "rows.json"
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "run.py"),
            "--quick",
            "--only",
            "peak,bert,pretrain,deberta",  # one family script (the longformer one runs alike)
            "--json",
            str(out),
        ],
        check=True,
        capture_output=True,
        timeout=600,
    )
    rows = json.loads(out.read_text())
    benches = {r["bench"] for r in rows}
    assert {"matmul peak", "bert (quick)", "bf16 accuracy"} <= benches
    assert any(r["bench"].startswith("MLM train step") for r in rows)
    cos = next(r for r in rows if r["bench"] == "bf16 accuracy")["min_mean_pooled_cosine_vs_fp32"]
    assert cos > 0.99
    machine = rows[0]
    assert machine["bench"] == "machine" and machine["threads"] >= 1 and machine["cpu"]
    timed = [r for r in rows if "seconds" in r]
    assert {r["bench"] for r in timed} >= {"bert (quick)", "deberta (quick)"}
    for r in timed:  # every timed row carries its share of the measured GEMM peak
        assert r["frac_of_peak"] > 0 and r["gflops"] > 0, r
