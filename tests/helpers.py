"""Test helpers: tiny random Hugging Face checkpoints."""

from __future__ import annotations

import os
import warnings

import torch

# Tiny, mutually distinct sizes so transpositions cannot hide (B=3, T=7, H=32, N=4, I=37, V=99).
TINY = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=37, max_position_embeddings=64)


def _quiet():
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    warnings.filterwarnings("ignore")


_quiet()


def hf_tiny(kind: str, cls_name: str, tmp_path_factory, **overrides):
    """Save a random-init transformers model of a tiny config; returns (dir, hf model)."""
    import transformers

    torch.manual_seed(0)
    if kind == "bert":
        config = transformers.BertConfig(**{**TINY, **overrides})
    elif kind == "roberta":
        config = transformers.RobertaConfig(**{**TINY, "max_position_embeddings": 66,
                                               "type_vocab_size": 1, "pad_token_id": 1,
                                               "layer_norm_eps": 1e-5, **overrides})
    elif kind == "distilbert":
        config = transformers.DistilBertConfig(vocab_size=99, dim=32, n_layers=2, n_heads=4,
                                               hidden_dim=37, max_position_embeddings=64,
                                               **overrides)
    elif kind == "albert":
        config = transformers.AlbertConfig(**{**TINY, "embedding_size": 16, "num_hidden_layers": 3,
                                              "num_hidden_groups": 1, "hidden_act": "gelu_new",
                                              **overrides})
    elif kind == "deberta":
        config = transformers.DebertaConfig(**{**TINY, "type_vocab_size": 0,
                                               "relative_attention": True,
                                               "pos_att_type": "c2p|p2c",
                                               "position_biased_input": False,
                                               "legacy": False, **overrides})
    else:
        raise ValueError(kind)
    model = getattr(transformers, cls_name)(config).eval()
    # Non-trivial LayerNorm and bias values so a swapped weight/bias cannot hide.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ("LayerNorm" in name or "layer_norm" in name or name.endswith("bias")
                    or name.endswith(("q_bias", "v_bias"))):
                p.add_(torch.randn_like(p) * 0.1)
    path = tmp_path_factory.mktemp(f"{kind}-{cls_name}")
    model.save_pretrained(path)
    return path, model


def hf_longformer(cls_name: str, tmp_path_factory, window=(4, 6), **overrides):
    """A random transformers Longformer of a tiny config, saved; returns (dir, model)."""
    import transformers

    torch.manual_seed(0)
    config = transformers.LongformerConfig(
        vocab_size=99, hidden_size=32, num_hidden_layers=len(window), num_attention_heads=4,
        intermediate_size=37, max_position_embeddings=66, type_vocab_size=1, pad_token_id=1,
        layer_norm_eps=1e-5, attention_window=list(window), **overrides)
    model = getattr(transformers, cls_name)(config).eval()
    with torch.no_grad():  # non-trivial norms and biases so that a swap cannot hide
        for name, p in model.named_parameters():
            if "LayerNorm" in name or "layer_norm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.1)
    path = tmp_path_factory.mktemp(f"longformer-{cls_name}")
    model.save_pretrained(path)
    return path, model
