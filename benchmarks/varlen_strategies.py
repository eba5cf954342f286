"""Packed attention strategies on bert-base's variable-length batch (32 lengths 16..256, as in
benchmarks/run.py), interleaved with transformers (SDPA, padded) in one process, idle and with
one core taken by a busy process (``yes``). Writes benchmarks/results/varlen_strategies.json.

    python benchmarks/varlen_strategies.py [--rounds 4]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import torch
import transformers
from machine import cpu_flags, cpu_model  # benchmarks/machine.py

import bertfamily as bf
from bertfamily.modules.attention import SelfAttention

STRATEGIES = ("auto", "per_sequence", "bucketed", "padded")


def measure(ours, ref, ids, mask, rounds: int) -> dict:
    def run(strategy):
        SelfAttention.packed_strategy = strategy
        with torch.inference_mode():
            ours(ids, mask)

    def hf():
        with torch.inference_mode():
            ref(input_ids=ids, attention_mask=mask)

    fns = {s: (lambda s=s: run(s)) for s in STRATEGIES} | {"transformers": hf}
    for f in fns.values():
        f()
    times: dict = {k: [] for k in fns}
    for _ in range(rounds):
        for k, f in fns.items():
            t0 = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t0)
    SelfAttention.packed_strategy = "auto"
    med = {k: statistics.median(v) for k, v in times.items()}
    return {
        "seconds": {k: round(v, 4) for k, v in med.items()},
        "ratio_vs_transformers": {k: round(med["transformers"] / v, 2) for k, v in med.items()},
        "load_average": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results/varlen_strategies.json"
    )
    args = p.parse_args()
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(16, 257, (32,), generator=g).tolist()
    torch.manual_seed(0)
    ref = transformers.BertModel(transformers.BertConfig(attn_implementation="sdpa")).eval()
    with tempfile.TemporaryDirectory() as tmp:
        ref.save_pretrained(tmp)
        ours = bf.from_pretrained(tmp).eval()
    T = max(lengths)
    mask = (torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]).long()
    ids = torch.randint(1000, 30000, (32, T), generator=g)
    result = {
        "benchmark": "packed attention strategies, bert-base, 32 lengths 16..256, fp32",
        "machine": {"cpu": cpu_model(), "cpu_flags": cpu_flags(), "cpu_count": os.cpu_count()},
        "torch_threads": torch.get_num_threads(),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        "idle": measure(ours, ref, ids, mask, args.rounds),
    }
    busy = subprocess.Popen(["yes"], stdout=subprocess.DEVNULL)
    try:
        result["one core busy"] = measure(ours, ref, ids, mask, args.rounds)
    finally:
        busy.kill()
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({k: result[k]["ratio_vs_transformers"] for k in ("idle", "one core busy")}))


if __name__ == "__main__":
    main()
