"""The models of the BERT family (presets.FAMILY), plus tiny test presets, as plain data.

Each preset is a dict of `EncoderConfig` overrides headed by the checkpoint it reproduces.
The parameter count in the comment is the base model plus pooler, as transformers counts it.
"""

from __future__ import annotations

import math
from typing import Any

# Task-head variants (heads/tasks.py). RoBERTa: RobertaClassificationHead (first token, dense,
# tanh, out_proj), but its multiple-choice model uses the pooler. DistilBERT: pre_classifier +
# ReLU on the first token, for classification and multiple choice alike.
_ROBERTA_HEADS = dict(
    classifier_pooling="first_token_dense", choice_pooling="pooler", classifier_activation="tanh"
)
_DISTILBERT_HEADS = dict(
    classifier_pooling="first_token_dense",
    choice_pooling="first_token_dense",
    classifier_activation="relu",
)

# DeBERTa: ContextPooler (first token, dense, GELU) then classifier, for sequence classification;
# transformers has no DeBERTa (v1) multiple-choice class, ours reads the first token the same way.
_DEBERTA_HEADS = dict(
    classifier_pooling="first_token_dense",
    choice_pooling="first_token_dense",
    classifier_activation="gelu",
)
# DeBERTa v1's structure, shared by the full and the tiny preset: relative positions only (no
# absolute position at the input; the table returns in the enhanced mask decoder, 2 steps, when
# an MLM head is built), no token types, no pooler in the base model, eps 1e-7.
_DEBERTA_V1 = dict(
    model_type="deberta",
    attention_kind="disentangled",
    type_vocab_size=0,
    relative_attention=True,
    max_relative_positions=-1,
    pos_att_type="c2p|p2c",
    position_biased_input=False,
    layer_norm_eps=1e-7,
    use_pooler=False,
    pair_head=None,
    emd_layers=2,
    **_DEBERTA_HEADS,
)
# DeBERTa-v3's structure (the DeBERTa-v2 code; He et al. 2023, "DeBERTaV3"): separate biased
# Q/K/V projections, position terms through the content Q/K projections (share_att_key),
# relative distances in 256 log buckets (a 512-row table, k = max_position_embeddings = 512)
# with a LayerNorm on the table, no convolution, no absolute positions anywhere: pretrained by
# replaced-token detection, so no enhanced mask decoder.
_DEBERTA_V3 = dict(
    model_type="deberta-v2",
    attention_kind="disentangled",
    type_vocab_size=0,
    relative_attention=True,
    max_relative_positions=-1,
    position_buckets=256,
    norm_rel_ebd="layer_norm",
    share_att_key=True,
    key_bias=True,
    pos_att_type="p2c|c2p",
    position_biased_input=False,
    layer_norm_eps=1e-7,
    use_pooler=False,
    pair_head=None,
    **_DEBERTA_HEADS,
)
# Longformer: RoBERTa's heads; the separator id places default global attention (qa, choice).
_LONGFORMER_HEADS = dict(_ROBERTA_HEADS, sep_token_id=2)
# XLM-RoBERTa and CamemBERT: RoBERTa's structure (positions offset by pad_token_id + 1 = 2,
# one unused segment, eps 1e-5, no NSP) under their own checkpoint family.
_ROBERTA_LAYOUT = dict(
    type_vocab_size=1,
    pad_token_id=1,
    position_scheme="absolute_from_padding",
    layer_norm_eps=1e-5,
    pair_head=None,
    **_ROBERTA_HEADS,
)
# ELECTRA (Clark et al. 2020): no pooler, no NSP; the generator's MLM head applies GELU whatever
# the hidden_act; classification: first token, dense, GELU (ElectraClassificationHead); multiple
# choice: the first token through the sequence summary (Linear H→H, GELU).
_ELECTRA = dict(
    model_type="electra",
    use_pooler=False,
    pair_head=None,
    mlm_activation="gelu",
    classifier_pooling="first_token_dense",
    choice_pooling="first_token_dense",
    classifier_activation="gelu",
)

