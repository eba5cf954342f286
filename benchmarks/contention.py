"""Speed on a busy machine: bertfamily and the tools users compare it with, idle and with one
core taken by another process, in one run.

Each measurement runs in a fresh worker process (``--worker``), because the OpenMP wait policy
is read once, when torch loads, and the thread count is chosen when a command starts: a worker
sees exactly what a user's process sees. Every system is what its users get by default:

- "bertfamily": `import bertfamily` first (it sets its OpenMP wait default: ``PASSIVE`` until
  issue 45, a bounded ``GOMP_SPINCOUNT`` since; committed results are of the former), the
  thread count of every command (`runtime.apply_threads(0)`: one per free core), the main job
  (`SentenceEmbedder.encode`, what ``bertfamily embed`` runs) or a fine-tuning step;
- "sentence-transformers" / "transformers": torch's defaults (one thread per core, spinning
  waits);
and, to show which change does what, "bertfamily, ACTIVE wait + 2 threads" (the previous
defaults), "bertfamily, per-sequence attention" (the previous packed attention, one SDPA call
per sequence) and "sentence-transformers, PASSIVE wait".

Phases: "idle", then "busy" (one ``while True: pass`` process for the whole phase, started
before the workers so that they see it). Rounds are interleaved: round r runs every system once,
in a rotated order; the median over rounds is reported with every time. Jobs: "embed" (MiniLM,
the fetched Austen lines, batch 32: sentences/s) and "finetune" (MiniLM + a new 3-class head,
AdamW, batch 16 of the same lines: steps/s).

    nice -n 5 python benchmarks/contention.py             # ~10 min on an idle 2-core machine
    python benchmarks/contention.py --quick               # 2 rounds, fewer sentences

Writes benchmarks/results/contention.json (CPU model and flags, load average before and after).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SYSTEMS = {
    # name: (job, environment overrides, worker options)
    "bertfamily": ("embed", {}, ["--engine", "bertfamily"]),
    "bertfamily, ACTIVE wait + 2 threads": (
        "embed",
        {"OMP_WAIT_POLICY": "ACTIVE"},
        ["--engine", "bertfamily", "--threads", "2"],
    ),
    "bertfamily, per-sequence attention": (
        "embed",
        {},
        ["--engine", "bertfamily", "--strategy", "per_sequence"],
    ),
    "sentence-transformers": ("embed", {}, ["--engine", "sentence-transformers"]),
    "sentence-transformers, PASSIVE wait": (
        "embed",
        {"OMP_WAIT_POLICY": "PASSIVE"},
        ["--engine", "sentence-transformers"],
    ),
    "bertfamily finetune": ("finetune", {}, ["--engine", "bertfamily"]),
    "transformers finetune": ("finetune", {}, ["--engine", "transformers"]),
}


def sentences(n: int) -> list[str]:
    """Every k-th line of the Austen novels with at least 3 words (the embed benchmark's set)."""
    sys.path.insert(0, str(ROOT / "src"))
    from bertfamily.resources.cache import fetch

    lines = (fetch("janeausten") / "austen.txt").read_text(encoding="utf-8").splitlines()
    lines = [x.strip() for x in lines if len(x.split()) >= 3 and not x.isupper()]
    return lines[:: len(lines) // n][:n]


def worker(args) -> None:
    """Run one job once (after one warm-up) and print {"seconds": ..., "threads": ...}."""
    texts = json.loads(Path(args.texts).read_text())
    model_dir = args.model_dir
    if args.engine == "bertfamily":
        sys.path.insert(0, str(ROOT / "src"))
        import bertfamily  # noqa: F401  (sets the wait policy before torch loads)
        from bertfamily.runtime import apply_threads

        apply_threads(args.threads)
    import torch

    if args.engine != "bertfamily" and args.threads:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()
    if args.job == "embed":
        if args.engine == "bertfamily":
            from bertfamily.modules.attention import SelfAttention
            from bertfamily.pipelines.embedding.embed import SentenceEmbedder

            if args.strategy:
                SelfAttention.packed_strategy = args.strategy
            model = SentenceEmbedder(model_dir, dtype=torch.float32)

            def run():
                return model.encode(texts, batch_size=32)
        else:
            from sentence_transformers import SentenceTransformer

            model = SentenceTransformer(model_dir, device="cpu")

            def run():
                return model.encode(texts, batch_size=32, normalize_embeddings=True)

        run()  # warm-up
        t0 = time.perf_counter()
        run()
        seconds = time.perf_counter() - t0
        print(json.dumps({"seconds": seconds, "threads": threads, "items": len(texts)}))
        return
    # finetune: the same steps in both libraries (new 3-class head, AdamW 2e-5, batch 16)
    steps, batch = 6, texts[:16]
    labels = torch.tensor([i % 3 for i in range(len(batch))])
    if args.engine == "bertfamily":
        import bertfamily as bf

        model = bf.from_pretrained(model_dir, heads=["classify"], num_labels=3, new_heads=True)
        tok = bf.load_tokenizer(model_dir)
        enc = tok(batch, padding=True, return_tensors="pt")
    else:
        import transformers

        transformers.logging.set_verbosity_error()
        model = transformers.AutoModelForSequenceClassification.from_pretrained(
            model_dir, num_labels=3
        )
        tok = transformers.AutoTokenizer.from_pretrained(model_dir)
        enc = tok(batch, padding=True, return_tensors="pt")
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=2e-5)

    def step():
        out = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"], labels=labels)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()  # warm-up
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    seconds = time.perf_counter() - t0
    print(json.dumps({"seconds": seconds, "threads": threads, "items": steps}))


def run_worker(name: str, texts_file: Path, model_dir: str, texts_per_job: dict) -> dict:
    job, env_over, opts = SYSTEMS[name]
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS")}
    env.update(env_over)
    cmd = [sys.executable, __file__, "--worker", "--job", job, "--texts", str(texts_file),
           "--model-dir", model_dir, *opts]  # fmt: skip
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1200)
    if out.returncode != 0:
        raise RuntimeError(f"{name} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--job", default="embed", help=argparse.SUPPRESS)
    p.add_argument("--engine", default="bertfamily", help=argparse.SUPPRESS)
    p.add_argument("--strategy", default=None, help=argparse.SUPPRESS)
    p.add_argument("--texts", default=None, help=argparse.SUPPRESS)
    p.add_argument("--model-dir", default=None, help=argparse.SUPPRESS)
    p.add_argument("--threads", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--sentences", type=int, default=400)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="100 sentences, 2 rounds")
    p.add_argument("--only", default="", help="comma-separated system names (default: all)")
    p.add_argument("--json", type=Path, default=ROOT / "benchmarks/results/contention.json")
    args = p.parse_args()
    if args.worker:
        return worker(args)
    if args.quick:
        args.sentences, args.rounds = 100, 2
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from machine import cpu_model  # benchmarks/machine.py

    sys.path.insert(0, str(ROOT / "src"))
    from bertfamily.files import write_text_atomic
    from bertfamily.resources.cache import fetch

    names = [n.strip() for n in args.only.split(",") if n.strip()] or list(SYSTEMS)
    model_dir = str(fetch("all-MiniLM-L6-v2"))
    import tempfile

    texts_file = Path(tempfile.mkdtemp()) / "texts.json"
    texts_file.write_text(json.dumps(sentences(args.sentences)))
    load_before = os.getloadavg()
    phases: dict[str, dict] = {}
    try:
        for phase in ("idle", "busy"):
            spinner = None
            if phase == "busy":
                spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
                time.sleep(1.0)
            runs: dict[str, list[dict]] = {n: [] for n in names}
            try:
                for r in range(args.rounds):
                    order = names[r % len(names) :] + names[: r % len(names)]
                    for name in order:
                        runs[name].append(run_worker(name, texts_file, model_dir, {}))
                    print(f"{phase}: round {r + 1}/{args.rounds} done", flush=True)
            finally:
                if spinner is not None:
                    spinner.kill()
                    spinner.wait()
            rows = {}
            for name, rs in runs.items():
                times = [x["seconds"] for x in rs]
                med = statistics.median(times)
                unit = "sentences_per_s" if SYSTEMS[name][0] == "embed" else "steps_per_s"
                rows[name] = {
                    unit: round(rs[0]["items"] / med, 2),
                    "times_s": [round(t, 3) for t in times],
                    "threads": sorted({x["threads"] for x in rs}),
                }
            phases[phase] = rows
    finally:
        texts_file.unlink(missing_ok=True)

    def rate(phase, name):
        row = phases[phase].get(name, {})
        return row.get("sentences_per_s") or row.get("steps_per_s")

    ratios = {}
    for phase in phases:
        if "bertfamily" in names and "sentence-transformers" in names:
            ratios[f"{phase}: bertfamily / sentence-transformers (embed)"] = round(
                rate(phase, "bertfamily") / rate(phase, "sentence-transformers"), 3
            )
        if "bertfamily finetune" in names and "transformers finetune" in names:
            ratios[f"{phase}: bertfamily / transformers (finetune steps/s)"] = round(
                rate(phase, "bertfamily finetune") / rate(phase, "transformers finetune"), 3
            )
    if "busy" in phases and "idle" in phases:
        for name in names:
            ratios[f"busy / idle: {name}"] = round(rate("busy", name) / rate("idle", name), 3)
    import torch

    result = {
        "benchmark": "contention",
        "cpu": cpu_model(),
        "cpus": os.cpu_count(),
        "cpu_flags": sorted(
            f
            for f in (Path("/proc/cpuinfo").read_text().split("flags", 2)[1].split("\n")[0]).split()
            if any(k in f for k in ("avx", "amx", "vnni", "fma"))
        ),
        "torch": torch.__version__,
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "model": "all-MiniLM-L6-v2 (real, fetched)",
        "sentences": args.sentences,
        "rounds": args.rounds,
        "busy": "one extra process running `while True: pass` during the busy phase",
        "phases": phases,
        "ratios": ratios,
        "command": "python benchmarks/contention.py " + " ".join(sys.argv[1:]),
    }
    write_text_atomic(args.json, json.dumps(result, indent=2) + "\n")
    print(json.dumps(ratios, indent=2))


if __name__ == "__main__":
    main()
