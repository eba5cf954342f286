"""Attention on short sequences: SDPA's fused CPU kernel against the two batched products and
softmax of `modules.attention.attend` (what fp32 and bf16 CPU inference runs up to
`SHORT_ATTENTION` keys; bf16 computed in fp32), on MiniLM's heads (12 × 32 dims), 32 sequences
of t tokens with a key-padding mask, at 1 and 2 threads. Medians of 9 timings of 40 calls each,
interleaved per shape. ``--dtype bf16`` times bf16 inputs and also records each path's largest
error against a float64 reference.

Writes benchmarks/results/short_attention.json (``--dtype bf16``: short_attention_bf16.json;
CPU model and flags, times in µs, ratios). Run from the repository root: ``python
benchmarks/short_attention.py [--dtype bf16]`` (about 1 minute).
"""

from __future__ import annotations

import argparse
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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32")
    args = parser.parse_args()
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    rows = []
    before = torch.get_num_threads()
    for threads in (1, 2):
        torch.set_num_threads(threads)
        for b, t in ((32, 8), (32, 16), (32, 24), (32, 32), (32, 64), (8, 128)):
            qkv = torch.randn(b, t, 3, HEADS, DIM).to(dtype).permute(2, 0, 3, 1, 4)
            q, k, v = qkv.unbind(0)
            mask = torch.zeros(b, 1, 1, t, dtype=dtype)
            mask[..., -2:] = torch.finfo(dtype).min
            with torch.inference_mode():
                sdpa = _median_us(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
                ours = _median_us(lambda: attend(q, k, v, mask, 0.0))
                exact = F.scaled_dot_product_attention(
                    q.double(), k.double(), v.double(), attn_mask=mask.double()
                )
                errors = {
                    "sdpa_max_error": F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
                    "attend_max_error": attend(q, k, v, mask, 0.0),
                }
            path = "matmul" if t <= SHORT_ATTENTION else "sdpa (same call)"
            rows.append(
                {"dtype": args.dtype, "threads": threads, "batch": b, "tokens": t,
                 "sdpa_us": round(sdpa), "attend_us": round(ours), "attend_path": path,
                 "sdpa_over_attend": round(sdpa / ours, 2)}
                | {name: float(f"{(y.double() - exact).abs().max():.3g}")
                   for name, y in errors.items()}
            )  # fmt: skip
            print(rows[-1])
    torch.set_num_threads(before)
    name = "short_attention.json" if args.dtype == "fp32" else "short_attention_bf16.json"
    out = Path(__file__).parent / "results" / name
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
