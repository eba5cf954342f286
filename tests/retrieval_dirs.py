"""Tiny random retrieval directories saved by sentence-transformers 6 itself (no fixtures
here; `test_rerank.py`, `test_sparse.py` and `test_serve_retrieval.py` wrap them): a
cross-encoder in both layouts, a SPLADE encoder, all with MiniLM's tokenizer (H=32, L=2)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

SIZES = dict(
    vocab_size=30522,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=37,
    max_position_embeddings=128,
    initializer_range=0.3,  # scores that differ clearly between pairs
)


def classic_cross_encoder(path: Path, tokenizer_dir: Path, num_labels: int = 1, **marks) -> Path:
    """A plain Hugging Face BertForSequenceClassification directory (the ms-marco layout);
    ``marks`` go into config.json (e.g. ``sbert_ce_default_activation_function``)."""
    import transformers

    torch.manual_seed(0)
    model = transformers.BertForSequenceClassification(
        transformers.BertConfig(num_labels=num_labels, **SIZES)
    )
    model.eval().save_pretrained(path)
    transformers.AutoTokenizer.from_pretrained(tokenizer_dir).save_pretrained(path)
    if marks:
        cfg = json.loads((path / "config.json").read_text())
        (path / "config.json").write_text(json.dumps(cfg | marks, indent=2))
    return path


def st6_cross_encoder(path: Path, classic: Path, **kwargs) -> Path:
    """The same model loaded and saved by sentence-transformers 6's CrossEncoder (module
    layout: modules.json with one Transformer, activation in config_sentence_transformers)."""
    from sentence_transformers import CrossEncoder

    CrossEncoder(str(classic), **kwargs).save(str(path))
    return path


def splade(
    path: Path, tokenizer_dir: Path, pooling: str = "max", activation="relu", bias: float = 0.0
) -> Path:
    """A SPLADE directory saved by sentence-transformers' SparseEncoder: MLMTransformer over a
    tiny random BertForMaskedLM (``bias`` added to its output bias: negative = sparser), then
    SpladePooling."""
    import transformers
    from sentence_transformers import SparseEncoder
    from sentence_transformers.sparse_encoder.modules import MLMTransformer, SpladePooling

    torch.manual_seed(1)
    mlm_dir = path.parent / (path.name + "-mlm")
    cfg = transformers.BertConfig(**(SIZES | {"initializer_range": 0.05}))
    mlm = transformers.BertForMaskedLM(cfg).eval()
    with torch.no_grad():
        mlm.cls.predictions.bias += bias
    mlm.save_pretrained(mlm_dir)
    transformers.AutoTokenizer.from_pretrained(tokenizer_dir).save_pretrained(mlm_dir)
    modules = [MLMTransformer(str(mlm_dir)), SpladePooling(pooling, activation_function=activation)]
    SparseEncoder(modules=modules).save(str(path))
    return path
