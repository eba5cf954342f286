"""What a config field or an attention kind changes, as text (no torch): the notes of the
dataflow differences and of the family comparison table."""

from __future__ import annotations

from typing import Any

# Attention kinds (config.attention_kind) -> the formula of one attention layer. A new kind
# adds one entry; an unknown kind falls back to its class docstring.
ATTENTION_FORMULAS: dict[str, str] = {
    "full": "softmax(QKᵀ/√Dh + mask)·V per head, heads concatenated, ·W_O",
    "disentangled": "three score terms c2c + c2p + p2c: "
    "softmax((Q_c·K_cᵀ + Q_c·K_rᵀ + K_c·Q_rᵀ)/√(3Dh) + mask)·V",
    "windowed": "band of 2W+1 keys around each token (scores (B, N, T, 2W+1)) + global rows "
    "that attend to all T with their own Q/K/V",
}

_GLU_NAMES = {"gelu": "GeGLU", "gelu_tanh": "GeGLU", "silu": "SwiGLU"}


def _bias_free(c: Any) -> str:
    """Which linear layers and norms have no bias ("" when all have one)."""
    parts = [
        name
        for name, off in (
            ("attention", not c.attention_bias),
            ("FFN", not c.mlp_bias),
            ("FFN input", c.mlp_bias and not c.mlp_up_bias),
            ("norms", not c.norm_bias),
        )
        if off
    ]
    return f"no biases in: {', '.join(parts)}" if parts else ""


# Short notes on what a config field changes, shown with the steps that differ from BERT-base.
FIELD_NOTES: dict[str, Any] = {
    "embedding_size": lambda c: (
        f"factorised embedding: lookups in E={c.embedding_size}, "
        f"then E→H={c.hidden_size} projection"
        if c.embedding_size != c.hidden_size
        else ""
    ),
    "num_hidden_groups": lambda c: (
        f"{c.num_hidden_layers} layer steps share {c.num_unique_layers} unique layer(s)"
        if c.num_unique_layers < c.num_hidden_layers
        else ""
    ),
    "attention_kind": lambda c: (
        ""
        if c.attention_kind == "full"
        else f"{c.attention_kind} attention: {ATTENTION_FORMULAS.get(c.attention_kind, '')}"
    ),
    "use_pooler": lambda c: (
        "no pooler: the [CLS] state is used as is"
        if not c.use_pooler
        else ""
        if c.base_pooler
        else "no pooler in the base model; sequence classification adds one"
    ),
    # the components of issue 30's families (ModernBERT, GTE, NomicBERT)
    "ffn_kind": lambda c: (
        f"gated feed-forward ({_GLU_NAMES.get(c.hidden_act, c.hidden_act + '-GLU')}): "
        f"H→2I, {c.hidden_act}(value)·gate, I→H"
        if c.ffn_kind != "mlp"
        else ""
    ),
    "norm_position": lambda c: (
        "pre-LN: a norm before each sub-block and after the last layer"
        + ("" if c.first_attention_norm else ", none before the first attention")
        if c.norm_position == "pre"
        else ""
    ),
    "local_attention": lambda c: (
        f"local attention (window {c.local_attention}) except in layers 0, "
        f"{c.global_attention_every}, {2 * c.global_attention_every}, … (global); rotary "
        f"bases {c.rotary_base:g} global, {c.local_rope_theta:g} local"
        if c.local_attention
        else ""
    ),
    "attention_bias": lambda c: _bias_free(c),
    # Longformer: the window makes long inputs affordable, the learned table still bounds them
    "max_position_embeddings": lambda c: (
        f"learned absolute positions for {c.max_sequence_length:,} tokens: a longer input is "
        f"refused; `bertfamily convert to-longformer --model ROBERTA_DIR --output DIR "
        f"--max-positions N` builds one with N positions from a RoBERTa checkpoint (its 512 "
        f"rows copied block by block, Beltagy et al. 2020 §5)"
        if c.attention_kind == "windowed" and c.position_biased_input
        else ""
    ),
    "type_vocab_size": lambda c: {
        0: "no segment embedding",
        1: "one-row segment table: a constant vector, no segment ids",
    }.get(c.type_vocab_size, ""),
    "position_scheme": lambda c: (
        "positions start at pad_token_id + 1 and skip padding"
        if c.position_scheme == "absolute_from_padding"
        else ""
    ),
    "head_dim": lambda c: f"head dimension Dh = {c.head_dim}" if c.head_dim != 64 else "",
    # DeBERTa-v2/v3
    "position_buckets": lambda c: (
        f"relative distances in {2 * c.position_buckets} log buckets "
        f"(exact up to ±{c.position_buckets // 2})"
        if c.relative_attention and c.position_buckets > 0
        else ""
    ),
    "share_att_key": lambda c: (
        "position terms reuse the content Q/K projections" if c.share_att_key else ""
    ),
    "norm_rel_ebd": lambda c: (
        "LayerNorm on the relative table" if c.norm_rel_ebd == "layer_norm" else ""
    ),
    "conv_kernel_size": lambda c: (
        f"convolution (kernel {c.conv_kernel_size}) over the embeddings beside the first layer"
        if c.conv_kernel_size
        else ""
    ),
}
