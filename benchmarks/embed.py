"""The main job side by side: sentence embeddings of the real all-MiniLM-L6-v2 with `bertfamily`'s
`SentenceEmbedder` (what `bertfamily embed` runs), sentence-transformers, and ONNX Runtime on the
graph `bertfamily export` writes, plus the int8 variants, in one process with interleaved repeats.

Sentence sets (real text, fetched resource ``janeausten``): "austen", every k-th line of the six
novels with at least 3 words (``--sentences``, default 300); "queries", short lines of 4–10 words
(``--queries``, default 100), timed as a set of their own and used as the search queries.
Each system embeds each set once per repeat (batch 32, length-sorted batches in all three), in
a rotating order; the median time of ``--repeats`` gives sentences/s. Agreement of every system
with sentence-transformers fp32 (the reference): max |difference|, min and mean cosine, and the
top-10 overlap of each query's nearest "austen" sentences.

Systems: bertfamily fp32; sentence-transformers fp32; ONNX Runtime fp32 (our export, same
tokenisation and pooling code as bertfamily: `export.OnnxRuntimeModel`); bertfamily int8 (what
``--quantize int8`` runs: the accuracy-checked plan of `precision.cached_int8`, measured on a
disjoint Austen sample, applied by ONNX Runtime's per-channel quantiser to our export; the time to
build it is reported); the same plan run by torch's dynamic int8 (the engine not chosen); and,
for accuracy only, the naive plan: every Linear layer quantised with one scale per tensor.

Writes benchmarks/results/embed.json (CPU model and flags, threads, versions).
Run from the repository root: ``nice -n 10 python benchmarks/embed.py`` (default under ~5 min on
an idle 2-core machine; ``--quick``: 100 sentences, 30 queries, 2 repeats).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from machine import cpu_model  # noqa: E402  (benchmarks/machine.py)

from bertfamily.files import write_text_atomic  # noqa: E402


def sentence_sets(n_sentences: int, n_queries: int) -> tuple[list[str], list[str]]:
    """The "austen" and "queries" sets (offset 0: disjoint from the int8 calibration's)."""
    from bertfamily.resources.cache import fetch

    lines = (fetch("janeausten") / "austen.txt").read_text(encoding="utf-8").splitlines()
    lines = [x.strip() for x in lines if len(x.split()) >= 3 and not x.isupper()]
    short = [x for x in lines if 4 <= len(x.split()) <= 10]
    return lines[:: len(lines) // n_sentences][:n_sentences], short[1 :: len(short) // n_queries][
        :n_queries
    ]


def cpu_flags() -> list[str]:
    """The SIMD / matrix flags of /proc/cpuinfo that decide these kernels' speed."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    for line in text.splitlines():
        if line.startswith("flags"):
            flags = line.split(":", 1)[1].split()
            keep = ("avx", "fma", "amx", "vnni", "bf16", "f16c")
            return sorted(f for f in flags if any(k in f for k in keep))
    return []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=300)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--quick", action="store_true", help="100 sentences, 30 queries, 2 repeats")
    parser.add_argument("--json", type=Path, default=ROOT / "benchmarks/results/embed.json")
    args = parser.parse_args()
    if args.quick:
        args.sentences, args.queries, args.repeats = 100, 30, 2
    warnings.filterwarnings("ignore")
    import onnxruntime
    import sentence_transformers
    import torch
    from sentence_transformers import SentenceTransformer

    from bertfamily.convert.onnx import OnnxRuntimeModel, export_onnx
    from bertfamily.pipelines.embed import SentenceEmbedder
    from bertfamily.pipelines.precision import agreement, apply_int8, cached_int8, linear_layers
    from bertfamily.resources.cache import fetch

    threads = int(os.environ.get("OMP_NUM_THREADS", min(2, os.cpu_count() or 1)))
    torch.set_num_threads(threads)
    model_dir = fetch("all-MiniLM-L6-v2")
    sentences, queries = sentence_sets(args.sentences, args.queries)
    sets = {"austen": sentences, "queries": queries}
    bs = args.batch_size

    ours = SentenceEmbedder(model_dir, dtype="fp32")
    fp32_model = ours.model
    t0 = time.perf_counter()
    plan, ort_int8, _, _, from_cache = cached_int8(ours)
    plan_s = time.perf_counter() - t0
    torch_int8 = apply_int8(fp32_model, plan.quantized)
    naive_model = apply_int8(fp32_model, linear_layers(fp32_model), per_channel=False)
    st = SentenceTransformer(str(model_dir), device="cpu")

    tmp = Path(tempfile.mkdtemp())
    export_onnx(fp32_model, tmp / "model.onnx")
    ort_fp32 = OnnxRuntimeModel(tmp / "model.onnx", threads)

    def with_model(model):
        def run(texts):
            ours.model = model
            try:
                return ours.encode(texts, batch_size=bs)
            finally:
                ours.model = fp32_model

        return run

    systems = {
        "bertfamily fp32": with_model(fp32_model),
        "sentence-transformers fp32": lambda t: st.encode(
            t, batch_size=bs, normalize_embeddings=True, convert_to_numpy=True
        ),
        "onnxruntime fp32 (our export)": with_model(ort_fp32),
        "bertfamily int8 (--quantize int8: ONNX Runtime graph)": with_model(ort_int8),
        "torch dynamic int8 (same plan)": with_model(torch_int8),
    }
    timed = list(systems)
    vectors = {name: {s: fn(texts) for s, texts in sets.items()} for name, fn in systems.items()}
    vectors["naive int8 (all layers, per-tensor)"] = {
        s: with_model(naive_model)(texts) for s, texts in sets.items()
    }
    times: dict[str, dict[str, list[float]]] = {n: {s: [] for s in sets} for n in timed}
    for r in range(args.repeats):
        order = timed[r % len(timed) :] + timed[: r % len(timed)]
        for name in order:
            for s, texts in sets.items():
                t0 = time.perf_counter()
                systems[name](texts)
                times[name][s].append(time.perf_counter() - t0)
        print(f"repeat {r + 1}/{args.repeats} done", flush=True)

    ref = vectors["sentence-transformers fp32"]
    rows = {}
    for name, vecs in vectors.items():
        a = agreement(ref["austen"], vecs["austen"], ref["queries"], vecs["queries"], 10)
        row = {
            "max_abs_diff": float(f"{a.max_abs_diff:.3g}"),
            "min_cosine": round(a.min_cosine, 5),
            "mean_cosine": round(a.mean_cosine, 5),
            "top10_overlap": round(a.top_k_overlap, 4),
        }
        if name in times:
            for s, texts in sets.items():
                med = statistics.median(times[name][s])
                row[f"{s}_sentences_per_s"] = round(len(texts) / med, 1)
                row[f"{s}_times_s"] = [round(t, 3) for t in times[name][s]]
        rows[name] = row
    st_row = rows["sentence-transformers fp32"]
    ratios = {
        f"{name} vs sentence-transformers fp32, {s}": round(
            rows[name][f"{s}_sentences_per_s"] / st_row[f"{s}_sentences_per_s"], 3
        )
        for name in timed
        if name != "sentence-transformers fp32"
        for s in sets
    }
    ratios |= {
        f"bertfamily fp32 vs onnxruntime fp32, {s}": round(
            rows["bertfamily fp32"][f"{s}_sentences_per_s"]
            / rows["onnxruntime fp32 (our export)"][f"{s}_sentences_per_s"],
            3,
        )
        for s in sets
    }
    int8_vs_fp32 = agreement(
        vectors["bertfamily fp32"]["austen"],
        vectors["bertfamily int8 (--quantize int8: ONNX Runtime graph)"]["austen"],
        vectors["bertfamily fp32"]["queries"],
        vectors["bertfamily int8 (--quantize int8: ONNX Runtime graph)"]["queries"],
    )
    lengths = [len(s.split()) for s in sentences]
    result = {
        "benchmark": "embed",
        "cpu": cpu_model(),
        "cpu_flags": cpu_flags(),
        "threads": threads,
        "cpus": os.cpu_count(),
        "versions": {
            "torch": torch.__version__,
            "sentence_transformers": sentence_transformers.__version__,
            "onnxruntime": onnxruntime.__version__,
        },
        "model": "all-MiniLM-L6-v2 (real, fetched)",
        "sets": {
            "austen": {
                "sentences": len(sentences),
                "median_words": statistics.median(lengths),
                "max_words": max(lengths),
            },
            "queries": {"sentences": len(queries)},
        },
        "batch_size": bs,
        "repeats": args.repeats,
        "reference": "sentence-transformers fp32",
        "systems": rows,
        "ratios": ratios,
        "int8_plan": {
            "quantized": list(plan.quantized),
            "kept_fp32": list(plan.kept),
            "layer_errors_min_mean_cosine": {
                k: [round(v[0], 5), round(v[1], 5)] for k, v in plan.layer_errors.items()
            },
            "calibration_agreement": {
                "min_cosine": round(plan.agreement.min_cosine, 5),
                "top10_overlap": round(plan.agreement.top_k_overlap, 4),
            },
            "held_out_vs_bertfamily_fp32": {
                "min_cosine": round(int8_vs_fp32.min_cosine, 5),
                "mean_cosine": round(int8_vs_fp32.mean_cosine, 5),
                "top10_overlap": round(int8_vs_fp32.top_k_overlap, 4),
            },
            "plan_seconds": round(plan_s, 1),
            "plan_from_cache": from_cache,
        },
        "command": "python benchmarks/embed.py " + " ".join(sys.argv[1:]),
    }
    write_text_atomic(args.json, json.dumps(result, indent=2) + "\n")
    print(
        json.dumps({"ratios": ratios, "int8": result["int8_plan"]["held_out_vs_bertfamily_fp32"]})
    )


if __name__ == "__main__":
    main()
