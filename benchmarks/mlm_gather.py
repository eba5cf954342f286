"""MLM head at the predicted positions only vs at every position (bert-tiny, V = 30522).

One training step (forward + backward) of `PretrainingModel` with ``masked_positions`` (the MLM
head sees the ~15% predicted tokens, as the original BERT gathered them) against the same loss
computed from the full (B, T, V) logits. Prints the median times and the ratio.

    OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/mlm_gather.py [--batch 32 --length 128]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch.nn import functional as F

from bertfamily import build_model
from bertfamily.config import EncoderConfig


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--length", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=10)
    args = ap.parse_args()
    torch.manual_seed(0)
    model = build_model(
        EncoderConfig.from_preset("bert-tiny", use_pooler=False, pair_head=None), heads=["mlm"]
    )
    B, T, V = args.batch, args.length, model.config.vocab_size
    ids = torch.randint(5, V, (B, T))
    labels = torch.where(torch.rand(B, T) < 0.15, ids, torch.full_like(ids, -100))
    sel = labels != -100

    def gathered():
        out = model(ids, masked_positions=sel)
        F.cross_entropy(out.logits, labels[sel]).backward()

    def full():
        out = model(ids)
        F.cross_entropy(out.logits.reshape(-1, V), labels.reshape(-1)).backward()

    times = {}
    for name, fn in (("gathered", gathered), ("full", full)):
        fn()  # warm-up
        runs = []
        for _ in range(args.repeats):
            model.zero_grad(set_to_none=True)
            t0 = time.perf_counter()
            fn()
            runs.append(time.perf_counter() - t0)
        times[name] = statistics.median(runs)
    print(
        f"bert-tiny, B={B}, T={T}, V={V}, {int(sel.sum())} predicted tokens, "
        f"{torch.get_num_threads()} thread(s)"
    )
    for name, t in times.items():
        print(f"  {name:9s} {1000 * t:8.1f} ms per forward+backward")
    print(f"  full / gathered = {times['full'] / times['gathered']:.2f}x")


if __name__ == "__main__":
    main()
