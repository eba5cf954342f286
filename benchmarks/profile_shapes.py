"""Where the time goes, bertfamily vs transformers, for the shapes whose speed goals are missed.

For each shape (BERT-base variable batch 32 × (16..256) — the lengths of `benchmarks/run.py` —,
BERT-base B=1 T=512, DeBERTa-base B=8 T=128; random weights, fp32, the same weights in both
libraries) one forward pass of each library is profiled with `torch.profiler` after a warm-up,
and each operator's *self* CPU time is put in one category: matrix multiplies (GEMM: addmm,
mm, bmm, baddbmm, linear's kernels), attention kernels (scaled_dot_product_attention and its
flash/math kernels, softmax), GELU, LayerNorm, copies and gathers (copy_, index, index_select,
cat, contiguous, masked_fill, scatter, where) and the rest. Reported per library: total
milliseconds, each category's milliseconds and share, and the ratio of transformers' total to
ours; the ceiling that removing all padding can give (padded FLOPs / real-token FLOPs,
`benchmarks/run.py`'s `encoder_flops`); and the bound that follows from the GEMMs both run: if
every non-GEMM millisecond of ours were free, the ratio would be transformers' total / our GEMM
time.

    python benchmarks/profile_shapes.py            # writes benchmarks/results/profile_shapes.json
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import warnings
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))
from machine import cpu_model  # noqa: E402  (benchmarks/machine.py)
from run import encoder_flops, make_batch  # noqa: E402  (benchmarks/run.py: the same batches)

warnings.filterwarnings("ignore")

CATEGORIES = {
    "gemm": ("addmm", "aten::mm", "bmm", "baddbmm", "mkldnn_linear", "aten::linear", "matmul"),
    "attention": ("scaled_dot_product", "flash_attention", "softmax"),
    "gelu": ("gelu",),
    "layer_norm": ("layer_norm",),
    "copies": (
        "copy_",
        "index",
        "gather",
        "cat",
        "contiguous",
        "masked_fill",
        "scatter",
        "where",
        "clone",
    ),
}


def category(op: str) -> str:
    for name, keys in CATEGORIES.items():
        if any(k in op for k in keys):
            return name
    return "other"


def profile_once(fn, repeats: int) -> dict:
    """Self CPU milliseconds per category of one call (the mean over ``repeats`` calls)."""
    fn()  # warm-up
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(repeats):
            fn()
    out: dict[str, float] = {}
    for event in prof.key_averages():
        c = category(event.key)
        out[c] = out.get(c, 0.0) + event.self_cpu_time_total / 1000 / repeats
    total = sum(out.values())
    return {
        "total_ms": round(total, 2),
        "ms": {k: round(v, 2) for k, v in sorted(out.items(), key=lambda kv: -kv[1])},
        "share": {k: round(v / total, 3) for k, v in sorted(out.items(), key=lambda kv: -kv[1])},
    }


def models(kind: str):
    import transformers

    import bertfamily as bf

    torch.manual_seed(0)
    if kind == "bert":
        ref = transformers.BertModel(transformers.BertConfig(attn_implementation="sdpa"))
    else:
        ref = transformers.DebertaModel(transformers.DebertaConfig())
    ref.eval()
    with tempfile.TemporaryDirectory() as tmp:
        ref.save_pretrained(tmp)
        ours = bf.from_pretrained(tmp).eval()
    return ours, ref


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--json", type=Path, default=ROOT / "benchmarks/results/profile_shapes.json"
    )
    args = parser.parse_args()
    g = torch.Generator().manual_seed(0)
    variable = torch.randint(16, 257, (32,), generator=g).tolist()  # as benchmarks/run.py
    shapes = {
        "bert-base variable 32×(16..256)": ("bert", variable),
        "bert-base B=1 T=512": ("bert", [512]),
        "deberta-base B=8 T=128": ("deberta", [128] * 8),
    }
    results = {}
    loaded: dict[str, tuple] = {}
    for name, (kind, lengths) in shapes.items():
        if kind not in loaded:
            loaded[kind] = models(kind)
        ours, ref = loaded[kind]
        ids, mask = make_batch(lengths, ref.config.vocab_size, 0)

        def run_ours():
            with torch.inference_mode():
                ours(ids, mask)

        def run_ref():
            with torch.inference_mode():
                ref(input_ids=ids, attention_mask=mask)

        a, b = profile_once(run_ours, args.repeats), profile_once(run_ref, args.repeats)
        gemm = a["ms"].get("gemm", 0.0)
        results[name] = {
            "real_tokens": sum(lengths),
            "padded_positions": len(lengths) * max(lengths),
            # what removing all padding can give at most: padded FLOPs / real-token FLOPs
            "useful_flop_ceiling": round(
                encoder_flops([max(lengths)] * len(lengths), 768, 3072, 12)
                / encoder_flops(lengths, 768, 3072, 12),
                2,
            ),
            "bertfamily": a,
            "transformers": b,
            "ratio_transformers_over_ours": round(b["total_ms"] / a["total_ms"], 2),
            "bound_if_only_our_gemms_remained": round(b["total_ms"] / gemm, 2) if gemm else None,
        }
        print(name, json.dumps(results[name], indent=1), flush=True)
    out = {
        "script": "benchmarks/profile_shapes.py",
        "command": "python " + " ".join(["benchmarks/profile_shapes.py", *sys.argv[1:]]),
        "machine": {
            "cpu": cpu_model(),
            "threads": torch.get_num_threads(),
            "python": platform.python_version(),
            "torch": torch.__version__,
        },
        "results": results,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(out, indent=1) + "\n")
    print("wrote", args.json)


if __name__ == "__main__":
    main()
