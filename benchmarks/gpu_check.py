"""CUDA checks (run on a GPU machine; CI has none): parity with transformers on the GPU for
every family, unpadded == padded, bf16 accuracy, BERT-base throughput, variable-length flash
attention (bf16 packed batches) against the bucketed SDPA path, and the main job (MiniLM
sentence embeddings, fp32 and bf16) against sentence-transformers on the same GPU.

    PYTHONPATH=src python benchmarks/gpu_check.py --out results.json
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

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
warnings.filterwarnings("ignore")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import torch  # noqa: E402

import bertfamily as bf  # noqa: E402

DEV = "cuda"
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False

FAMILIES = [
    ("bert", "BertForMaskedLM"),
    ("roberta", "RobertaForMaskedLM"),
    ("distilbert", "DistilBertForMaskedLM"),
    ("albert", "AlbertForMaskedLM"),
    ("deberta", "DebertaForMaskedLM"),
    ("longformer", "LongformerForMaskedLM"),
]


def tiny(kind, cls_name, tmp):
    from helpers import hf_tiny

    class Factory:
        def mktemp(self, name):
            p = Path(tempfile.mkdtemp(dir=tmp))
            return p

    if kind == "longformer":
        from test_longformer import hf_longformer

        return hf_longformer(cls_name, Factory())
    return hf_tiny(kind, cls_name, Factory())


def timed(fn, repeats=10):
    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    rows = [dict(check="device", name=torch.cuda.get_device_name(), torch=torch.__version__)]
    tmp = tempfile.mkdtemp()
    g = torch.Generator().manual_seed(0)
    for kind, cls_name in FAMILIES:
        try:
            path, ref = tiny(kind, cls_name, tmp)
            ours = bf.from_pretrained(path).to(DEV)
            ref = ref.to(DEV).eval()
            pad = ours.config.pad_token_id
            ids = torch.randint(3, 99, (3, 11), generator=g)
            mask = torch.ones(3, 11, dtype=torch.long)
            mask[1, 7:] = 0
            mask[2, 3:] = 0
            ids = ids.masked_fill(mask == 0, pad).to(DEV)
            mask = mask.to(DEV)
            with torch.no_grad():
                a = ours(ids, mask).logits
                b = ref(input_ids=ids, attention_mask=mask).logits
                real = mask.bool()
                diff = (a - b)[real].abs().max().item()
                ours.encoder.unpad = False
                c = ours(ids, mask).logits
                unpad_diff = (a - c)[real].abs().max().item()
                ours.encoder.unpad = True
                ours.to(torch.bfloat16)
                d = ours(ids, mask).logits.float()
                finite = bool(torch.isfinite(d).all())
                cos = torch.nn.functional.cosine_similarity(d[real], a[real], dim=-1).min().item()
            rows.append(
                dict(
                    check="parity-cuda",
                    family=kind,
                    max_abs_diff_fp32=diff,
                    unpadded_vs_padded=unpad_diff,
                    bf16_finite=finite,
                    bf16_min_logit_cosine=round(cos, 5),
                    ok=diff < 1e-4 and finite,
                )
            )
        except Exception as e:  # report and continue: this script is a report, not a test
            rows.append(dict(check="parity-cuda", family=kind, error=repr(e)[:500]))
        print(json.dumps(rows[-1]), flush=True)

    # BERT-base throughput (random weights, same for both)
    import transformers

    torch.manual_seed(0)
    hf = transformers.BertModel(transformers.BertConfig(attn_implementation="sdpa")).eval()
    d = tempfile.mkdtemp()
    hf.save_pretrained(d)
    ours = bf.from_pretrained(d).to(DEV)
    hf = hf.to(DEV)
    lengths_var = torch.randint(16, 257, (32,), generator=torch.Generator().manual_seed(0)).tolist()
    for dtype_name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        ours.to(dtype)
        hf.to(dtype)
        for shape, lengths in (
            ("fixed 32x128", [128] * 32),
            ("variable 32x(16..256)", lengths_var),
            ("fixed 8x512", [512] * 8),
        ):
            T = max(lengths)
            mask = (torch.arange(T)[None] < torch.tensor(lengths)[:, None]).long().to(DEV)
            ids = torch.randint(1000, 30000, (len(lengths), T)).to(DEV).masked_fill(mask == 0, 0)
            with torch.inference_mode():
                t_o = timed(lambda: ours(ids, mask))
                t_h = timed(lambda: hf(input_ids=ids, attention_mask=mask))
            rows.append(
                dict(
                    check="bert-base-throughput",
                    dtype=dtype_name,
                    shape=shape,
                    ours_tokens_per_s=round(sum(lengths) / t_o),
                    transformers_tokens_per_s=round(sum(lengths) / t_h),
                    ratio=round(t_h / t_o, 2),
                )
            )
            print(json.dumps(rows[-1]), flush=True)

    # variable-length flash attention (bf16, packed) against the bucketed SDPA path
    from bertfamily.modules import attention as attention_module

    T = max(lengths_var)
    mask_v = (torch.arange(T)[None] < torch.tensor(lengths_var)[:, None]).long().to(DEV)
    ids_v = torch.randint(1000, 30000, (32, T)).to(DEV).masked_fill(mask_v == 0, 0)
    ours.to(torch.bfloat16)
    with torch.inference_mode():
        a = ours(ids_v, mask_v).last_hidden_state.float()
        t_varlen = timed(lambda: ours(ids_v, mask_v))
        saved = attention_module._varlen_attn
        attention_module._varlen_attn = lambda: None
        try:
            b = ours(ids_v, mask_v).last_hidden_state.float()
            t_bucketed = timed(lambda: ours(ids_v, mask_v))
        finally:
            attention_module._varlen_attn = saved
    real = mask_v.bool()
    cos = torch.nn.functional.cosine_similarity(a[real], b[real], dim=-1).min().item()
    rows.append(
        dict(
            check="varlen-vs-bucketed",
            dtype="bf16",
            min_token_cosine=round(cos, 5),
            varlen_tokens_per_s=round(sum(lengths_var) / t_varlen),
            bucketed_tokens_per_s=round(sum(lengths_var) / t_bucketed),
        )
    )
    print(json.dumps(rows[-1]), flush=True)

    # the main job on the GPU: MiniLM sentence embeddings vs sentence-transformers
    try:
        from sentence_transformers import SentenceTransformer

        from bertfamily.pipelines.embedding.embed import SentenceEmbedder
        from bertfamily.resources.cache import fetch

        model_dir = fetch("all-MiniLM-L6-v2")
        lines = (fetch("janeausten") / "austen.txt").read_text(encoding="utf-8").splitlines()
        texts = [x.strip() for x in lines if len(x.split()) >= 3][:4096]
        st = SentenceTransformer(str(model_dir), device=DEV)
        for dtype_name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
            emb = SentenceEmbedder(model_dir, dtype=dtype, device=DEV)
            st.to(dtype)
            va = emb.encode(texts[:256], batch_size=128)
            vb = st.encode(texts[:256], batch_size=128, normalize_embeddings=True)
            t_o = timed(lambda: emb.encode(texts, batch_size=128), repeats=3)
            t_s = timed(lambda: st.encode(texts, batch_size=128), repeats=3)
            rows.append(
                dict(
                    check="embed-minilm-vs-sentence-transformers",
                    dtype=dtype_name,
                    ours_sentences_per_s=round(len(texts) / t_o),
                    sentence_transformers_sentences_per_s=round(len(texts) / t_s),
                    ratio=round(t_s / t_o, 2),
                    min_cosine=round(float((va * vb).sum(1).min()), 5),
                )
            )
            print(json.dumps(rows[-1]), flush=True)
    except Exception as e:  # a report, not a test
        rows.append(dict(check="embed-minilm-vs-sentence-transformers", error=repr(e)[:500]))
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
