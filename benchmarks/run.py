"""Side-by-side benchmarks: bertfamily vs transformers (and ONNX Runtime where installed).

Both implementations run on the SAME weights (a random transformers model saved with
save_pretrained and loaded by bertfamily), interleaved in one process: warm-up, then repeats,
medians. Throughput counts real (non-padding) tokens only.

Every timed row also gets ``gflops`` and ``frac_of_peak``: its useful FLOPs (on real tokens, a
multiply-add counted as 2) divided by its time, as a fraction of the machine's GEMM peak
measured in the same run (``matmul peak`` rows: the median rate of n×n×n fp32/bf16 products).
The FLOP formulas are in `encoder_flops`, `deberta_flops`, `longformer_flops` and `mlm_step_flops`;
both implementations of a row are charged the same useful FLOPs, so the fraction compares how
well each one uses the machine (padding, masked-out attention entries or logits at unmasked
positions are work, but not useful work). The first row describes the machine.

    python benchmarks/run.py            # full run (about 10 minutes on a 2-core CPU)
    python benchmarks/run.py --quick    # tiny sizes, one repeat (CI smoke test)
    python benchmarks/run.py --only bert,pretrain --repeats 5
    python benchmarks/run.py --dtypes fp32   # skip bf16 (CPUs without native bf16)
"""

from __future__ import annotations

import argparse
import copy
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
sys.path.insert(0, str(HERE))
from machine import cpu_model  # noqa: E402


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
    """Useful FLOPs of a BERT encoder forward on sequences of these lengths (real tokens only).

    Per layer and real token: 2·(4H² + 2HI) for the Q, K, V, output projections and the two
    feed-forward matrices (Vaswani et al. 2017 §3.2–3.3), plus 4·n·H for QKᵀ and A·V over the
    n tokens of its own sequence; so L · Σ_n n · (8H² + 4HI + 4nH). Embeddings, norms,
    softmax, the activation and the pooler are left out (elementwise or O(H) per token).
    """
    total = 0.0
    for n in lengths:
        total += L * n * (2 * (4 * H * H + 2 * H * I) + 4 * n * H)
    return total


def deberta_flops(B: int, T: int, H: int, I: int, L: int) -> float:
    """Useful FLOPs of a DeBERTa forward, B sequences of T real tokens (He et al. 2021 eq. 2):
    `encoder_flops` plus, per layer, the K^r and Q^r projections of the R = 2T - 1 relative
    rows the batch reads (2·2·R·H²) and the c2p and p2c products of every query (key) with
    those rows (2·2·B·T·R·H)."""
    R = 2 * T - 1
    return encoder_flops([T] * B, H, I, L) + L * (4 * R * H * H + 4 * B * T * R * H)


def longformer_flops(T: int, H: int, I: int, L: int, window: int, n_global: int = 1) -> float:
    """Useful FLOPs of a Longformer forward, B=1, T tokens, `n_global` global tokens
    (Beltagy et al. 2020 §3.1): per layer and token the projections and feed-forward
    2·(4H² + 2HI), the windowed QKᵀ and A·V over its 2w + 1 keys (w = window / 2) and the
    global keys, 4·(2w + 1 + n_global)·H; per global token its own global Q, K, V projections
    (2·3H²) and its attention over all T tokens (4·T·H)."""
    w = window // 2
    per_token = 2 * (4 * H * H + 2 * H * I) + 4 * (2 * w + 1 + n_global) * H
    return L * (T * per_token + n_global * (6 * H * H + 4 * T * H))


def mlm_step_flops(B: int, T: int, H: int, I: int, L: int, V: int, masked: int) -> float:
    """Useful FLOPs of one MLM training step: forward + backward ≈ 3 × forward (the backward
    pass computes two products per forward product) of the encoder on B×T tokens and of the
    MLM head (H×H transform and H×V decoder) at the ``masked`` positions only."""
    return 3 * (encoder_flops([T] * B, H, I, L) + masked * 2 * (H * H + H * V))


def add_peak_fraction(row: dict, flops: float, peaks: dict) -> dict:
    """Add ``gflops`` and ``frac_of_peak`` (of the same dtype's measured GEMM peak) to a timed
    row with ``seconds``."""
    rate = flops / row["seconds"] / 1e9
    peak = peaks["bf16" if row["dtype"] in ("bf16", "bfloat16") else "fp32"]
    row["gflops"] = float(f"{rate:.4g}")  # significant digits: tiny --quick rows stay > 0
    row["frac_of_peak"] = float(f"{rate / peak:.3g}")
    return row


def make_batch(lengths: list[int], vocab: int, pad: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    T = max(lengths)
    mask = (torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]).long()
    ids = torch.randint(1000 % vocab, vocab, (len(lengths), T), generator=g)
    return ids.masked_fill(mask == 0, pad), mask


