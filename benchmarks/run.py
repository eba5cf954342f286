"""Side-by-side benchmarks: bertfamily vs transformers (and ONNX Runtime where installed).

Both implementations run on the SAME weights (a random transformers model saved with
save_pretrained and loaded by bertfamily), interleaved in one process: warm-up, then repeats,
medians. Throughput counts real (non-padding) tokens only.

    python benchmarks/run.py            # full run (about 10 minutes on a 2-core CPU)
    python benchmarks/run.py --quick    # tiny sizes, one repeat (CI smoke test)
    python benchmarks/run.py --only bert,pretrain --repeats 5
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
warnings.filterwarnings("ignore")

import torch  # noqa: E402

HERE = Path(__file__).resolve().parent


def median_time(fn, repeats: int, warmup: int = 1) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def interleaved(fns: dict, repeats: int, warmup: int = 1) -> dict[str, float]:
    """Median seconds of each callable, measured round-robin so drift hits all equally."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            t = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t)
    return {k: statistics.median(v) for k, v in times.items()}


def matmul_peak(dtype: torch.dtype, n: int, repeats: int) -> float:
    """Measured GEMM rate in GFLOP/s for n×n×n products."""
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    t = median_time(lambda: a @ b, repeats, warmup=2)
    return 2 * n**3 / t / 1e9


def encoder_flops(lengths: list[int], H: int, I: int, L: int) -> float:
    """Useful FLOPs of a BERT encoder forward on sequences of these lengths (real tokens only):
    per layer and token 2·(4H² + 2HI) for the projections and FFN, plus 4·n·H per token for
    QKᵀ and AV over its own n tokens."""
    total = 0.0
    for n in lengths:
        total += L * n * (2 * (4 * H * H + 2 * H * I) + 4 * n * H)
    return total


def make_batch(lengths: list[int], vocab: int, pad: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    T = max(lengths)
    mask = (torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]).long()
    ids = torch.randint(1000 % vocab, vocab, (len(lengths), T), generator=g)
    return ids.masked_fill(mask == 0, pad), mask


def bench_bert(args, rows: list[dict], peaks: dict) -> None:
    import transformers

    import bertfamily as bf

    if args.quick:
        cfg = dict(
            hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256
        )
        shapes = {"fixed B=2 T=16": [16] * 2, "variable 4×(4..32)": None, "B=1 T=32": [32]}
        lo, hi, nvar = 4, 32, 4
    else:
        cfg = {}
        shapes = {"fixed B=8 T=128": [128] * 8, "variable 32×(16..256)": None, "B=1 T=512": [512]}
        lo, hi, nvar = 16, 256, 32
    g = torch.Generator().manual_seed(0)
    var = torch.randint(lo, hi + 1, (nvar,), generator=g).tolist()
    torch.manual_seed(0)
    hf_config = transformers.BertConfig(**cfg, attn_implementation="sdpa")
    ref = transformers.BertModel(hf_config).eval()
    with tempfile.TemporaryDirectory() as tmp:
        ref.save_pretrained(tmp)
        ours = bf.from_pretrained(tmp).eval()
    H, I, L = hf_config.hidden_size, hf_config.intermediate_size, hf_config.num_hidden_layers
    ort_session = None
    try:  # ONNX Runtime where installed: the same weights, exported by bertfamily (padded graph)
        import onnxruntime

        from bertfamily.export import export_onnx

        onnx_path = Path(tempfile.mkdtemp()) / "bert.onnx"
        export_onnx(ours, onnx_path)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = torch.get_num_threads()
        ort_session = onnxruntime.InferenceSession(str(onnx_path), options)
    except ImportError:
        pass
    for dtype_name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        ref.to(dtype)
        ours.to(dtype)
        for shape_name, lengths in shapes.items():
            lengths = lengths or var
            ids, mask = make_batch(lengths, hf_config.vocab_size, 0)
            real = sum(lengths)

            def run_ours():
                with torch.inference_mode():
                    ours(ids, mask)

            def run_ref():
                with torch.inference_mode():
                    ref(input_ids=ids, attention_mask=mask)

            fns = {"bertfamily": run_ours, "transformers": run_ref}
            if ort_session is not None and dtype_name == "fp32":
                feed = {
                    "input_ids": ids.numpy(),
                    "attention_mask": mask.numpy(),
                    "token_type_ids": torch.zeros_like(ids).numpy(),
                }
                fns["onnxruntime"] = lambda: ort_session.run(None, feed)
            t = interleaved(fns, args.repeats)
            flops = encoder_flops(lengths, H, I, L)
            peak = peaks[dtype_name]
            for impl, sec in t.items():
                rows.append(
                    dict(
                        bench="bert-base" if not args.quick else "bert (quick)",
                        shape=shape_name,
                        dtype=dtype_name,
                        impl=impl,
                        seconds=round(sec, 4),
                        tokens_per_s=round(real / sec, 1),
                        gflops=round(flops / sec / 1e9, 1),
                        frac_of_peak=round(flops / sec / 1e9 / peak, 3),
                        ratio_vs_transformers_fp32=None,
                    )
                )
    # ratios against transformers fp32 of the same shape
    base = {
        r["shape"]: r["seconds"]
        for r in rows
        if r.get("impl") == "transformers"
        and r["dtype"] == "fp32"
        and r["bench"].startswith("bert")
    }
    for r in rows:
        if r["bench"].startswith("bert") and r.get("shape") in base:
            r["ratio_vs_transformers_fp32"] = round(base[r["shape"]] / r["seconds"], 2)
    # accuracy of bf16: mean-pooled cosine vs fp32 on the variable batch
    ids, mask = make_batch(var, hf_config.vocab_size, 0)
    with torch.inference_mode():
        ours.to(torch.float32)
        a = ours(ids, mask).last_hidden_state
        ours.to(torch.bfloat16)
        b = ours(ids, mask).last_hidden_state.float()
    m = mask[..., None].float()
    pa, pb = (a * m).sum(1) / m.sum(1), (b * m).sum(1) / m.sum(1)
    cos = torch.nn.functional.cosine_similarity(pa, pb).min().item()
    rows.append(
        dict(
            bench="bf16 accuracy",
            shape="variable",
            dtype="bf16",
            impl="bertfamily",
            min_mean_pooled_cosine_vs_fp32=round(cos, 6),
        )
    )


