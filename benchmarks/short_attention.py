"""Attention on short sequences: SDPA's fused CPU kernel against the two batched products and
softmax of `modules.attention.attend` (what fp32 CPU inference runs up to `SHORT_ATTENTION`
keys), on MiniLM's heads (12 × 32 dims), 32 sequences of t tokens with a key-padding mask, at 1
and 2 threads. Medians of 9 timings of 40 calls each, interleaved per shape.

Writes benchmarks/results/short_attention.json (CPU model and flags, times in µs, ratios).
Run from the repository root: ``python benchmarks/short_attention.py`` (about 1 minute).
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import torch
from machine import cpu_flags, cpu_model  # benchmarks/machine.py
from torch.nn import functional as F

from bertfamily.modules.attention import SHORT_ATTENTION, attend

HEADS, DIM = 12, 32


def _median_us(fn, calls: int = 40, timings: int = 9) -> float:
    for _ in range(5):
        fn()
    times = []
    for _ in range(timings):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(times)


def main() -> None:
    rows = []
    before = torch.get_num_threads()
    for threads in (1, 2):
        torch.set_num_threads(threads)
        for b, t in ((32, 8), (32, 16), (32, 24), (32, 32), (32, 64), (8, 128)):
            q, k, v = torch.randn(b, t, 3, HEADS, DIM).permute(2, 0, 3, 1, 4).unbind(0)
            mask = torch.zeros(b, 1, 1, t)
            mask[..., -2:] = torch.finfo(torch.float32).min
            with torch.inference_mode():
                sdpa = _median_us(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
                ours = _median_us(lambda: attend(q, k, v, mask, 0.0))
            path = "matmul" if t <= SHORT_ATTENTION else "sdpa (same call)"
            rows.append(
                {"threads": threads, "batch": b, "tokens": t, "sdpa_us": round(sdpa),
                 "attend_us": round(ours), "attend_path": path,
                 "sdpa_over_attend": round(sdpa / ours, 2)}
            )  # fmt: skip
            print(rows[-1])
    torch.set_num_threads(before)
    out = Path(__file__).parent / "results" / "short_attention.json"
    result = {
        "benchmark": "short_attention",
        "cpu": cpu_model(),
        "cpu_flags": cpu_flags(),
        "torch": torch.__version__,
        "short_attention": SHORT_ATTENTION,
        "rows": rows,
    }
    out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
