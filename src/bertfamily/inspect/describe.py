"""What each kind of step computes, as text: tables keyed by component type, operation name and
config field (the shapes themselves always come from the trace)."""

from __future__ import annotations

import torch
from torch import nn

from ..config import EncoderConfig
from .notes import ATTENTION_FORMULAS

_GELU = {"none": "GELU x·Φ(x) (exact, erf)", "tanh": "GELU, tanh approximation"}


def _fmt(shape, config: EncoderConfig, extra: dict[str, int] | None = None) -> str:
    from .symbols import shape_symbols, symbol_table

    table = {**symbol_table(config, 0, 0), **(extra or {})}
    return shape_symbols(tuple(shape), table).replace(", ", "×")


def describe_module(
    module: nn.Module, config: EncoderConfig, extra: dict[str, int] | None = None
) -> tuple[str, str]:
    """(operation text, kind) for a module call; ``extra``: weight-size symbols beside the
    config's (the teacher hidden size Ht of distillation projections)."""
    kind = type(module).__name__
    if isinstance(module, nn.Embedding):
        return f"lookup: rows of E ∈ ℝ^{_fmt(module.weight.shape, config, extra)}", kind
    if isinstance(module, nn.Linear):
        b = " + b" if module.bias is not None else ""
        return f"x·Wᵀ{b}, W ∈ ℝ^{_fmt(module.weight.shape, config, extra)}", kind
    if isinstance(module, nn.LayerNorm):
        return "(x − μ)/√(σ² + ε)·γ + β", kind
    if getattr(module, "takes_condition", False):
        return "conditional LayerNorm: γ = γ0 + c·W_γ, β = β0 + c·W_β", kind
    if isinstance(module, nn.GELU):
        return _GELU.get(module.approximate, "GELU"), kind
    if kind == "SigmoidGELU":
        return "GELU, x·σ(1.702x) approximation", kind
    if isinstance(module, (nn.ReLU, nn.SiLU, nn.Tanh)):
        return kind, kind
    text = {
        "Embeddings": _embeddings_text(config),
        "EncoderLayer": "post-LN: x = LN(x + Attn(x)); x = LN(x + FFN(x))",
        "FeedForward": "H → I → activation → H",
        "Pooler": "tanh(h[:, 0]·Wᵀ + b): the first token's state",
        "MaskedLMHead": "dense H→E, activation, LayerNorm, ·E_tokᵀ (tied) + bias",
        "PairHead": "pooled·Wᵀ + b → 2 classes (NSP / SOP)",
        "SpanBoundaryHead": "SBO: each span token from [x_(s−1); x_(e+1); p_(i−s)] → "
        "dense 3H→H, GELU, LN, dense H→E, GELU, LN, ·E_tokᵀ (tied) + bias (Joshi et al. "
        "2020 §3.2)",
        "GlobalAttentionInputs": "global_attention_mask → positions of the G global tokens, "
        "once for all layers",
        "RelativePositionEmbeddings": "relative position table P: one row per distance "
        "i − j, shared by all layers",
        "ConvolutionBranch": "conv1d over the embeddings, activation, + first layer "
        "output, LayerNorm",
        "EnhancedMaskDecoder": "re-applies the last layer with absolute positions added to "
        "its queries (He et al. 2021 §3.3)",
        "RotaryEmbedding": "RoPE: cos/sin of t·θ^(−2i/Dh) per position, once for all layers; "
        "each layer rotates its queries and keys (Su et al. 2021)",
        "RelativePositionBias": "T5 buckets of j − i → a learned bias per head, (1, N, T, T), "
        "shared by all layers",
        "ChainedInputs": "the encoder-level attention inputs, one provider after another",
    }.get(kind)
    if text is not None:
        if kind == "Embeddings" and config.embedding_size != config.hidden_size:
            text += ", then E→H projection"
        return text, kind
    if hasattr(module, "qkv") or "Attention" in kind:
        return ATTENTION_FORMULAS.get(config.attention_kind, _doc(module)), kind
    return _doc(module), kind