def bench_pretrain(args, rows: list[dict]) -> None:
    """One MLM training step (batch 64 × 128, 15% masked): bertfamily gathers the masked
    positions before the vocabulary projection; transformers' BertForMaskedLM computes logits
    everywhere."""
    import transformers

    import bertfamily as bf

    configs = {
        "bert-tiny": dict(
            hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=512
        ),
        "4L/256": dict(
            hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024
        ),
    }
    B, T = (8, 32) if args.quick else (64, 128)
    for name, cfg in configs.items():
        torch.manual_seed(0)
        hf_config = transformers.BertConfig(**cfg, attn_implementation="sdpa")
        ref = transformers.BertForMaskedLM(hf_config).train()
        with tempfile.TemporaryDirectory() as tmp:
            ref.save_pretrained(tmp)
            ours = bf.from_pretrained(tmp).train()
        ids, mask = make_batch([T] * B, hf_config.vocab_size, 0)
        g = torch.Generator().manual_seed(1)
        selected = torch.rand(B, T, generator=g) < 0.15
        labels = ids.masked_fill(~selected, -100)
        opt_ours = torch.optim.AdamW(ours.parameters(), lr=1e-4)
        opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-4)

        def step_ours():
            out = ours(ids, mask, masked_positions=selected)
            loss = torch.nn.functional.cross_entropy(out.logits, ids[selected])
            loss.backward()
            opt_ours.step()
            opt_ours.zero_grad()

        def step_ref():
            loss = ref(input_ids=ids, attention_mask=mask, labels=labels).loss
            loss.backward()
            opt_ref.step()
            opt_ref.zero_grad()

        t = interleaved({"bertfamily": step_ours, "transformers": step_ref}, args.repeats)
        for impl, sec in t.items():
            rows.append(
                dict(
                    bench=f"MLM train step {name}",
                    shape=f"{B}×{T}",
                    dtype="fp32",
                    impl=impl,
                    seconds=round(sec, 4),
                    steps_per_s=round(1 / sec, 2),
                    ratio_vs_transformers_fp32=round(t["transformers"] / sec, 2),
                )
            )


def bench_script(name: str, args, rows: list[dict]) -> None:
    """Family benchmarks that live in their own scripts (each prints JSON rows on its last line)."""
    script = HERE / f"{name}.py"
    if not script.exists():
        return
    cmd = [sys.executable, str(script), "--json"] + (["--quick"] if args.quick else [])
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    rows.extend(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="tiny sizes, one repeat")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--only", default="peak,bert,pretrain,deberta,longformer")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows as JSON")
    args = ap.parse_args()
    args.repeats = args.repeats or (1 if args.quick else 5)
    only = set(args.only.split(","))
    rows: list[dict] = []
    n = 256 if args.quick else 2048
    peaks = {
        "fp32": matmul_peak(torch.float32, n, args.repeats + 2),
        "bf16": matmul_peak(torch.bfloat16, n, args.repeats + 2),
    }
    rows.append(
        dict(bench="matmul peak", shape=f"{n}³", dtype="fp32", gflops=round(peaks["fp32"], 1))
    )
    rows.append(
        dict(bench="matmul peak", shape=f"{n}³", dtype="bf16", gflops=round(peaks["bf16"], 1))
    )
    if "bert" in only:
        bench_bert(args, rows, peaks)
    if "pretrain" in only:
        bench_pretrain(args, rows)
    for name in ("deberta", "longformer"):
        if name in only:
            bench_script(name, args, rows)
    print(
        f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads"
    )
    for r in rows:
        print(json.dumps(r, ensure_ascii=False))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
