"""DeBERTa forward throughput: bertfamily vs transformers' DebertaModel on the same weights.

transformers' model (random init, deberta-base shape unless --quick) is saved with
save_pretrained and loaded with bertfamily.from_pretrained, so both run identical weights.
Runs are interleaved (ours, theirs, ours, ...) after warm-up; medians are reported.

    python benchmarks/deberta.py                # B=8, T=128, fp32, deberta-base shape
    python benchmarks/deberta.py --quick        # tiny sizes, one repeat (used by the tests)
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import warnings

import torch


def measure(fn, repeats: int) -> float:
    """Seconds of one call to ``fn`` (fastest of ``repeats`` calls inside one timing round)."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def run(
    quick: bool = False,
    batch: int = 8,
    length: int = 128,
    rounds: int = 7,
    device: str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> dict[str, float]:
    """Benchmark; returns tokens/s of both and the ratio (ours / transformers)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    warnings.filterwarnings("ignore")
    import transformers

    import bertfamily as bf

    transformers.logging.set_verbosity_error()
    sizes = dict(
        relative_attention=True,
        pos_att_type="c2p|p2c",
        position_biased_input=False,
        max_relative_positions=-1,
        legacy=False,
    )
    if quick:
        sizes.update(
            vocab_size=99,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=37,
            max_position_embeddings=64,
        )
        batch, length, rounds = 2, 16, 1
    torch.manual_seed(0)
    ref = transformers.DebertaModel(transformers.DebertaConfig(**sizes)).eval()
    with tempfile.TemporaryDirectory() as tmp:
        ref.save_pretrained(tmp)
        ours = bf.from_pretrained(tmp)
    ref.to(device, dtype)
    ours.to(device, dtype)
    ids = torch.randint(3, ref.config.vocab_size, (batch, length), device=device)
    mask = torch.ones_like(ids)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)

    def call(model, **kw):
        def go():
            model(input_ids=ids, attention_mask=mask, **kw)
            sync()

        return go

    ours_fn, ref_fn = call(ours), call(ref)
    with torch.inference_mode():
        diff = (
            (
                ours(ids, mask).last_hidden_state
                - ref(input_ids=ids, attention_mask=mask).last_hidden_state
            )
            .abs()
            .max()
            .item()
        )
        for fn in (ours_fn, ref_fn, ours_fn, ref_fn):  # warm-up
            fn()
        t_ours, t_ref = [], []
        for _ in range(rounds):
            t_ours.append(measure(ours_fn, 1 if quick else 2))
            t_ref.append(measure(ref_fn, 1 if quick else 2))
    tokens = batch * length
    result = {
        "ours_tokens_per_s": tokens / statistics.median(t_ours),
        "transformers_tokens_per_s": tokens / statistics.median(t_ref),
        "max_abs_diff": diff,
    }
    result["ratio"] = result["ours_tokens_per_s"] / result["transformers_tokens_per_s"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one repeat")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON list of result rows last (for benchmarks/run.py)",
    )
    args = parser.parse_args()
    r = run(
        args.quick, args.batch, args.length, args.rounds, args.device, getattr(torch, args.dtype)
    )
    shape = "tiny" if args.quick else f"deberta-base, B={args.batch}, T={args.length}, {args.dtype}"
    print(f"DeBERTa forward ({shape}, {args.device}, {torch.get_num_threads()} threads)")
    print(f"  transformers DebertaModel : {r['transformers_tokens_per_s']:10.0f} tokens/s")
    print(f"  bertfamily                : {r['ours_tokens_per_s']:10.0f} tokens/s")
    print(
        f"  ratio (ours / transformers): {r['ratio']:.2f}x   (max |diff| {r['max_abs_diff']:.1e})"
    )
    if args.json:
        import json

        rows = [
            dict(
                bench="deberta-base" if not args.quick else "deberta (quick)",
                shape="tiny" if args.quick else f"B={args.batch} T={args.length}",
                dtype=args.dtype,
                impl=impl,
                tokens_per_s=round(r[f"{key}_tokens_per_s"], 1),
                ratio_vs_transformers_fp32=round(
                    r[f"{key}_tokens_per_s"] / r["transformers_tokens_per_s"], 2
                ),
            )
            for impl, key in (("bertfamily", "ours"), ("transformers", "transformers"))
        ]
        print(json.dumps(rows))


if __name__ == "__main__":
    main()