# RoFormer (Su et al. 2021): BERT's layer with rotary positions (interleaved pairs, base 10^4,
# the sin/cos table stored frozen as in its checkpoints), no learned position table, no pooler;
# classification: first token, dense, the hidden_act (RoFormerClassificationHead).
_ROFORMER = dict(
    model_type="roformer",
    position_embedding_type="rotary",
    position_biased_input=False,
    rotary_interleaved=True,
    rotary_table=True,
    use_pooler=False,
    pair_head=None,
    classifier_pooling="first_token_dense",
    choice_pooling="first_token_dense",
    classifier_activation="gelu",
)

# MPNet (Song et al. 2020): RoBERTa's positions and heads (MLM head with a fixed GELU), no
# segments, T5-style relative position buckets shared by all layers.
_MPNET = dict(
    model_type="mpnet",
    type_vocab_size=0,
    pad_token_id=1,
    position_scheme="absolute_from_padding",
    layer_norm_eps=1e-5,
    pair_head=None,
    mlm_activation="gelu",
    relative_attention_buckets=32,
    **_ROBERTA_HEADS,
)

# ModernBERT (Warner et al. 2024): pre-LN (no attention norm in the first layer) with a final
# norm, bias-free linears and norms, GeGLU, rotary positions with base 160,000 in the global
# layers (every third from layer 0) and 10,000 in the local ones (128-token sliding window);
# no segments or pooler; every head starts with dense + GELU + norm (ModernBertPredictionHead).
_MODERNBERT = dict(
    model_type="modernbert",
    type_vocab_size=0,
    position_embedding_type="rotary",
    position_biased_input=False,
    rotary_base=160000.0,
    local_rope_theta=10000.0,
    local_attention=128,
    global_attention_every=3,
    attention_bias=False,
    mlp_bias=False,
    norm_bias=False,
    head_bias=False,
    ffn_kind="geglu",
    norm_position="pre",
    first_attention_norm=False,
    layer_norm_eps=1e-5,
    use_pooler=False,
    pair_head=None,
    mlm_activation="gelu",
    task_transform=True,
    classifier_pooling="first_token",
    choice_pooling="first_token",
    classifier_activation="gelu",
    classifier_dropout=0.0,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
    pad_token_id=50283,
    sep_token_id=50282,
)

# GTE (Li et al. 2023; Alibaba's v1.5 encoders) and NomicBERT (Nussbaum et al. 2024): BERT's
# post-LN layer with rotary positions over the whole head ((i, i + Dh/2) pairs, one base), no
# position table, a gated feed-forward; no pooler in the base model, BERT's pooler under the
# classification head. GTE: GeGLU whose input projection has no bias, the MLM head's fixed GELU.
# NomicBERT: bias-free attention and SwiGLU, dropout 0.
_ROPE_BERT = dict(
    position_embedding_type="rotary",
    position_biased_input=False,
    base_pooler=False,
    pair_head=None,
)
_GTE = dict(
    model_type="gte",
    ffn_kind="geglu",
    mlp_up_bias=False,
    mlm_activation="gelu",
    attention_probs_dropout_prob=0.0,
    **_ROPE_BERT,
)
_NOMIC_BERT = dict(
    model_type="nomic_bert",
    hidden_act="silu",
    ffn_kind="swiglu",
    attention_bias=False,
    mlp_bias=False,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
    **_ROPE_BERT,
)

# Sizes of the tiny test presets: mutually distinct, so transpositions cannot hide.
_TINY = dict(
    vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37
)