def _embeddings_text(config: EncoderConfig) -> str:
    """What the embeddings row computes, from the fields that decide it: the segment table
    exists only with ``type_vocab_size`` > 0, absolute positions are added only with
    ``position_biased_input`` (DeBERTa: token lookup only, positions enter the attention as
    relative terms, He et al. 2021 §3.1)."""
    parts = ["token"]
    if config.type_vocab_size:
        parts.append("segment")
    if config.position_biased_input:
        parts.append("position")
    if config.use_task_id:
        parts.append("task-type (row 0)")
    text = (
        " + ".join(parts) + " lookups, summed" if len(parts) > 1 else "token lookup only"
    ) + ", LayerNorm, dropout"
    missing = [
        what
        for what, absent in (
            ("absolute positions", not config.position_biased_input),
            ("segments", not config.type_vocab_size),
        )
        if absent
    ]
    if missing:
        text += " (no " + " or ".join(missing) + ")"
    if not config.position_biased_input and config.relative_attention:
        text += "; positions enter each attention layer as relative terms"
    if config.position_embedding_type == "rotary":
        text += "; positions enter each attention layer as rotations of Q and K (RoPE)"
    return text


def _doc(module: nn.Module) -> str:
    doc = (type(module).__doc__ or type(module).__name__).strip().splitlines()[0]
    return doc.rstrip(".")


def describe_op(
    name: str, in_sym: list[str], out_sym: list[str], args: tuple, config: EncoderConfig
) -> str:
    """Text of a traced tensor operation inside a composite, from its name and shapes."""
    out = out_sym[0] if out_sym else ""
    if name == "unbind":
        return (
            f"split into {len(out_sym)} per-head tensors (Q, K, V)"
            if len(out_sym) == 3
            else f"split into {len(out_sym)} tensors"
        )
    if name in (
        "view",
        "reshape",
        "permute",
        "transpose",
        "flatten",
        "unflatten",
        "split",
        "chunk",
    ):
        return "concatenate heads" if out.count(",") == 2 else "split into heads"
    first_in = in_sym[0] if in_sym else ""
    if name in ("matmul", "bmm", "baddbmm", "einsum"):
        # Windowed attention (Longformer): band, global-key columns, global rows.
        if out.endswith("T, G)"):
            return "scores of every query for the G global keys"
        if out.endswith("G, T)"):
            return "global rows: Q_g·K_gᵀ, each global token against all T keys"
        if out.endswith("G, Dh)"):
            return "global rows: probs·V_g"
        if out.endswith("T, Dh)") and first_in.endswith("G)"):
            return "plus the global keys' probabilities · their values"
        if out.endswith("T, Dh)") and first_in.endswith("2W+1)"):
            return "band probs·V: weighted sum of the window's values"
        # Disentangled attention (DeBERTa): relative-position products.
        if out.endswith("2T-1)"):
            return (
                "position term: content against the relative table, one column per "
                "distance i − j (read as (T, T) through a strided view)"
            )
        if out.endswith("T, T)"):
            return "scores: Q·Kᵀ (scaled by 1/√Dh, mask added)"
        if out.endswith("T, Dh)"):
            return "weighted sum of values: probs·V"
        if out.endswith("+1)"):
            return "band scores: each query against the keys of its window"
        return f"product → {out}"
    if name == "softmax":
        if out.endswith("G+2W+1)"):
            return "softmax over the global keys and the band together (probabilities)"
        return "softmax over keys (probabilities)"
    if name == "scaled_dot_product_attention":
        return "fused softmax(QKᵀ/√Dh + mask)·V"
    if name == "gather":
        if "G" in out:
            return "pick the rows of the G global tokens"
        return "gather"
    if name == "linear":
        w = next((a for a in args[1:] if isinstance(a, torch.Tensor)), None)
        if w is not None and w.dim() == 2 and w.shape[0] == config.vocab_size:
            return "decoder: x·E_tokᵀ + bias (weights tied to the token embedding)"
        return "linear"
    if name == "tanh":
        return "tanh"
    return name
