"""GPU check of the windowed attention (run where CUDA is available; not part of CI).

1. The chunked kernel equals the dense band-plus-global reference on CUDA in fp32 (tiny model,
   windows (2, 4, 8), padding, different numbers of global tokens per row).
2. longformer-base shape, B=1, T=4096 and 2048: forward seconds and peak CUDA memory in fp32 and
   bf16, outputs finite.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]

from bertfamily import EncoderConfig, build_model  # noqa: E402
from reference.longformer import DenseReference  # noqa: E402


def parity(device: str) -> float:
    config = EncoderConfig.from_preset(
        "tiny-longformer", num_hidden_layers=3, attention_window=(2, 4, 8)
    )
    torch.manual_seed(0)
    model = build_model(config).eval().to(device)
    ref = build_model(config).eval().to(device)
    ref.load_state_dict(model.state_dict())
    for layer, w in zip(ref.encoder.layers, (2, 4, 8)):
        layer.attention = DenseReference(layer.attention, w)
    ids = torch.randint(3, 99, (3, 23), device=device)
    mask = torch.ones_like(ids)
    mask[1, 15:] = 0
    mask[2, :9] = 0
    ids[mask == 0] = 1
    g = torch.zeros_like(ids)
    g[0, [0, 7, 20]] = 1
    g[2, 12] = 1
    with torch.no_grad():
        a = model(ids, mask, global_attention_mask=g).last_hidden_state
        b = ref(ids, mask, global_attention_mask=g).last_hidden_state
    return (a - b).abs().max().item()


def main() -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    print(
        f"device {device} {torch.cuda.get_device_name() if device == 'cuda' else ''}, "
        f"torch {torch.__version__}"
    )
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    print(f"max |chunked - dense| fp32: {parity(device):.2e}")
    config = EncoderConfig.from_preset("longformer-base")
    model = build_model(config).eval().to(device)
    for dtype in (torch.float32, torch.bfloat16):
        model.to(dtype)
        for T in (4096, 2048):
            ids = torch.randint(3, config.vocab_size, (1, T), device=device)
            g = torch.zeros_like(ids)
            g[:, 0] = 1
            with torch.no_grad():
                model(ids, global_attention_mask=g)  # warm-up
                if device == "cuda":
                    torch.cuda.synchronize()
                    torch.cuda.reset_peak_memory_stats()
                t0 = time.perf_counter()
                out = model(ids, global_attention_mask=g).last_hidden_state
                if device == "cuda":
                    torch.cuda.synchronize()
                dt = time.perf_counter() - t0
            peak = torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else float("nan")
            print(
                f"{str(dtype):15s} T={T:5d}  {dt * 1000:8.1f} ms  peak {peak:8.0f} MiB  "
                f"finite {bool(torch.isfinite(out).all())}"
            )


if __name__ == "__main__":
    main()