PRESETS: dict[str, dict[str, Any]] = {
    # google-research/bert uncased_L-12_H-768_A-12 (bert-base-uncased) — 109,482,240
    "bert-base": dict(model_type="bert"),
    # bert-large-uncased — 335,141,888
    "bert-large": dict(
        model_type="bert",
        hidden_size=1024,
        num_hidden_layers=24,
        num_attention_heads=16,
        intermediate_size=4096,
    ),
    # FacebookAI/roberta-base — 124,645,632. Byte-level BPE (50265); positions offset by
    # pad_token_id + 1 = 2 (514 = 512 + 2); one unused segment; eps 1e-5; no NSP.
    "roberta-base": dict(
        model_type="roberta",
        vocab_size=50265,
        max_position_embeddings=514,
        type_vocab_size=1,
        pad_token_id=1,
        position_scheme="absolute_from_padding",
        layer_norm_eps=1e-5,
        pair_head=None,
        **_ROBERTA_HEADS,
    ),
    # FacebookAI/roberta-large — 355,359,744. RoBERTa-base's layout at BERT-large's sizes
    # (Liu et al. 2019, Table 9 / the version table: L=24, H=1024, A=16).
    "roberta-large": dict(
        model_type="roberta",
        vocab_size=50265,
        max_position_embeddings=514,
        hidden_size=1024,
        num_hidden_layers=24,
        num_attention_heads=16,
        intermediate_size=4096,
        type_vocab_size=1,
        pad_token_id=1,
        position_scheme="absolute_from_padding",
        layer_norm_eps=1e-5,
        pair_head=None,
        **_ROBERTA_HEADS,
    ),
    # distilbert-base-uncased — 66,362,880. 6 layers, no token types, no pooler.
    "distilbert-base": dict(
        model_type="distilbert",
        num_hidden_layers=6,
        type_vocab_size=0,
        use_pooler=False,
        pair_head=None,
        **_DISTILBERT_HEADS,
    ),
    # SpanBERT/spanbert-base-cased — 108,310,272. Cased vocabulary (28996); segment table kept
    # in the checkpoint although SpanBERT trains without NSP.
    "spanbert-base": dict(model_type="bert", vocab_size=28996, pair_head=None),
    # huawei-noah/TinyBERT_General_4L_312D — 14,350,248. FFN 1200 (not 4·312), Dh = 26.
    "tinybert-4l": dict(
        model_type="bert",
        hidden_size=312,
        num_hidden_layers=4,
        num_attention_heads=12,
        intermediate_size=1200,
    ),
    # google-bert/bert-base-chinese — 102,267,648. BERT-base over a 21,128-token vocabulary
    # (one token per CJK character; 9,614 ## pieces for other scripts), cased.
    "bert-base-chinese": dict(model_type="bert", vocab_size=21128),
    # google/bert_uncased_L-2_H-128_A-2 (prajjwal1/bert-tiny) — 4,385,920
    "bert-tiny": dict(
        model_type="bert",
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=512,
    ),
    # albert/albert-base-v2 — 11,683,584. Factorised embedding E=128 (LayerNorm in E, then
    # E→H); all 12 layer steps run one shared layer; GELU tanh form ("gelu_new"); SOP; no dropout.
    "albert-base": dict(
        model_type="albert",
        vocab_size=30000,
        embedding_size=128,
        num_hidden_groups=1,
        inner_group_num=1,
        hidden_act="gelu_tanh",
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        pair_head="sop",
        classifier_dropout=0.1,
    ),  # classifier_dropout_prob
    # microsoft/deberta-base — 138,601,728. Relative positions only (k = 512), c2p + p2c.
    "deberta-base": dict(vocab_size=50265, **_DEBERTA_V1),
    # microsoft/deberta-v3-base — 183,831,552 (98,380,800 of them the 128K-token embedding).
    "deberta-v3-base": dict(vocab_size=128100, **_DEBERTA_V3),
    # allenai/longformer-base-4096 — 148,659,456. RoBERTa-base plus global Q/K/V projections per
    # layer; 4098 positions (4096 + the padding offset 2); sliding window 512 (256 per side).
    "longformer-base": dict(
        model_type="longformer",
        vocab_size=50265,
        max_position_embeddings=4098,
        type_vocab_size=1,
        pad_token_id=1,
        position_scheme="absolute_from_padding",
        layer_norm_eps=1e-5,
        pair_head=None,
        attention_kind="windowed",
        attention_window=512,
        **_LONGFORMER_HEADS,
    ),
    # junnyu/roformer_chinese_base — 123,555,840. A 50,000-entry vocabulary of characters and
    # jieba words; 1536 positions (the rotary table: 1536 × 64 frozen values).
    "roformer-chinese-base": dict(vocab_size=50000, max_position_embeddings=1536, **_ROFORMER),
    # nghuyong/ernie-3.0-base-zh — 117,944,832. BERT-base over a 40,000-token Chinese
    # vocabulary, 2048 positions, 4 segment types, the task-type table (3 rows).
    "ernie-3.0-base-zh": dict(
        model_type="ernie",
        vocab_size=40000,
        max_position_embeddings=2048,
        type_vocab_size=4,
        use_task_id=True,
        task_type_vocab_size=3,
    ),
    # microsoft/mpnet-base (the trunk of sentence-transformers/all-mpnet-base-v2) — 109,486,464.
    # RoBERTa's positions (514 = 512 + 2) without segments, plus 32 relative position buckets per
    # head shared by all layers; eps 1e-5.
    "mpnet-base": dict(vocab_size=30527, max_position_embeddings=514, **_MPNET),
    # answerdotai/ModernBERT-base — 149,014,272: 22 layers, I = 1152 (GeGLU: Wi is 768→2304),
    # 8192 positions (rotary: no table), vocabulary 50,368.
    "modernbert-base": dict(
        vocab_size=50368,
        hidden_size=768,
        num_hidden_layers=22,
        num_attention_heads=12,
        intermediate_size=1152,
        max_position_embeddings=8192,
        **_MODERNBERT,
    ),
    # answerdotai/ModernBERT-large — 394,781,696: 28 layers of H = 1024, 16 heads, I = 2624.
    "modernbert-large": dict(
        vocab_size=50368,
        hidden_size=1024,
        num_hidden_layers=28,
        num_attention_heads=16,
        intermediate_size=2624,
        max_position_embeddings=8192,
        **_MODERNBERT,
    ),
    # Alibaba-NLP/gte-base-en-v1.5 — 136,776,192. A 30,528-token BERT vocabulary, no segments,
    # 8192 positions (rotary: no table), base 500,000 (its remote code scales it by fixed NTK
    # ×2, which transformers' GteModel does not read: see docs/families.md).
    "gte-base": dict(
        vocab_size=30528,
        max_position_embeddings=8192,
        type_vocab_size=0,
        rotary_base=500000.0,
        pad_token_id=0,
        **_GTE,
    ),
    # nomic-ai/nomic-embed-text-v1.5 — 136,731,648. BERT-base sizes over a 30,528-token
    # vocabulary, 2 segment types, 8192 positions (trained at 2048), rotary base 1000.
    "nomic-bert": dict(
        vocab_size=30528, max_position_embeddings=8192, rotary_base=1000.0, **_NOMIC_BERT
    ),
    # --- tiny test presets: mutually distinct sizes so transpositions cannot hide --------------
    "tiny-bert": dict(
        model_type="bert",
        **_TINY,
        max_position_embeddings=64,
    ),
    "tiny-roberta": dict(
        model_type="roberta",
        **_TINY,
        max_position_embeddings=66,
        **_ROBERTA_LAYOUT,
    ),
    "tiny-distilbert": dict(
        model_type="distilbert",
        **_TINY,
        max_position_embeddings=64,
        type_vocab_size=0,
        use_pooler=False,
        pair_head=None,
        **_DISTILBERT_HEADS,
    ),
    "tiny-albert": dict(
        model_type="albert",
        vocab_size=99,
        embedding_size=16,
        hidden_size=32,
        num_hidden_layers=3,
        num_hidden_groups=1,
        num_attention_heads=4,
        intermediate_size=37,
        max_position_embeddings=64,
        hidden_act="gelu_tanh",
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        pair_head="sop",
        classifier_dropout=0.1,
    ),
    "tiny-deberta": dict(
        **_TINY,
        max_position_embeddings=64,
        **_DEBERTA_V1,
    ),
    # 16 buckets (the table has 64 positions), and the convolution that DeBERTa-v2 (not v3)
    # checkpoints have, so the tiny preset runs every DeBERTa-v2 component
    "tiny-deberta-v3": dict(
        {**_DEBERTA_V3, "position_buckets": 16},
        **_TINY,
        max_position_embeddings=64,
        conv_kernel_size=3,
    ),
    "tiny-longformer": dict(
        model_type="longformer",
        **_TINY,
        max_position_embeddings=66,
        type_vocab_size=1,
        pad_token_id=1,
        position_scheme="absolute_from_padding",
        layer_norm_eps=1e-5,
        pair_head=None,
        attention_kind="windowed",
        attention_window=(4, 6),
        **_LONGFORMER_HEADS,
    ),
    "tiny-xlm-roberta": dict(
        model_type="xlm-roberta",
        **_TINY,
        max_position_embeddings=66,
        **_ROBERTA_LAYOUT,
    ),
    "tiny-camembert": dict(
        model_type="camembert",
        **_TINY,
        max_position_embeddings=66,
        **_ROBERTA_LAYOUT,
    ),
    # E = 16 < H = 32: embeddings in E, then the E→H projection
    "tiny-electra": dict(
        **_TINY,
        embedding_size=16,
        max_position_embeddings=64,
        **_ELECTRA,
    ),
    "tiny-roformer": dict(**_TINY, max_position_embeddings=64, **_ROFORMER),
    "tiny-ernie": dict(
        model_type="ernie",
        **_TINY,
        max_position_embeddings=64,
        use_task_id=True,
        task_type_vocab_size=3,
    ),
    "tiny-mpnet": dict(**_TINY, max_position_embeddings=66, **_MPNET),
    # 4 layers: global, local, global, local; a local window of 4 (2 each side) < T
    "tiny-modernbert": dict(
        **{
            **_TINY,
            **_MODERNBERT,
            "num_hidden_layers": 4,
            "max_position_embeddings": 64,
            "local_attention": 4,
            "global_attention_every": 2,
            "pad_token_id": 0,
            "sep_token_id": 2,
        }
    ),
    "tiny-gte": dict(**_TINY, max_position_embeddings=64, type_vocab_size=0, **_GTE),
    "tiny-nomic-bert": dict(**_TINY, max_position_embeddings=64, **_NOMIC_BERT),
}

