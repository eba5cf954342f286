"""Training-step speed and peak memory: bertfamily vs transformers' BertForMaskedLM.

For bert-tiny (L=2, H=128) and a 4-layer / 256-hidden BERT, both libraries start from the same
random weights (ours saved with ``save_pretrained``, loaded by transformers), take the same
batch (B sequences of T random tokens, 15% of positions labelled, the rest -100), compute the
MLM cross-entropy over the full (B, T, V) logits and take a `torch.optim.AdamW` step (dropout
on). Variants:
fp32, + activation checkpointing (ours: ``Encoder.checkpoint_activations``; transformers:
``gradient_checkpointing_enable(use_reentrant=False)``), bf16 autocast, and both.

- tokens/s: one process, one step of ours and one of transformers per round, the order
  alternating (the median over rounds of each, and the ratio of medians), so machine load
  hits both alike; after one warm-up step each.
- peak memory of a step: on CPU the resident set's high-water mark during the step (``VmHWM``
  of /proc/self/status, reset just before through /proc/self/clear_refs) above the resident
  set before it, with glibc's mmap threshold fixed at 64 KiB so freed tensors leave the
  resident set; on CUDA ``torch.cuda.max_memory_allocated`` above the memory allocated
  before. The maximum over rounds. Both libraries compute the full (B, T, V) logits (transformers'
  BertForMaskedLM does), which dominate the memory of small models with V = 30522.

bf16 on a CPU without AVX512-BF16/AMX is emulated (slow); the JSON records the CPU flags.

    OMP_NUM_THREADS=2 PYTHONPATH=src python benchmarks/train_step.py
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import json
import os
import platform
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import torch

warnings.filterwarnings("ignore")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

MODELS = {  # name -> EncoderConfig overrides of the bert-tiny preset (L=2, H=128, V=30522)
    "bert-tiny": {},
    "4L-256H": dict(
        num_hidden_layers=4, hidden_size=256, num_attention_heads=4, intermediate_size=1024
    ),
}
VARIANTS = {  # name -> (checkpointing, bf16 autocast)
    "fp32": (False, False),
    "fp32+ckpt": (True, False),
    "bf16": (False, True),
    "bf16+ckpt": (True, True),
}
T = 128


def build_pair(model_name: str, checkpointing: bool, device: torch.device):
    """(ours, transformers') models with the same random weights, in training mode."""
    import transformers

    from bertfamily import build_model
    from bertfamily.config import EncoderConfig

    torch.manual_seed(0)
    cfg = EncoderConfig.from_preset(
        "bert-tiny", **MODELS[model_name], use_pooler=False, pair_head=None
    )
    ours = build_model(cfg, heads=["mlm"])
    with tempfile.TemporaryDirectory() as d:
        ours.save_pretrained(d)
        hf = transformers.BertForMaskedLM.from_pretrained(d)
    ours.encoder.checkpoint_activations = checkpointing
    if checkpointing:
        hf.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return ours.to(device).train(), hf.to(device).train(), cfg.vocab_size


def make_batch(vocab: int, batch_size: int, device: torch.device) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, vocab, (batch_size, T), generator=g)
    labels = torch.where(torch.rand(batch_size, T, generator=g) < 0.15, ids, -100)
    return {"input_ids": ids.to(device), "labels": labels.to(device)}


def make_step(model, bf16: bool, batch, vocab: int, device: torch.device):
    """A closure running one training step (forward, loss, backward, AdamW step)."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step() -> float:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            logits = model(input_ids=batch["input_ids"]).logits  # (B, T, V)
            loss = torch.nn.functional.cross_entropy(
                logits.float().reshape(-1, vocab), batch["labels"].reshape(-1)
            )
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    return step


def _status_kib(field: str) -> int:
    """A memory field of /proc/self/status (VmRSS: resident now, VmHWM: its high-water mark)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    return 0


