"""Longformer forward: bertfamily's chunked windowed attention vs transformers' LongformerModel.

Forward pass of the longformer-base shape (L=12, H=768, N=12, window 512, random weights, fp32,
no gradients) at B=1 and T=4096 and T=2048, global attention on the first token. Every
measurement runs in its own subprocess so that peak resident memory is not shared between them.

Reported per run: seconds for one forward (best of --repeat), the process's peak resident memory
(VmHWM, includes the Python runtime, torch and the 595 MB of weights) and the forward's own
increment (peak during the forward minus resident memory just before it; the peak counter is
reset through /proc/self/clear_refs before the forward).

    nice -n 10 python benchmarks/longformer.py            # full run (minutes on 2 cores)
    python benchmarks/longformer.py --quick               # tiny sizes, seconds
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def _reset_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _shape(quick: bool) -> dict:
    if quick:
        return dict(
            num_hidden_layers=2,
            hidden_size=64,
            num_attention_heads=4,
            intermediate_size=128,
            max_position_embeddings=1026,
            attention_window=32,
        )
    return {}


def child(impl: str, T: int, quick: bool, repeat: int, threads: int) -> dict:
    import torch

    sys.path.insert(0, str(ROOT / "src"))
    from bertfamily import EncoderConfig, build_model
    from bertfamily.checkpoints.io import config_to_hf

    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(0)
    config = EncoderConfig.from_preset("longformer-base", **_shape(quick))
    if impl == "ours":
        model = build_model(config).eval()
    else:
        import transformers

        transformers.logging.set_verbosity_error()
        hf = config_to_hf(config, "LongformerModel")
        hf.pop("model_type")
        model = transformers.LongformerModel(transformers.LongformerConfig(**hf)).eval()
    n_params = sum(p.numel() for p in model.parameters())
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, config.vocab_size, (1, T), generator=g)
    mask = torch.ones_like(ids)
    glob = torch.zeros_like(ids)
    glob[:, 0] = 1
    with torch.no_grad():
        model(
            input_ids=ids[:, :64], attention_mask=mask[:, :64], global_attention_mask=glob[:, :64]
        )  # warm-up (lazy initialisation)
        exact = _reset_peak()
        before = _status_kib("VmRSS")
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            out = model(input_ids=ids, attention_mask=mask, global_attention_mask=glob)
            times.append(time.perf_counter() - t0)
            del out
        peak = _status_kib("VmHWM")
    return dict(
        impl=impl,
        T=T,
        seconds=min(times),
        peak_rss_mb=peak / 1024,
        forward_mb=(peak - before) / 1024,
        peak_reset=exact,
        parameters=n_params,
        threads=torch.get_num_threads(),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    ap.add_argument("--lengths", type=int, nargs="+", default=None)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument(
        "--impls", nargs="+", default=["ours", "transformers"], choices=["ours", "transformers"]
    )
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch default)")
    ap.add_argument(
        "--json",
        action="store_true",
        help="print one JSON list of result rows last (for benchmarks/run.py)",
    )
    ap.add_argument("--child", nargs=2, metavar=("IMPL", "T"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        result = child(args.child[0], int(args.child[1]), args.quick, args.repeat, args.threads)
        print("RESULT " + json.dumps(result))
        return
    lengths = args.lengths or ([256, 128] if args.quick else [4096, 2048])
    rows = []
    for T in lengths:
        for impl in args.impls:
            cmd = [
                sys.executable,
                __file__,
                "--child",
                impl,
                str(T),
                "--repeat",
                str(args.repeat),
                "--threads",
                str(args.threads),
            ] + (["--quick"] if args.quick else [])
            proc = subprocess.run(
                cmd,
                capture_output=True,
                text=True,
                env={**os.environ, "TRANSFORMERS_VERBOSITY": "error"},
            )
            line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
            if proc.returncode or not line:
                sys.exit(f"{impl} T={T} failed:\n{proc.stderr[-3000:]}")
            rows.append(json.loads(line[0][7:]))
            r = rows[-1]
            print(
                f"{impl:>12}  T={T:5d}  {r['seconds']:8.2f} s  peak RSS {r['peak_rss_mb']:8.0f} MB"
                f"  forward +{r['forward_mb']:7.0f} MB",
                flush=True,
            )
    if len(args.impls) < 2:
        return
    print()
    header = ("T", "time ours/transformers", "peak RSS ratio", "forward memory ratio")
    print("  ".join(f"{h:>{w}}" for h, w in zip(header, (5, 22, 14, 20))))
    for T in lengths:
        a, b = (
            next(r for r in rows if r["impl"] == i and r["T"] == T)
            for i in ("ours", "transformers")
        )
        print(
            f"{T:5d}  {a['seconds'] / b['seconds']:22.2f}  "
            f"{a['peak_rss_mb'] / b['peak_rss_mb']:14.2f}  "
            f"{a['forward_mb'] / max(b['forward_mb'], 1e-9):20.2f}"
        )
    print(
        f"\nparameters: ours {rows[0]['parameters']:,}, transformers {rows[1]['parameters']:,}; "
        f"threads {rows[0]['threads']}; peak counter reset: {rows[0]['peak_reset']}"
    )
    if args.json:
        out = []
        for T in lengths:
            ref = next(r for r in rows if r["impl"] == "transformers" and r["T"] == T)
            for r in (x for x in rows if x["T"] == T):
                out.append(
                    dict(
                        bench="longformer-base" if not args.quick else "longformer (quick)",
                        shape=f"B=1 T={T}",
                        dtype="fp32",
                        impl="bertfamily" if r["impl"] == "ours" else "transformers",
                        seconds=round(r["seconds"], 3),
                        peak_rss_mb=round(r["peak_rss_mb"]),
                        forward_mb=round(r["forward_mb"]),
                        ratio_vs_transformers_fp32=round(ref["seconds"] / r["seconds"], 2),
                        memory_ratio_vs_transformers=round(
                            r["peak_rss_mb"] / ref["peak_rss_mb"], 2
                        ),
                    )
                )
        print(json.dumps(out))


if __name__ == "__main__":
    main()