# Published parameter counts (base model + pooler, as transformers counts it).
PUBLISHED_PARAMETERS: dict[str, int] = {
    "bert-base": 109_482_240,
    "bert-large": 335_141_888,
    "roberta-base": 124_645_632,
    "roberta-large": 355_359_744,
    "albert-base": 11_683_584,
    "distilbert-base": 66_362_880,
    "spanbert-base": 108_310_272,
    "deberta-base": 138_601_728,
    "deberta-v3-base": 183_831_552,
    "longformer-base": 148_659_456,
    "tinybert-4l": 14_350_248,
    "bert-tiny": 4_385_920,
    "bert-base-chinese": 102_267_648,
    # the families of issue 30: transformers' count of the published config
    "roformer-chinese-base": 123_555_840,
    "ernie-3.0-base-zh": 117_944_832,
    "mpnet-base": 109_486_464,
    "modernbert-base": 149_014_272,
    "modernbert-large": 394_781_696,
    "gte-base": 136_776_192,
    "nomic-bert": 136_731_648,
}

# The rounded size each model is known by, as the source documents state it (the seeds'
# comparison table; BERT: Devlin et al. 2019 §3; ALBERT: Lan et al. 2020 Table 1; TinyBERT:
# Jiao et al. 2020 §4.1), shown by `bertfamily models` beside the exact counts above.
STATED_PARAMETERS: dict[str, str] = {
    "bert-base": "110M",
    "bert-large": "340M",
    "roberta-base": "125M",
    "albert-base": "12M",
    "distilbert-base": "66M",
    "spanbert-base": "110M",
    "deberta-base": "140M",
    "longformer-base": "149M",
    "tinybert-4l": "14.5M",
    "bert-tiny": "4.4M",
}

