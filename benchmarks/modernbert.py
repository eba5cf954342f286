"""ModernBERT-base forward on CPU: bertfamily against transformers' ModernBertModel, same weights.

The modernbert-base shape (22 layers, H = 768, GeGLU 1152, rotary positions, a 128-token local
window in all but every third layer; random weights, fp32, no gradients), B = 1, at T = 512 and
T = 8192. transformers builds the random model and saves it once; bertfamily loads that
directory (`from_pretrained`), so both run the same weights (their outputs are compared at the
first length).

Each implementation lives in its own long-running child process (its peak-memory counter is its
own), at a fixed number of torch threads and one OpenMP wait policy (PASSIVE, the one
`import bertfamily` sets, unless OMP_WAIT_POLICY is set). Rounds are interleaved: in every
round each child runs one forward at each length, the order of the two alternating from round
to round, so that the load of a shared machine falls on both alike; the per-round ratio
ours / transformers is reported with its median. Forward memory: the child's peak resident
memory during the forward minus its resident memory just before (the peak counter is reset
through /proc/self/clear_refs). The JSON records the machine: CPU model and flags, cores,
threads, the load averages before and after, the nice value, versions.

    nice -n 10 python benchmarks/modernbert.py                 # 4 rounds at 512, 2 at 8192
    python benchmarks/modernbert.py --quick                    # tiny sizes, seconds
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from machine import cpu_flags, cpu_model  # noqa: E402  (benchmarks/machine.py)

QUICK = dict(
    num_hidden_layers=3,
    hidden_size=64,
    num_attention_heads=4,
    intermediate_size=96,
    vocab_size=1000,
    pad_token_id=0,
    sep_token_id=2,
    local_attention=16,
)


OMP_WAIT_POLICY = os.environ.get("OMP_WAIT_POLICY", "PASSIVE")


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


def config(quick: bool):
    from bertfamily import EncoderConfig

    return EncoderConfig.from_preset("modernbert-base", **(QUICK if quick else {}))


def save_reference(directory: Path, quick: bool) -> int:
    """transformers' random ModernBertModel of the preset's config.json, saved; its parameters."""
    import torch
    import transformers

    from bertfamily.checkpoints.io import config_to_hf

    transformers.logging.set_verbosity_error()
    hf = config_to_hf(config(quick), "ModernBertModel")
    hf.pop("model_type")
    torch.manual_seed(0)
    model = transformers.ModernBertModel(transformers.ModernBertConfig(**hf)).eval()
    model.save_pretrained(directory)
    return sum(p.numel() for p in model.parameters())


def child(impl: str, directory: Path, threads: int, vocab: int) -> None:
    """Serve forwards: read a length T per stdin line, answer one JSON line."""
    import numpy as np
    import torch

    torch.set_num_threads(threads)
    if impl == "bertfamily":
        import bertfamily as bf

        model = bf.from_pretrained(directory, dtype=torch.float32)
    else:
        import transformers

        transformers.logging.set_verbosity_error()
        model = transformers.ModernBertModel.from_pretrained(directory, dtype=torch.float32)
    model.eval()
    info = dict(parameters=sum(p.numel() for p in model.parameters()))
    if impl == "transformers":
        info["attn_implementation"] = model.config._attn_implementation
    with torch.no_grad():  # warm-up (lazy initialisation, first allocations)
        model(input_ids=torch.randint(3, vocab, (1, 512)))
    print(json.dumps(info), flush=True)
    for line in sys.stdin:
        T, keep = (int(x) for x in line.split())
        ids = torch.randint(3, vocab, (1, T), generator=torch.Generator().manual_seed(T))
        with torch.no_grad():
            exact = _reset_peak()
            before = _status_kib("VmRSS")
            t0 = time.perf_counter()
            out = model(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state
            seconds = time.perf_counter() - t0
            peak = _status_kib("VmHWM")
        reply = dict(seconds=seconds, forward_mb=(peak - before) / 1024, peak_reset=exact)
        if keep:  # the output itself, for the agreement check
            path = directory / f"out-{impl}-{T}.npy"
            np.save(path, out[0].numpy())
            reply["output"] = str(path)
        del out
        print(json.dumps(reply), flush=True)


def _start(impl: str, directory: Path, threads: int, vocab: int) -> tuple[subprocess.Popen, dict]:
    cmd = [sys.executable, __file__, "--child", impl, str(directory), str(threads), str(vocab)]
    env = {
        **os.environ,
        "TRANSFORMERS_VERBOSITY": "error",
        "PYTHONWARNINGS": "ignore",
        # one OpenMP wait policy for both (the one `import bertfamily` sets when unset)
        "OMP_WAIT_POLICY": OMP_WAIT_POLICY,
    }
    proc = subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, bufsize=1
    )
    return proc, json.loads(proc.stdout.readline())


def _ask(proc: subprocess.Popen, T: int, keep: bool) -> dict:
    proc.stdin.write(f"{T} {int(keep)}\n")
    proc.stdin.flush()
    line = proc.stdout.readline()
    if not line:
        sys.exit(f"a child died at T={T} (see its stderr above)")
    return json.loads(line)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    ap.add_argument("--lengths", type=int, nargs="+", default=[512, 8192])
    ap.add_argument("--rounds", type=int, nargs="+", default=[4, 2], help="rounds per length")
    ap.add_argument("--threads", type=int, default=2, help="torch threads of each child")
    ap.add_argument("--json", type=Path, default=ROOT / "benchmarks/results/modernbert.json")
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        impl, directory, threads, vocab = args.child
        child(impl, Path(directory), int(threads), int(vocab))
        return
    import numpy as np
    import torch
    import transformers

    if args.quick:
        args.lengths, args.rounds = [128, 512], [2, 2]
    rounds = dict(zip(args.lengths, args.rounds))
    load_before = [round(x, 2) for x in os.getloadavg()]
    started = time.time()
    impls = ("bertfamily", "transformers")
    with tempfile.TemporaryDirectory(prefix="modernbert-bench-") as tmp:
        directory = Path(tmp)
        n_ref = save_reference(directory, args.quick)
        vocab = config(args.quick).vocab_size
        children = {i: _start(i, directory, args.threads, vocab) for i in impls}
        runs: dict[int, dict[str, list[dict]]] = {T: {i: [] for i in impls} for T in rounds}
        agreement = None
        for r in range(max(rounds.values())):
            order = impls if r % 2 == 0 else impls[::-1]
            for T in args.lengths:
                if r >= rounds[T]:
                    continue
                for impl in order:
                    keep = r == 0 and T == args.lengths[0]
                    result = _ask(children[impl][0], T, keep)
                    runs[T][impl].append(result)
                    print(
                        f"round {r + 1}  T={T:5d}  {impl:>12}  {result['seconds']:8.2f} s"
                        f"  forward +{result['forward_mb']:7.0f} MB",
                        flush=True,
                    )
                if r == 0 and T == args.lengths[0]:
                    a, b = (np.load(runs[T][i][0]["output"]) for i in impls)
                    agreement = dict(T=T, max_abs_difference=float(np.abs(a - b).max()))
        for proc, _ in children.values():
            proc.stdin.close()
            proc.wait(timeout=60)
    rows = []
    for T in args.lengths:
        ours, ref = runs[T]["bertfamily"], runs[T]["transformers"]
        ratios = [a["seconds"] / b["seconds"] for a, b in zip(ours, ref)]
        memory = [a["forward_mb"] / max(b["forward_mb"], 1e-9) for a, b in zip(ours, ref)]
        rows.append(
            dict(
                shape=f"B=1 T={T}",
                rounds=len(ratios),
                seconds={i: [round(x["seconds"], 3) for x in runs[T][i]] for i in impls},
                forward_mb={i: [round(x["forward_mb"]) for x in runs[T][i]] for i in impls},
                median_seconds={
                    i: round(statistics.median(x["seconds"] for x in runs[T][i]), 3) for i in impls
                },
                median_forward_mb={
                    i: round(statistics.median(x["forward_mb"] for x in runs[T][i])) for i in impls
                },
                time_ratio_ours_over_transformers=[round(x, 3) for x in ratios],
                median_time_ratio=round(statistics.median(ratios), 3),
                median_forward_memory_ratio=round(statistics.median(memory), 3),
            )
        )
        print(
            f"T={T:5d}: time ours/transformers median {rows[-1]['median_time_ratio']:.2f} "
            f"(rounds {', '.join(f'{x:.2f}' for x in ratios)}); forward memory ratio "
            f"{rows[-1]['median_forward_memory_ratio']:.2f}",
            flush=True,
        )
    result = dict(
        benchmark="modernbert",
        model="modernbert-base shape"
        + (" (quick: tiny sizes)" if args.quick else "")
        + ", random weights (transformers' init, saved once), fp32, B=1, no gradients",
        parameters={"bertfamily": children["bertfamily"][1]["parameters"], "transformers": n_ref},
        transformers_attention=children["transformers"][1].get("attn_implementation"),
        agreement=agreement,
        peak_reset=all(x["peak_reset"] for T in runs for i in impls for x in runs[T][i]),
        rows=rows,
        machine=dict(
            cpu=cpu_model(),
            cpu_flags=cpu_flags(),
            cpus=os.cpu_count(),
            threads_per_child=args.threads,
            omp_wait_policy=OMP_WAIT_POLICY,
            nice=os.nice(0),
            load_average_at_start=load_before,
            load_average_at_end=[round(x, 2) for x in os.getloadavg()],
            wall_seconds=round(time.time() - started),
        ),
        versions=dict(torch=torch.__version__, transformers=transformers.__version__),
    )
    if not args.quick:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        from bertfamily.files import write_text_atomic

        write_text_atomic(args.json, json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.json}")
    else:
        print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