def _fixed_mmap_threshold() -> None:
    """glibc: serve every allocation over 64 KiB with its own mmap, returned to the system on
    free (mallopt M_MMAP_THRESHOLD, which also stops glibc from raising the threshold), so the
    resident set follows the live tensors and one library's freed memory is not the other's."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").mallopt(-3, 64 * 1024)  # -3 = M_MMAP_THRESHOLD


def timed_step(step, device: torch.device) -> tuple[float, float]:
    """(seconds, peak MiB above the memory held before) of one call of ``step``."""
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        gc.collect()
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS (Linux >= 4.0)
        base = _status_kib("VmRSS") * 1024
    t0 = time.perf_counter()
    step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated()
    else:
        peak = _status_kib("VmHWM") * 1024
    return seconds, (peak - base) / 2**20


def measure(model_name: str, variant: str, batch_size: int, rounds: int) -> dict:
    """tokens/s and step memory of ours and transformers, one step each per round, the order
    alternating between rounds; after one warm-up step each (AdamW's state allocated)."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    ckpt, bf16 = VARIANTS[variant]
    ours, hf, vocab = build_pair(model_name, ckpt, device)
    batch = make_batch(vocab, batch_size, device)
    runs = {
        "bertfamily": make_step(ours, bf16, batch, vocab, device),
        "transformers": make_step(hf, bf16, batch, vocab, device),
    }
    # same weights and batch; dropout (0.1, on as in training) draws differ, so the first
    # losses agree to ~1e-2 only
    first = {name: run() for name, run in runs.items()}
    times: dict[str, list[float]] = {name: [] for name in runs}
    mem: dict[str, list[float]] = {name: [] for name in runs}
    for r in range(rounds):
        for name in runs if r % 2 == 0 else reversed(list(runs)):
            seconds, mib = timed_step(runs[name], device)
            times[name].append(seconds)
            mem[name].append(mib)
    tps = {name: batch_size * T / statistics.median(ts) for name, ts in times.items()}
    peak = {name: max(ms) for name, ms in mem.items()}
    return {
        "rounds": rounds,
        "tokens_per_s": {k: round(v, 1) for k, v in tps.items()},
        "speed_ratio": round(tps["bertfamily"] / tps["transformers"], 3),
        "step_peak_mib": {k: round(v, 1) for k, v in peak.items()},
        "memory_ratio": round(peak["bertfamily"] / max(peak["transformers"], 0.1), 3),
        "first_loss": {k: round(v, 5) for k, v in first.items()},
    }


def cpu_flags() -> list[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = line.split(":", 1)[1].split()
                return sorted(f for f in flags if f.startswith(("avx512", "amx", "avx2")))
    except OSError:
        pass
    return []


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--output", default="benchmarks/results/train_step.json")
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (fp32 rows)")
    p.add_argument(
        "--bf16-rounds",
        type=int,
        default=None,
        help="rounds of the bf16 rows (default: --rounds with native bf16, else 1: emulated "
        "bf16 steps take tens of seconds)",
    )
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--variants", default=",".join(VARIANTS))
    a = p.parse_args()
    from machine import cpu_model

    from bertfamily.files import atomic_write
    from bertfamily.train.mixed_precision import bf16_native

    _fixed_mmap_threshold()
    native = bf16_native()
    bf16_rounds = a.bf16_rounds or (a.rounds if native else 1)
    rows = []
    for model_name in a.models.split(","):
        for variant in a.variants.split(","):
            rounds = bf16_rounds if VARIANTS[variant][1] else a.rounds
            row = {"model": model_name, "variant": variant, "batch": [a.batch_size, T]}
            row.update(measure(model_name, variant, a.batch_size, rounds))
            print(json.dumps(row), flush=True)
            rows.append(row)
    result = {
        "benchmark": "train_step",
        "command": "OMP_NUM_THREADS=2 PYTHONPATH=src python benchmarks/train_step.py",
        "machine": {
            "cpu": cpu_model(),
            "cpu_flags": cpu_flags(),
            "bf16_native": native,
            "threads": torch.get_num_threads(),
            "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
            "python": platform.python_version(),
            "torch": torch.__version__,
        },
        "seq_len": T,
        "rows": rows,
    }
    text = json.dumps(result, indent=1)
    atomic_write(Path(a.output), lambda tmp: Path(tmp).write_text(text))
    print(f"-> {a.output}")


if __name__ == "__main__":
    main()