# The full-size models of the family, in the order of the source documents (then later additions).
FAMILY = [
    "bert-base",
    "bert-large",
    "roberta-base",
    "roberta-large",
    "albert-base",
    "distilbert-base",
    "spanbert-base",
    "deberta-base",
    "deberta-v3-base",
    "longformer-base",
    "tinybert-4l",
    "bert-tiny",
    "bert-base-chinese",
    "roformer-chinese-base",
    "ernie-3.0-base-zh",
    "mpnet-base",
    "modernbert-base",
    "modernbert-large",
    "gte-base",
    "nomic-bert",
]


def preset_names(include_tiny: bool = True) -> list[str]:
    """Names of the available presets (the family models first, then the tiny test presets)."""
    return [n for n in PRESETS if include_tiny or not n.startswith("tiny-")]


# --- the bounds and field kinds of config.EncoderConfig (data; config re-exports them) ---

#: Default largest model `check_parameter_budget` lets `build_model` / `from_pretrained`
#: allocate (2·10^10 parameters, 80 GB in float32); raise it with the ``max_parameters``
#: keyword or the ``BERTFAMILY_MAX_PARAMETERS`` environment variable.
DEFAULT_MAX_PARAMETERS = 2 * 10**10
MAX_PARAMETERS_ENV = "BERTFAMILY_MAX_PARAMETERS"
#: Most layer steps (num_hidden_layers × inner_group_num) a config may describe: every step is a
#: Python module call (and, unshared, a set of modules), whatever its parameter count.
MAX_LAYER_STEPS = 10_000
#: The largest value each size field may take, checked for every config of every family on
#: creation (`EncoderConfig._check_sizes`), before any tensor is sized by it: a config.json
#: is user input, and a size far beyond every real encoder would only ever ask for memory
#: (a rotary model's position limit cuts no text, a window or relative table is allocated at
#: that size). Positions: 16 times ModernBERT's 8,192, the longest of the family; the others
#: far above the largest real checkpoints (XLM-R's 250,002 tokens, 4,096-wide xxl models).
#: A program that needs more may raise an entry before it builds or loads the config.
SIZE_LIMITS: dict[str, int] = {
    "vocab_size": 2**22,
    "hidden_size": 2**16,
    "embedding_size": 2**16,
    "intermediate_size": 2**18,
    "num_attention_heads": 2**10,
    "type_vocab_size": 2**16,
    "task_type_vocab_size": 2**16,
    "condition_size": 2**16,
    "conv_kernel_size": 2**10,
    # every length a config sets: the input limit of every family (learned table or rotary,
    # `max_sequence_length`), DeBERTa's relative span and buckets (a (2k, H) table), MPNet's
    # buckets (an (R, N) table), Longformer's windows, ModernBERT's local window
    "max_position_embeddings": 2**17,
    "max_relative_positions": 2**17,
    "position_buckets": 2**17,
    "relative_attention_buckets": 2**17,
    "attention_window": 2**17,
    "local_attention": 2**17,
}