def bench_bert(args, rows: list[dict], peaks: dict) -> None:
    import transformers

    import bertfamily as bf
    from bertfamily.modules.kernels import resolve_linear_kernel, use_kernel

    if args.quick:
        cfg = dict(
            hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256
        )
        shapes = {"fixed B=2 T=16": [16] * 2, "variable 4×(4..32)": None, "B=1 T=32": [32]}
        lo, hi, nvar = 4, 32, 4
    else:
        cfg = {}
        shapes = {
            "fixed B=8 T=128": [128] * 8,
            "variable 32×(16..256)": None,
            "B=1 T=16": [16],
            "B=1 T=128": [128],
            "B=1 T=512": [512],
        }
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

        from bertfamily.convert.onnx import export_onnx

        onnx_path = Path(tempfile.mkdtemp()) / "bert.onnx"
        export_onnx(ours, onnx_path)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = torch.get_num_threads()
        # no busy-waiting of ORT's idle workers after a run: they would take the cores from
        # the next (interleaved) call and slow whichever implementation runs after ORT
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        ort_session = onnxruntime.InferenceSession(str(onnx_path), options)
    except ImportError:
        pass
    for dtype_name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        if dtype_name not in args.dtypes:
            continue
        ref.to(dtype)
        ours.to(dtype)
        # what the pipelines run on the CPU (linear_kernel="auto"), where it is not F.linear
        kernel = resolve_linear_kernel("auto", dtype)[0]
        fast = None
        if kernel == "onednn":
            fast = copy.deepcopy(ours)
            use_kernel(fast, kernel)
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
            if fast is not None:

                def run_fast():
                    with torch.inference_mode():
                        fast(ids, mask)

                fns["bertfamily, oneDNN linears"] = run_fast
            if ort_session is not None and dtype_name == "fp32":
                feed = {
                    "input_ids": ids.numpy(),
                    "attention_mask": mask.numpy(),
                    "token_type_ids": torch.zeros_like(ids).numpy(),
                }
                fns["onnxruntime"] = lambda: ort_session.run(None, feed)
            # short inputs take milliseconds: more repeats so the median is not one noisy call
            t = interleaved(fns, args.repeats * (20 if max(lengths) <= 32 else 1))
            flops = encoder_flops(lengths, H, I, L)
            for impl, sec in t.items():
                row = dict(
                    bench="bert-base" if not args.quick else "bert (quick)",
                    shape=shape_name,
                    dtype=dtype_name,
                    impl=impl,
                    seconds=round(sec, 4),
                    tokens_per_s=round(real / sec, 1),
                    ratio_vs_transformers_fp32=None,
                )
                rows.append(add_peak_fraction(row, flops, peaks))
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
    if "bf16" not in args.dtypes:
        return
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


def bench_pretrain(args, rows: list[dict], peaks: dict) -> None:
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
        flops = mlm_step_flops(
            B,
            T,
            hf_config.hidden_size,
            hf_config.intermediate_size,
            hf_config.num_hidden_layers,
            hf_config.vocab_size,
            int(selected.sum()),
        )
        for impl, sec in t.items():
            row = add_peak_fraction(
                dict(
                    bench=f"MLM train step {name}",
                    shape=f"{B}×{T}",
                    dtype="fp32",
                    impl=impl,
                    seconds=round(sec, 4),
                    steps_per_s=round(1 / sec, 2),
                    ratio_vs_transformers_fp32=round(t["transformers"] / sec, 2),
                ),
                flops,
                peaks,
            )
            rows.append(row)


# The shapes the family scripts run (their defaults; --quick: their tiny sizes), for FLOPs.
SCRIPT_SHAPES = {
    "deberta": dict(B=8, T=128, H=768, I=3072, L=12),
    "deberta-quick": dict(B=2, T=16, H=32, I=37, L=2),
    "longformer": dict(H=768, I=3072, L=12, window=512),
    "longformer-quick": dict(H=64, I=128, L=2, window=32),
}


def bench_script(name: str, args, rows: list[dict], peaks: dict) -> None:
    """Family benchmarks that live in their own scripts (each prints JSON rows on its last
    line); their timed rows get the fraction of the GEMM peak here."""
    script = HERE / f"{name}.py"
    if not script.exists():
        return
    cmd = [sys.executable, str(script), "--json"] + (["--quick"] if args.quick else [])
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    shape = SCRIPT_SHAPES[name + ("-quick" if args.quick else "")]
    for row in json.loads(out.stdout.strip().splitlines()[-1]):
        if name == "deberta":
            row["seconds"] = round(shape["B"] * shape["T"] / row["tokens_per_s"], 4)
            add_peak_fraction(row, deberta_flops(**shape), peaks)
        elif name == "longformer":
            T = int(row["shape"].split("T=")[1])
            add_peak_fraction(row, longformer_flops(T, **shape), peaks)
        rows.append(row)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="tiny sizes, one repeat")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--only", default="peak,bert,pretrain,deberta,longformer")
    ap.add_argument("--dtypes", default="fp32,bf16", help="dtypes of the BERT rows")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows as JSON")
    args = ap.parse_args()
    args.repeats = args.repeats or (1 if args.quick else 5)
    only = set(args.only.split(","))
    args.dtypes = set(args.dtypes.split(","))
    import transformers

    rows: list[dict] = [
        dict(
            bench="machine",
            cpu=cpu_model(),
            cpus=os.cpu_count(),
            threads=torch.get_num_threads(),
            torch=torch.__version__,
            transformers=transformers.__version__,
            date=time.strftime("%Y-%m-%d"),
            command=" ".join(["python", "benchmarks/run.py"] + sys.argv[1:]),
        )
    ]
    n = 256 if args.quick else 2048
    peaks = {
        name: matmul_peak(dtype, n, args.repeats + 2)
        for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16))
        if name in args.dtypes or name == "fp32"
    }
    for name, gflops in peaks.items():
        rows.append(dict(bench="matmul peak", shape=f"{n}³", dtype=name, gflops=round(gflops, 1)))
    if "bert" in only:
        bench_bert(args, rows, peaks)
    if "pretrain" in only:
        bench_pretrain(args, rows, peaks)
    for name in ("deberta", "longformer"):
        if name in only:
            bench_script(name, args, rows, peaks)
    print(
        f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads"
    )
    for r in rows:
        print(json.dumps(r, ensure_ascii=False))
    if args.json:
        from bertfamily.files import write_text_atomic

        write_text_atomic(args.json, json.dumps(rows, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