# field -> kind, checked for every EncoderConfig before any other rule (types first, so the
# range rules below never compare a string with a number).
_POSITIVE_INTS = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "embedding_size",
    "max_position_embeddings",
    "inner_group_num",
    "num_hidden_groups",
)
_INTS = (
    "type_vocab_size",
    "pad_token_id",
    "max_relative_positions",
    "emd_layers",
    "position_buckets",
    "conv_kernel_size",
    "conv_groups",
    "relative_attention_buckets",
    "task_type_vocab_size",
    "local_attention",
    "global_attention_every",
)
_BOOLS = (
    "attention_bias",
    "relative_attention",
    "position_biased_input",
    "use_pooler",
    "share_att_key",
    "key_bias",
    "rotary_interleaved",
    "rotary_value",
    "rotary_table",
    "use_task_id",
    "first_attention_norm",
    "norm_bias",
    "mlp_bias",
    "mlp_up_bias",
    "base_pooler",
    "task_transform",
    "head_bias",
)
_STRINGS = (
    "position_scheme",
    "attention_kind",
    "hidden_act",
    "norm_rel_ebd",
    "conv_act",
    "classifier_pooling",
    "choice_pooling",
    "classifier_activation",
    "model_type",
    "position_embedding_type",
    "ffn_kind",
    "norm_position",
)
_FLOATS = (
    "layer_norm_eps",
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
    "initializer_range",
    "rotary_base",
    "local_rope_theta",
)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float (10**400 from JSON)
        return False
