"""Per-family key tables: Hugging Face names → ours. Data only; `convert.py` applies them.

Templates use ``{i}`` for the unique-layer index; tables of families that store their unique
layers in groups (ALBERT) use ``{g}`` for the group and ``{j}`` for the layer inside it
(i = g·inner_group_num + j; see `convert.layer_fields`). A value of ``None`` drops the key on
purpose (buffers, and tied decoder copies that equal the token embedding). `Join` entries build
one of our tensors from several Hugging Face tensors (our attention keeps Q, K and V in one fused
projection) with a named, tested transform from `convert.JOINS`.

Our names (the state dict of `bertfamily.Model`):
    encoder.embeddings.{token,segment,position,norm,projection}.*
    encoder.layers.{i}.attention.{qkv,out}.*   encoder.layers.{i}.attention_norm.*
    encoder.layers.{i}.ffn.{up,down}.*          encoder.layers.{i}.ffn_norm.*
    encoder.pooler.dense.*
    mlm_head.{dense,norm}.*  mlm_head.bias       pair_head.classifier.*
    rtd_head.{dense,out}.*   (ELECTRA's replaced-token detection)
    task_head.{dense,out}.*  (one fine-tuning head: classify, tokens, qa, choice)
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any


@dataclass(frozen=True)
class Join:
    """Our key ← several Hugging Face keys, combined by the transform named ``kind``."""

    sources: tuple[str, ...]
    kind: str = "concat"


@dataclass(frozen=True)
class FamilyMap:
    """Everything needed to read and write one family's Hugging Face checkpoints.

    Attributes:
        model_type: config.json's ``model_type``.
        base_prefix: prefix of trunk keys inside task models (``bert.``); base models have none.
        trunk: table for embeddings and layers (keys without ``base_prefix``).
        pooler: table for the pooler (a separate component: BertForMaskedLM has none).
        heads: head name → table (keys of task models, outside ``base_prefix``).
        architectures: sorted head names joined by "+" → the class name to write in config.json.
        config_fields: config.json name → EncoderConfig field.
        config_fixed: EncoderConfig fields this family always has (not stored in config.json).
        config_required: config.json name → the only value we support (else a clear error).
    """

    model_type: str
    base_prefix: str
    trunk: dict[str, Any]
    pooler: dict[str, Any]
    heads: dict[str, dict[str, Any]]
    architectures: dict[str, str]
    config_fields: dict[str, str]
    config_fixed: dict[str, Any] = field(default_factory=dict)
    config_required: dict[str, Any] = field(default_factory=dict)
    # optional: our keys a model may lack by configuration; the checkpoint's
    # tensor is then dropped on purpose (DeBERTa's absolute position table, kept in published
    # checkpoints although position_biased_input=False). config_written: config.json values
    # always written on save (not read back).
    optional: tuple[str, ...] = ()
    config_written: dict[str, Any] = field(default_factory=dict)
    # config_defaults: EncoderConfig fields this family takes when
    # config.json does not name them (transformers' class defaults, e.g. DeBERTa's
    # pooler_hidden_act "gelu"); values read from config.json win.
    config_defaults: dict[str, Any] = field(default_factory=dict)
    # head_layouts: head name → the Hugging Face layouts that head is stored in, where there
    # is more than one (DeBERTa's masked-LM head). ``heads[name]`` is then their union (so
    # detection and dropping foreign heads see every key); a checkpoint is read in the one
    # layout it holds and the first layout is the one written (`convert.head_tables`).
    head_layouts: dict[str, tuple[dict[str, Any], ...]] = field(default_factory=dict)
    # mismatch_hints: our key → a sentence added to the load error when that key's shape
    # does not match (a known broken writer, named with its cause and the way out).
    mismatch_hints: dict[str, str] = field(default_factory=dict)
    # unused: prefixes of Hugging Face keys that no transformers class of the family reads
    # (DeBERTa-v3's replaced-token-detection head `mask_predictions.*` in the published
    # checkpoints); dropped on purpose by every load and listed in `LoadReport.dropped`.
    unused: tuple[str, ...] = ()
    # config_mirrors: EncoderConfig field → the field whose value it always takes in this
    # family (RoFormer's classification head applies the hidden_act); a config where they
    # differ is refused on save.
    config_mirrors: dict[str, str] = field(default_factory=dict)


def _wb(hf: str, ours: str) -> dict[str, str]:
    """weight and bias of one module."""
    return {f"{hf}.weight": f"{ours}.weight", f"{hf}.bias": f"{ours}.bias"}


def _qkv(q: str, k: str, v: str, ours: str) -> dict[str, Join]:
    return {
        f"{ours}.weight": Join((f"{q}.weight", f"{k}.weight", f"{v}.weight")),
        f"{ours}.bias": Join((f"{q}.bias", f"{k}.bias", f"{v}.bias")),
    }


def task_heads(
    classify: dict[str, str],
    choice: dict[str, str],
    tokens: str = "classifier",
    qa: str = "qa_outputs",
) -> dict[str, dict[str, str]]:
    """The four fine-tuning head tables of a family (heads/tasks.py; keys outside the base
    prefix). ``classify``/``choice``: HF module → ours ("task_head.dense" / "task_head.out")."""
    return {
        "classify": {k: v for hf, ours in classify.items() for k, v in _wb(hf, ours).items()},
        "tokens": _wb(tokens, "task_head.out"),
        "qa": _wb(qa, "task_head.out"),
        "choice": {k: v for hf, ours in choice.items() for k, v in _wb(hf, ours).items()},
    }


def task_architectures(prefix: str) -> dict[str, str]:
    """Head name → transformers class, e.g. "classify" → BertForSequenceClassification."""
    return {
        "classify": f"{prefix}ForSequenceClassification",
        "tokens": f"{prefix}ForTokenClassification",
        "qa": f"{prefix}ForQuestionAnswering",
        "choice": f"{prefix}ForMultipleChoice",
    }


# ---------------------------------------------------------------------------------------------
# BERT (also SpanBERT, TinyBERT, BERT-tiny, MiniLM) and RoBERTa share the trunk layout.
_BERT_TRUNK: dict[str, Any] = {
    "embeddings.word_embeddings.weight": "encoder.embeddings.token.weight",
    "embeddings.token_type_embeddings.weight": "encoder.embeddings.segment.weight",
    "embeddings.position_embeddings.weight": "encoder.embeddings.position.weight",
    **_wb("embeddings.LayerNorm", "encoder.embeddings.norm"),
    "embeddings.position_ids": None,  # buffer
    "embeddings.token_type_ids": None,  # buffer
    **_qkv(
        "encoder.layer.{i}.attention.self.query",
        "encoder.layer.{i}.attention.self.key",
        "encoder.layer.{i}.attention.self.value",
        "encoder.layers.{i}.attention.qkv",
    ),
    **_wb("encoder.layer.{i}.attention.output.dense", "encoder.layers.{i}.attention.out"),
    **_wb("encoder.layer.{i}.attention.output.LayerNorm", "encoder.layers.{i}.attention_norm"),
    **_wb("encoder.layer.{i}.intermediate.dense", "encoder.layers.{i}.ffn.up"),
    **_wb("encoder.layer.{i}.output.dense", "encoder.layers.{i}.ffn.down"),
    **_wb("encoder.layer.{i}.output.LayerNorm", "encoder.layers.{i}.ffn_norm"),
}
_BERT_POOLER = _wb("pooler.dense", "encoder.pooler.dense")

_BERT_CONFIG = {
    "vocab_size": "vocab_size",
    "hidden_size": "hidden_size",
    "num_hidden_layers": "num_hidden_layers",
    "num_attention_heads": "num_attention_heads",
    "intermediate_size": "intermediate_size",
    "hidden_act": "hidden_act",
    "hidden_dropout_prob": "hidden_dropout_prob",
    "attention_probs_dropout_prob": "attention_probs_dropout_prob",
    "max_position_embeddings": "max_position_embeddings",
    "type_vocab_size": "type_vocab_size",
    "initializer_range": "initializer_range",
    "layer_norm_eps": "layer_norm_eps",
    "pad_token_id": "pad_token_id",
    "classifier_dropout": "classifier_dropout",  # task heads; None = hidden_dropout_prob
}

BERT = FamilyMap(
    model_type="bert",
    base_prefix="bert.",
    trunk=_BERT_TRUNK,
    pooler=_BERT_POOLER,
    heads={
        "mlm": {
            **_wb("cls.predictions.transform.dense", "mlm_head.dense"),
            **_wb("cls.predictions.transform.LayerNorm", "mlm_head.norm"),
            "cls.predictions.bias": "mlm_head.bias",
            "cls.predictions.decoder.weight": None,  # tied to the token embedding
            "cls.predictions.decoder.bias": None,  # alias of cls.predictions.bias
        },
        "pair": _wb("cls.seq_relationship", "pair_head.classifier"),
        # pooled [CLS] → dropout → classifier
        **task_heads(
            classify={"classifier": "task_head.out"}, choice={"classifier": "task_head.out"}
        ),
    },
    architectures={
        "": "BertModel",
        "mlm": "BertForMaskedLM",
        "mlm+pair": "BertForPreTraining",
        "pair": "BertForNextSentencePrediction",
        **task_architectures("Bert"),
    },
    config_fields=_BERT_CONFIG,
    config_fixed={"position_scheme": "absolute"},
    config_required={"position_embedding_type": "absolute"},
)

ROBERTA = FamilyMap(
    model_type="roberta",
    base_prefix="roberta.",
    trunk=_BERT_TRUNK,
    pooler=_BERT_POOLER,
    heads={
        "mlm": {
            **_wb("lm_head.dense", "mlm_head.dense"),
            **_wb("lm_head.layer_norm", "mlm_head.norm"),
            "lm_head.bias": "mlm_head.bias",
            "lm_head.decoder.weight": None,  # tied
            "lm_head.decoder.bias": None,  # alias of lm_head.bias
        },
        # RobertaClassificationHead: first token → dense → tanh → out_proj (no pooler);
        # RobertaForMultipleChoice: pooled output → classifier
        **task_heads(
            classify={
                "classifier.dense": "task_head.dense",
                "classifier.out_proj": "task_head.out",
            },
            choice={"classifier": "task_head.out"},
        ),
    },
    architectures={
        "": "RobertaModel",
        "mlm": "RobertaForMaskedLM",
        **task_architectures("Roberta"),
    },
    config_fields=_BERT_CONFIG,
    # RoBERTa: positions start at pad_token_id + 1 (fairseq's make_positions); no NSP.
    config_fixed={
        "position_scheme": "absolute_from_padding",
        "pair_head": None,
        "classifier_pooling": "first_token_dense",
        "choice_pooling": "pooler",
        "classifier_activation": "tanh",
    },
    config_required={"position_embedding_type": "absolute"},
)

DISTILBERT = FamilyMap(
    model_type="distilbert",
    base_prefix="distilbert.",
    trunk={
        "embeddings.word_embeddings.weight": "encoder.embeddings.token.weight",
        "embeddings.position_embeddings.weight": "encoder.embeddings.position.weight",
        **_wb("embeddings.LayerNorm", "encoder.embeddings.norm"),
        "embeddings.position_ids": None,  # buffer
        **_qkv(
            "transformer.layer.{i}.attention.q_lin",
            "transformer.layer.{i}.attention.k_lin",
            "transformer.layer.{i}.attention.v_lin",
            "encoder.layers.{i}.attention.qkv",
        ),
        **_wb("transformer.layer.{i}.attention.out_lin", "encoder.layers.{i}.attention.out"),
        **_wb("transformer.layer.{i}.sa_layer_norm", "encoder.layers.{i}.attention_norm"),
        **_wb("transformer.layer.{i}.ffn.lin1", "encoder.layers.{i}.ffn.up"),
        **_wb("transformer.layer.{i}.ffn.lin2", "encoder.layers.{i}.ffn.down"),
        **_wb("transformer.layer.{i}.output_layer_norm", "encoder.layers.{i}.ffn_norm"),
    },
    pooler={},
    heads={
        "mlm": {
            **_wb("vocab_transform", "mlm_head.dense"),
            **_wb("vocab_layer_norm", "mlm_head.norm"),
            "vocab_projector.bias": "mlm_head.bias",
            "vocab_projector.weight": None,  # tied
        },
        # first token → pre_classifier → ReLU → dropout → classifier (sequence and choice)
        **task_heads(
            classify={"pre_classifier": "task_head.dense", "classifier": "task_head.out"},
            choice={"pre_classifier": "task_head.dense", "classifier": "task_head.out"},
        ),
    },
    architectures={
        "": "DistilBertModel",
        "mlm": "DistilBertForMaskedLM",
        **task_architectures("DistilBert"),
    },
    config_fields={
        "vocab_size": "vocab_size",
        "dim": "hidden_size",
        "n_layers": "num_hidden_layers",
        "n_heads": "num_attention_heads",
        "hidden_dim": "intermediate_size",
        "activation": "hidden_act",
        "dropout": "hidden_dropout_prob",
        "attention_dropout": "attention_probs_dropout_prob",
        "max_position_embeddings": "max_position_embeddings",
        "initializer_range": "initializer_range",
        "pad_token_id": "pad_token_id",
        "seq_classif_dropout": "classifier_dropout",
    },
    # DistilBERT: no token types, no pooler, LayerNorm eps fixed at 1e-12 in its code.
    config_fixed={
        "type_vocab_size": 0,
        "use_pooler": False,
        "pair_head": None,
        "layer_norm_eps": 1e-12,
        "position_scheme": "absolute",
        "classifier_pooling": "first_token_dense",
        "choice_pooling": "first_token_dense",
        "classifier_activation": "relu",
    },
    config_required={"sinusoidal_pos_embds": False},
)

# ---------------------------------------------------------------------------------------------
# ALBERT (Lan et al. 2020): factorised embedding (lookups and LayerNorm in E, then E→H in the
# encoder), unique layers stored in groups, pooler as a bare Linear, MLM head in E, SOP head.
_ALBERT_LAYER = "encoder.albert_layer_groups.{g}.albert_layers.{j}"
ALBERT = FamilyMap(
    model_type="albert",
    base_prefix="albert.",
    trunk={
        "embeddings.word_embeddings.weight": "encoder.embeddings.token.weight",
        "embeddings.token_type_embeddings.weight": "encoder.embeddings.segment.weight",
        "embeddings.position_embeddings.weight": "encoder.embeddings.position.weight",
        **_wb("embeddings.LayerNorm", "encoder.embeddings.norm"),
        "embeddings.position_ids": None,  # buffer
        "embeddings.token_type_ids": None,  # buffer
        **_wb("encoder.embedding_hidden_mapping_in", "encoder.embeddings.projection"),
        **_qkv(
            f"{_ALBERT_LAYER}.attention.query",
            f"{_ALBERT_LAYER}.attention.key",
            f"{_ALBERT_LAYER}.attention.value",
            "encoder.layers.{i}.attention.qkv",
        ),
        **_wb(f"{_ALBERT_LAYER}.attention.dense", "encoder.layers.{i}.attention.out"),
        **_wb(f"{_ALBERT_LAYER}.attention.LayerNorm", "encoder.layers.{i}.attention_norm"),
        **_wb(f"{_ALBERT_LAYER}.ffn", "encoder.layers.{i}.ffn.up"),
        **_wb(f"{_ALBERT_LAYER}.ffn_output", "encoder.layers.{i}.ffn.down"),
        **_wb(f"{_ALBERT_LAYER}.full_layer_layer_norm", "encoder.layers.{i}.ffn_norm"),
    },
    pooler=_wb("pooler", "encoder.pooler.dense"),
    heads={
        "mlm": {
            **_wb("predictions.dense", "mlm_head.dense"),
            **_wb("predictions.LayerNorm", "mlm_head.norm"),
            "predictions.bias": "mlm_head.bias",
            "predictions.decoder.weight": None,  # tied to the token embedding
            "predictions.decoder.bias": None,  # alias of predictions.bias
        },
        "pair": _wb("sop_classifier.classifier", "pair_head.classifier"),
        # Albert*: pooled [CLS] → dropout → classifier, as BERT
        **task_heads(
            classify={"classifier": "task_head.out"}, choice={"classifier": "task_head.out"}
        ),
    },
    architectures={
        "": "AlbertModel",
        "mlm": "AlbertForMaskedLM",
        "mlm+pair": "AlbertForPreTraining",
        **task_architectures("Albert"),
    },
    config_fields={
        **{k: v for k, v in _BERT_CONFIG.items() if k != "classifier_dropout"},
        "classifier_dropout_prob": "classifier_dropout",  # AlbertConfig's name
        "embedding_size": "embedding_size",
        "num_hidden_groups": "num_hidden_groups",
        "inner_group_num": "inner_group_num",
    },
    # ALBERT pretrains with sentence-order prediction (Lan et al. 2020 §4.1).
    config_fixed={"position_scheme": "absolute", "pair_head": "sop"},
    config_required={"position_embedding_type": "absolute"},
)

# --- DeBERTa (v1 and v2/v3) ------------------------------------------------------------------
# The masked-LM head of both versions, in the two layouts transformers' *ForMaskedLM reads,
# chosen there by config.json's `legacy` (default true):
#   legacy=false: `lm_predictions.lm_head.*`, the layout of the published checkpoints
#     (microsoft/deberta-base, deberta-v3-*; their config.json has no `legacy`, so
#     transformers itself leaves their head randomly initialised); decoder = word embedding.
#   legacy=true: BERT-like `cls.predictions.*`; the decoder's weight is tied to the word
#     embedding and its bias is cls.predictions.bias, so save_pretrained (4.x and 5.x) stores
#     neither.
# We read the layout a checkpoint holds (never both) and WRITE legacy=true: transformers 4.x,
# when legacy=false, ties `lm_predictions.lm_head.dense` (its get_output_embeddings) to the
# word embedding, so a legacy=false directory breaks there (the (V, H) embedding replaces the
# (H, H) dense, and the file stores the embedding under the dense's name only); the legacy
# layout loads with identical outputs in 4.x and 5.x.
_DEBERTA_MLM_LEGACY: dict[str, Any] = {
    **_wb("cls.predictions.transform.dense", "mlm_head.dense"),
    **_wb("cls.predictions.transform.LayerNorm", "mlm_head.norm"),
    "cls.predictions.bias": "mlm_head.bias",
    "cls.predictions.decoder.weight": None,  # tied to the token embedding
    "cls.predictions.decoder.bias": None,  # alias of cls.predictions.bias
}
_DEBERTA_MLM_ORIGINAL: dict[str, Any] = {
    **_wb("lm_predictions.lm_head.dense", "mlm_head.dense"),
    **_wb("lm_predictions.lm_head.LayerNorm", "mlm_head.norm"),
    "lm_predictions.lm_head.bias": "mlm_head.bias",
}
_DEBERTA_MLM_LAYOUTS = (_DEBERTA_MLM_LEGACY, _DEBERTA_MLM_ORIGINAL)  # the first is written
_DEBERTA_MLM_HINT = {
    "mlm_head.dense.weight": (
        "a masked-LM directory written by transformers 4.x with legacy=false holds the (V, H) "
        "word embedding under lm_predictions.lm_head.dense.weight (4.x ties that dense layer "
        "to the embedding), so the head's own dense weights were never saved and transformers "
        "cannot run it either. The trunk is recoverable: rename that tensor to "
        "deberta.embeddings.word_embeddings.weight, drop the other lm_predictions.* tensors, "
        "and load with heads=[] (or new_heads=True)."
    )
}
# config.json keys every DeBERTa family reads the same way (DebertaConfig / DebertaV2Config).
_DEBERTA_CONFIG = {
    **{k: v for k, v in _BERT_CONFIG.items() if k != "classifier_dropout"},
    "cls_dropout": "classifier_dropout",  # DebertaConfig's name
    "pooler_hidden_act": "classifier_activation",
    "relative_attention": "relative_attention",
    "max_relative_positions": "max_relative_positions",
    "pos_att_type": "pos_att_type",
    "position_biased_input": "position_biased_input",
    "emd_layers": "emd_layers",
}
_DEBERTA_FIXED = {
    "attention_kind": "disentangled",
    "position_scheme": "absolute",
    "use_pooler": False,
    "pair_head": None,
    "classifier_pooling": "first_token_dense",
    "choice_pooling": "first_token_dense",
}
# DeBERTa v1 (microsoft/deberta-base; transformers' modeling_deberta.py). The checkpoint keeps
# Q/K/V in one bias-free `in_proj` whose rows are interleaved per head [q0, k0, v0, q1, ...]
# (Join kind "heads_interleaved"), with separate q_bias / v_bias.
_DL = "encoder.layer.{i}.attention"
DEBERTA = FamilyMap(
    model_type="deberta",
    base_prefix="deberta.",
    trunk={
        "embeddings.word_embeddings.weight": "encoder.embeddings.token.weight",
        "embeddings.position_embeddings.weight": "encoder.embeddings.position.weight",
        "embeddings.token_type_embeddings.weight": "encoder.embeddings.segment.weight",
        **_wb("embeddings.LayerNorm", "encoder.embeddings.norm"),
        "embeddings.position_ids": None,  # buffer
        "encoder.rel_embeddings.weight": "encoder.attention_inputs.embeddings.weight",
        "encoder.layers.{i}.attention.qkv.weight": Join(
            (f"{_DL}.self.in_proj.weight",), "heads_interleaved"
        ),
        f"{_DL}.self.q_bias": "encoder.layers.{i}.attention.q_bias",
        f"{_DL}.self.v_bias": "encoder.layers.{i}.attention.v_bias",
        f"{_DL}.self.pos_proj.weight": "encoder.layers.{i}.attention.pos_key.weight",
        **_wb(f"{_DL}.self.pos_q_proj", "encoder.layers.{i}.attention.pos_query"),
        **_wb(f"{_DL}.output.dense", "encoder.layers.{i}.attention.out"),
        **_wb(f"{_DL}.output.LayerNorm", "encoder.layers.{i}.attention_norm"),
        **_wb("encoder.layer.{i}.intermediate.dense", "encoder.layers.{i}.ffn.up"),
        **_wb("encoder.layer.{i}.output.dense", "encoder.layers.{i}.ffn.down"),
        **_wb("encoder.layer.{i}.output.LayerNorm", "encoder.layers.{i}.ffn_norm"),
    },
    # DebertaModel has no pooler; the ContextPooler (`pooler.dense`, GELU) belongs to the
    # sequence-classification model and is wired with the task heads.
    pooler={},
    heads={
        # both layouts (see _DEBERTA_MLM_LAYOUTS above): either is read, legacy=true written
        "mlm": {**_DEBERTA_MLM_LEGACY, **_DEBERTA_MLM_ORIGINAL},
        # DebertaForSequenceClassification: ContextPooler (`pooler.dense` on the first token,
        # pooler_hidden_act) → dropout → classifier. transformers has no DeBERTa (v1) multiple-
        # choice class: our choice head (first token, like classify) trains but cannot be saved.
        **{
            name: table
            for name, table in task_heads(
                classify={"pooler.dense": "task_head.dense", "classifier": "task_head.out"},
                choice={},
            ).items()
            if name != "choice"
        },
    },
    architectures={
        "": "DebertaModel",
        "mlm": "DebertaForMaskedLM",
        **{k: v for k, v in task_architectures("Deberta").items() if k != "choice"},
    },
    config_fields=_DEBERTA_CONFIG,
    config_fixed={**_DEBERTA_FIXED, "key_bias": False},
    optional=("encoder.embeddings.position.weight",),
    config_written={"legacy": True},  # the cls.predictions.* layout, see above
    config_defaults={"classifier_activation": "gelu"},  # DebertaConfig.pooler_hidden_act
    head_layouts={"mlm": _DEBERTA_MLM_LAYOUTS},
    mismatch_hints=_DEBERTA_MLM_HINT,
)

# DeBERTa-v2/v3 (microsoft/deberta-v3-base; transformers' modeling_deberta_v2.py): separate
# biased query/key/value projections (concatenated into our fused Q/K/V), biased position
# projections (absent with share_att_key), an optional LayerNorm on the relative table
# (norm_rel_ebd) and an optional convolution beside the first layer (encoder.conv).
_D2 = "encoder.layer.{i}.attention"
_D2_ATT = "encoder.layers.{i}.attention"
DEBERTA_V2 = FamilyMap(
    model_type="deberta-v2",
    base_prefix="deberta.",
    # microsoft/deberta-v3-*: the pretraining discriminator's head (dense, LayerNorm,
    # classifier H→1), which transformers also leaves unused
    unused=("mask_predictions.",),
    trunk={
        **{k: v for k, v in DEBERTA.trunk.items() if not k.startswith(_DL + ".self.")},
        "encoder.layers.{i}.attention.qkv.weight": Join(
            (f"{_D2}.self.query_proj.weight", f"{_D2}.self.key_proj.weight")
            + (f"{_D2}.self.value_proj.weight",)
        ),
        f"{_D2}.self.query_proj.bias": f"{_D2_ATT}.q_bias",
        f"{_D2}.self.key_proj.bias": f"{_D2_ATT}.k_bias",
        f"{_D2}.self.value_proj.bias": f"{_D2_ATT}.v_bias",
        **_wb(f"{_D2}.self.pos_key_proj", f"{_D2_ATT}.pos_key"),
        **_wb(f"{_D2}.self.pos_query_proj", f"{_D2_ATT}.pos_query"),
        **_wb("encoder.LayerNorm", "encoder.attention_inputs.norm"),  # norm_rel_ebd
        **_wb("encoder.conv.conv", "encoder.first_layer_branch.conv"),
        **_wb("encoder.conv.LayerNorm", "encoder.first_layer_branch.norm"),
    },
    pooler={},  # the ContextPooler belongs to the task heads, as in v1
    heads={
        "mlm": {**_DEBERTA_MLM_LEGACY, **_DEBERTA_MLM_ORIGINAL},
        # sequence classification and multiple choice: ContextPooler (`pooler.dense` on the
        # first token, pooler_hidden_act) → dropout → classifier (C outputs, or 1 per choice)
        **task_heads(
            classify={"pooler.dense": "task_head.dense", "classifier": "task_head.out"},
            choice={"pooler.dense": "task_head.dense", "classifier": "task_head.out"},
        ),
    },
    architectures={
        "": "DebertaV2Model",
        "mlm": "DebertaV2ForMaskedLM",
        **task_architectures("DebertaV2"),
    },
    config_fields={
        **_DEBERTA_CONFIG,
        "position_buckets": "position_buckets",
        "share_att_key": "share_att_key",
        "norm_rel_ebd": "norm_rel_ebd",
        "conv_kernel_size": "conv_kernel_size",
        "conv_act": "conv_act",
        "conv_groups": "conv_groups",
    },
    config_fixed={**_DEBERTA_FIXED, "key_bias": True},
    optional=("encoder.embeddings.position.weight",),
    config_written={"legacy": True},  # the cls.predictions.* layout, see above
    # DebertaV2Config's defaults where they differ from ours (a config.json may omit them)
    config_defaults={
        "classifier_activation": "gelu",
        "vocab_size": 128100,
        "hidden_size": 1536,
        "num_hidden_layers": 24,
        "num_attention_heads": 24,
        "intermediate_size": 6144,
        "type_vocab_size": 0,
        "layer_norm_eps": 1e-7,
    },
    head_layouts={"mlm": _DEBERTA_MLM_LAYOUTS},
    mismatch_hints=_DEBERTA_MLM_HINT,
)

# Longformer: the RoBERTa layout with separate Q/K/V projections for global attention. Ours:
# encoder.layers.{i}.attention.{qkv,query_global,kv_global,out}.* (kv_global = [K_g; V_g]).
_LF_SELF = "encoder.layer.{i}.attention.self"
LONGFORMER = FamilyMap(
    model_type="longformer",
    base_prefix="longformer.",
    trunk={
        **{k: v for k, v in _BERT_TRUNK.items() if ".attention.qkv." not in k},
        **_qkv(
            f"{_LF_SELF}.query",
            f"{_LF_SELF}.key",
            f"{_LF_SELF}.value",
            "encoder.layers.{i}.attention.qkv",
        ),
        **_wb(f"{_LF_SELF}.query_global", "encoder.layers.{i}.attention.query_global"),
        "encoder.layers.{i}.attention.kv_global.weight": Join(
            (f"{_LF_SELF}.key_global.weight", f"{_LF_SELF}.value_global.weight")
        ),
        "encoder.layers.{i}.attention.kv_global.bias": Join(
            (f"{_LF_SELF}.key_global.bias", f"{_LF_SELF}.value_global.bias")
        ),
    },
    pooler=_BERT_POOLER,
    # lm_head.* and the task heads as in RoBERTa (LongformerClassificationHead: first token →
    # dense → tanh → out_proj; multiple choice: pooled output → classifier). Default global
    # attention of the task heads: Model.forward, heads/global_attention.py.
    heads=ROBERTA.heads,
    architectures={
        "": "LongformerModel",
        "mlm": "LongformerForMaskedLM",
        **task_architectures("Longformer"),
    },
    config_fields={
        **_BERT_CONFIG,
        "attention_window": "attention_window",
        "sep_token_id": "sep_token_id",
    },
    config_fixed={
        "position_scheme": "absolute_from_padding",
        "pair_head": None,
        "attention_kind": "windowed",
        "classifier_pooling": "first_token_dense",
        "choice_pooling": "pooler",
        "classifier_activation": "tanh",
    },
    config_defaults={"sep_token_id": 2},  # LongformerConfig's default
)

# XLM-RoBERTa (Conneau et al. 2020) and CamemBERT (Martin et al. 2020): RoBERTa's layout and
# behaviour (positions from padding, lm_head, classification head on the first token) under
# their own model_type and class names, so a save loads in transformers as the same class.
XLM_ROBERTA = replace(
    ROBERTA,
    model_type="xlm-roberta",
    architectures={
        "": "XLMRobertaModel",
        "mlm": "XLMRobertaForMaskedLM",
        **task_architectures("XLMRoberta"),
    },
)
CAMEMBERT = replace(
    ROBERTA,
    model_type="camembert",
    architectures={
        "": "CamembertModel",
        "mlm": "CamembertForMaskedLM",
        **task_architectures("Camembert"),
    },
)

# ELECTRA (Clark et al. 2020): BERT layers under lookups in E, then `embeddings_project` E→H
# when E ≠ H (our embeddings' projection, as ALBERT's); no pooler. The generator's MLM head
# works in E with a fixed GELU; the discriminator's replaced-token-detection head ("rtd")
# reads the hidden_act. Sequence classification: first token → dense → GELU → out_proj;
# multiple choice: `sequence_summary.summary` (first token, Linear H→H, summary_activation)
# → classifier H→1. The same names in transformers 4.x and 5.x.
ELECTRA = FamilyMap(
    model_type="electra",
    base_prefix="electra.",
    trunk={
        **_BERT_TRUNK,
        **_wb("embeddings_project", "encoder.embeddings.projection"),  # only when E ≠ H
    },
    pooler={},
    heads={
        "mlm": {
            **_wb("generator_predictions.dense", "mlm_head.dense"),
            **_wb("generator_predictions.LayerNorm", "mlm_head.norm"),
            "generator_lm_head.bias": "mlm_head.bias",
            "generator_lm_head.weight": None,  # tied to the token embedding
        },
        "rtd": {
            **_wb("discriminator_predictions.dense", "rtd_head.dense"),
            **_wb("discriminator_predictions.dense_prediction", "rtd_head.out"),
        },
        **task_heads(
            classify={
                "classifier.dense": "task_head.dense",
                "classifier.out_proj": "task_head.out",
            },
            choice={
                "sequence_summary.summary": "task_head.dense",
                "classifier": "task_head.out",
            },
        ),
    },
    architectures={
        "": "ElectraModel",
        "mlm": "ElectraForMaskedLM",
        "rtd": "ElectraForPreTraining",
        **task_architectures("Electra"),
    },
    config_fields={**_BERT_CONFIG, "embedding_size": "embedding_size"},
    config_fixed={
        "position_scheme": "absolute",
        "use_pooler": False,
        "pair_head": None,
        "mlm_activation": "gelu",  # ElectraGeneratorPredictions: gelu whatever the hidden_act
        "classifier_pooling": "first_token_dense",
        "choice_pooling": "first_token_dense",
        "classifier_activation": "gelu",  # ElectraClassificationHead; summary_activation below
    },
    # The multiple-choice summary we run: the first token, projected H→H, then GELU (our
    # choice head shares classifier_activation). Other summaries are refused, not misread.
    config_required={
        "position_embedding_type": "absolute",
        "summary_type": "first",
        "summary_use_proj": True,
        "summary_activation": "gelu",
        "summary_proj_to_labels": False,
    },
)

# ---------------------------------------------------------------------------------------------
# RoFormer (Su et al. 2021; transformers' modeling_roformer.py): the BERT layer with rotary
# positions (interleaved pairs, the frozen sin/cos table `encoder.embed_positions` stored in
# checkpoints), no learned position table, ELECTRA's `embeddings_project` when E ≠ H, no
# pooler. Sequence classification: first token → dense → hidden_act → out_proj. transformers'
# RoFormerForMultipleChoice summarises the LAST position (SequenceSummary's default "last",
# a padding token in a right-padded batch), which no head of ours reads: not mapped.
ROFORMER = FamilyMap(
    model_type="roformer",
    base_prefix="roformer.",
    trunk={
        **{k: v for k, v in _BERT_TRUNK.items() if "position" not in k},
        **_wb("embeddings_project", "encoder.embeddings.projection"),  # only when E ≠ H
        "encoder.embed_positions.weight": "encoder.attention_inputs.weight",
    },
    pooler={},
    heads={
        "mlm": BERT.heads["mlm"],
        **{
            name: table
            for name, table in task_heads(
                classify={
                    "classifier.dense": "task_head.dense",
                    "classifier.out_proj": "task_head.out",
                },
                choice={},
            ).items()
            if name != "choice"
        },
    },
    architectures={
        "": "RoFormerModel",
        "mlm": "RoFormerForMaskedLM",
        **{k: v for k, v in task_architectures("RoFormer").items() if k != "choice"},
    },
    config_fields={
        **{k: v for k, v in _BERT_CONFIG.items() if k != "classifier_dropout"},
        "embedding_size": "embedding_size",
        "rotary_value": "rotary_value",
    },
    config_fixed={
        "position_scheme": "absolute",
        "position_embedding_type": "rotary",
        "position_biased_input": False,
        "rotary_interleaved": True,
        "rotary_table": True,
        "rotary_base": 10000.0,
        "use_pooler": False,
        "pair_head": None,
        "classifier_pooling": "first_token_dense",
        "choice_pooling": "first_token_dense",
    },
    config_defaults={"vocab_size": 50000, "max_position_embeddings": 1536},
    config_mirrors={"classifier_activation": "hidden_act"},
)

# ERNIE 1.0 / 3.0 (Baidu; transformers' modeling_ernie.py): BERT's layout and heads under
# `ernie.`, plus the task-type embedding when use_task_id (ERNIE 3.0).
ERNIE = FamilyMap(
    model_type="ernie",
    base_prefix="ernie.",
    trunk={
        **_BERT_TRUNK,
        "embeddings.task_type_embeddings.weight": "encoder.embeddings.task_type.weight",
    },
    pooler=_BERT_POOLER,
    heads=BERT.heads,
    architectures={
        "": "ErnieModel",
        "mlm": "ErnieForMaskedLM",
        "mlm+pair": "ErnieForPreTraining",
        "pair": "ErnieForNextSentencePrediction",
        **task_architectures("Ernie"),
    },
    config_fields={
        **_BERT_CONFIG,
        "use_task_id": "use_task_id",
        "task_type_vocab_size": "task_type_vocab_size",
    },
    config_fixed={"position_scheme": "absolute"},
    config_required={"position_embedding_type": "absolute"},
)

# MPNet (Song et al. 2020; transformers' modeling_mpnet.py): RoBERTa's positions (from the
# padding id 1), no segments, separate attn.q/k/v/o projections, and T5-style relative position
# buckets: one `encoder.relative_attention_bias` (buckets, N) table shared by all layers.
# Heads: RoBERTa's `lm_head` (fixed GELU) and classification head (first token, dense, tanh);
# multiple choice reads the pooler.
_MP = "encoder.layer.{i}.attention"
MPNET = FamilyMap(
    model_type="mpnet",
    base_prefix="mpnet.",
    trunk={
        "embeddings.word_embeddings.weight": "encoder.embeddings.token.weight",
        "embeddings.position_embeddings.weight": "encoder.embeddings.position.weight",
        **_wb("embeddings.LayerNorm", "encoder.embeddings.norm"),
        "embeddings.position_ids": None,  # buffer
        **_qkv(
            f"{_MP}.attn.q", f"{_MP}.attn.k", f"{_MP}.attn.v", "encoder.layers.{i}.attention.qkv"
        ),
        **_wb(f"{_MP}.attn.o", "encoder.layers.{i}.attention.out"),
        **_wb(f"{_MP}.LayerNorm", "encoder.layers.{i}.attention_norm"),
        **_wb("encoder.layer.{i}.intermediate.dense", "encoder.layers.{i}.ffn.up"),
        **_wb("encoder.layer.{i}.output.dense", "encoder.layers.{i}.ffn.down"),
        **_wb("encoder.layer.{i}.output.LayerNorm", "encoder.layers.{i}.ffn_norm"),
        "encoder.relative_attention_bias.weight": (
            "encoder.attention_inputs.relative_attention_bias.weight"
        ),
    },
    pooler=_BERT_POOLER,
    heads=ROBERTA.heads,
    architectures={"": "MPNetModel", "mlm": "MPNetForMaskedLM", **task_architectures("MPNet")},
    config_fields={
        **{
            k: v
            for k, v in _BERT_CONFIG.items()
            if k not in ("type_vocab_size", "classifier_dropout")
        },
        "relative_attention_num_buckets": "relative_attention_buckets",
    },
    config_fixed={
        "position_scheme": "absolute_from_padding",
        "pad_token_id": 1,  # MPNetEmbeddings' padding_idx, whatever config.json says
        "type_vocab_size": 0,
        "pair_head": None,
        "mlm_activation": "gelu",  # MPNetLMHead: gelu whatever the hidden_act
        "classifier_pooling": "first_token_dense",
        "choice_pooling": "pooler",
        "classifier_activation": "tanh",
    },
    config_defaults={"vocab_size": 30527, "relative_attention_buckets": 32},
)

# ModernBERT (Warner et al. 2024; transformers' modeling_modernbert.py): pre-LN layers whose first
# has no attention norm, a final norm, bias-free linears and norms (attention_bias, mlp_bias,
# norm_bias), a fused Wqkv ([Q; K; V] rows, ours as is), GeGLU feed-forward (Wi: H→2I), rotary
# positions with a global and a local base, local (sliding-window) attention in all but every
# global_attn_every_n_layers-th layer. No positions table, segments or pooler. Every head
# starts with ModernBertPredictionHead (`head.dense`, act, `head.norm`): the MLM head, and before
# each task head's `classifier` (our `task_head.transform`); sequence heads read the first token.
_MB_HEAD = {
    **_wb("head.dense", "task_head.transform.dense"),
    **_wb("head.norm", "task_head.transform.norm"),
    **_wb("classifier", "task_head.out"),
}
MODERNBERT = FamilyMap(
    model_type="modernbert",
    base_prefix="model.",
    trunk={
        "embeddings.tok_embeddings.weight": "encoder.embeddings.token.weight",
        **_wb("embeddings.norm", "encoder.embeddings.norm"),
        **_wb("layers.{i}.attn_norm", "encoder.layers.{i}.attention_norm"),
        **_wb("layers.{i}.attn.Wqkv", "encoder.layers.{i}.attention.qkv"),
        **_wb("layers.{i}.attn.Wo", "encoder.layers.{i}.attention.out"),
        **_wb("layers.{i}.mlp_norm", "encoder.layers.{i}.ffn_norm"),
        **_wb("layers.{i}.mlp.Wi", "encoder.layers.{i}.ffn.up"),
        **_wb("layers.{i}.mlp.Wo", "encoder.layers.{i}.ffn.down"),
        **_wb("final_norm", "encoder.final_norm"),
    },
    pooler={},
    heads={
        "mlm": {
            **_wb("head.dense", "mlm_head.dense"),
            **_wb("head.norm", "mlm_head.norm"),
            "decoder.bias": "mlm_head.bias",
            "decoder.weight": None,  # tied to the token embedding
        },
        "classify": _MB_HEAD,
        "tokens": _MB_HEAD,
        "qa": _MB_HEAD,
        "choice": _MB_HEAD,
    },
    architectures={
        "": "ModernBertModel",
        "mlm": "ModernBertForMaskedLM",
        **task_architectures("ModernBert"),
    },
    config_fields={
        "vocab_size": "vocab_size",
        "hidden_size": "hidden_size",
        "num_hidden_layers": "num_hidden_layers",
        "num_attention_heads": "num_attention_heads",
        "intermediate_size": "intermediate_size",
        "hidden_activation": "hidden_act",
        "max_position_embeddings": "max_position_embeddings",
        "initializer_range": "initializer_range",
        "norm_eps": "layer_norm_eps",
        "norm_bias": "norm_bias",
        "pad_token_id": "pad_token_id",
        "sep_token_id": "sep_token_id",
        "attention_bias": "attention_bias",
        "attention_dropout": "attention_probs_dropout_prob",
        "embedding_dropout": "hidden_dropout_prob",
        "mlp_bias": "mlp_bias",
        "local_attention": "local_attention",
        "global_attn_every_n_layers": "global_attention_every",
        "global_rope_theta": "rotary_base",
        "local_rope_theta": "local_rope_theta",
        "classifier_dropout": "classifier_dropout",
        "classifier_bias": "head_bias",
        "classifier_activation": "classifier_activation",
    },
    config_fixed={
        "position_embedding_type": "rotary",
        "position_biased_input": False,
        "type_vocab_size": 0,
        "use_pooler": False,
        "pair_head": None,
        "norm_position": "pre",
        "first_attention_norm": False,
        "ffn_kind": "geglu",
        "task_transform": True,
        "classifier_pooling": "first_token",
        "choice_pooling": "first_token",
    },
    # ModernBertConfig's defaults, for keys a config.json leaves out
    config_defaults={
        "vocab_size": 50368,
        "hidden_size": 768,
        "num_hidden_layers": 22,
        "num_attention_heads": 12,
        "intermediate_size": 1152,
        "max_position_embeddings": 8192,
        "layer_norm_eps": 1e-5,
        "norm_bias": False,
        "pad_token_id": 50283,
        "sep_token_id": 50282,
        "attention_bias": False,
        "attention_probs_dropout_prob": 0.0,
        "hidden_dropout_prob": 0.0,
        "mlp_bias": False,
        "local_attention": 128,
        "global_attention_every": 3,
        "rotary_base": 160000.0,
        "local_rope_theta": 10000.0,
        "classifier_dropout": 0.0,
        "head_bias": False,
        "classifier_activation": "gelu",
    },
    # the MLM head's transform applies classifier_activation
    config_mirrors={"mlm_activation": "classifier_activation"},
    config_required={"classifier_pooling": "cls", "decoder_bias": True},
)

# The config.json names shared by GTE and NomicBERT (transformers 5's GteConfig and
# NomicBertConfig: BERT's names without position tables, the rotary base in rope_parameters).
_ROPE_BERT_CONFIG = {**_BERT_CONFIG, "rope_theta": "rotary_base"}
# Both: post-LN layers with rotary positions on (i, i + Dh/2) pairs over the whole head, one base
# for every layer; no learned position table; the base class has no pooler, the
# sequence-classification class adds BERT's (dense + tanh on the first token).
_ROPE_BERT_FIXED = {
    "position_scheme": "absolute",
    "position_embedding_type": "rotary",
    "position_biased_input": False,
    "rotary_interleaved": False,
    "rotary_value": False,
    "rotary_table": False,
    "local_attention": 0,
    "norm_position": "post",
    "base_pooler": False,
    "pair_head": None,
    "classifier_pooling": "pooler",
    "choice_pooling": "pooler",
}

# GTE (Li et al. 2023, "Towards General Text Embeddings with Multi-stage Contrastive Learning";
# Alibaba's v1.5 / multilingual encoders, remote-code model_type "new"; transformers 5's
# modeling_gte.py, whose save_pretrained writes the original layout read here): a fused biased
# `qkv_proj` ([Q; K; V] rows, ours as is), `o_proj`, post-LN (`attn_ln`, `mlp_ln`), a GeGLU
# whose fused `up_gate_proj` (H→2I, no bias) holds [up; gate] with the activation on the
# second half (the named transform "halves_swapped" puts the gate first, as ours), a biased
# `down_proj`. Segments only when type_vocab_size > 0 (gte-base-en-v1.5 has none). Masked LM:
# dense, GELU whatever the hidden_act, `norm`, the decoder's own bias (its weight tied).
# transformers has no GTE question-answering or multiple-choice class.
_GL = "encoder.layer.{i}"
GTE = FamilyMap(
    model_type="gte",
    base_prefix="gte.",
    trunk={
        "embeddings.word_embeddings.weight": "encoder.embeddings.token.weight",
        "embeddings.token_type_embeddings.weight": "encoder.embeddings.segment.weight",
        **_wb("embeddings.LayerNorm", "encoder.embeddings.norm"),
        **_wb(f"{_GL}.attention.qkv_proj", "encoder.layers.{i}.attention.qkv"),
        **_wb(f"{_GL}.attention.o_proj", "encoder.layers.{i}.attention.out"),
        **_wb(f"{_GL}.attn_ln", "encoder.layers.{i}.attention_norm"),
        "encoder.layers.{i}.ffn.up.weight": Join(
            (f"{_GL}.mlp.up_gate_proj.weight",), "halves_swapped"
        ),
        **_wb(f"{_GL}.mlp.down_proj", "encoder.layers.{i}.ffn.down"),
        **_wb(f"{_GL}.mlp_ln", "encoder.layers.{i}.ffn_norm"),
    },
    pooler=_BERT_POOLER,
    heads={
        "mlm": {
            **_wb("lm_head.dense", "mlm_head.dense"),
            **_wb("lm_head.norm", "mlm_head.norm"),
            "lm_head.decoder.bias": "mlm_head.bias",
            "lm_head.decoder.weight": None,  # tied to the token embedding
        },
        "classify": _wb("classifier", "task_head.out"),
        "tokens": _wb("classifier", "task_head.out"),
    },
    architectures={
        "": "GteModel",
        "mlm": "GteForMaskedLM",
        "classify": "GteForSequenceClassification",
        "tokens": "GteForTokenClassification",
    },
    config_fields=_ROPE_BERT_CONFIG,
    config_fixed={
        **_ROPE_BERT_FIXED,
        "attention_bias": True,
        "ffn_kind": "geglu",
        "mlp_bias": True,
        "mlp_up_bias": False,
        "norm_bias": True,
        "mlm_activation": "gelu",  # GteLMHead: gelu whatever the hidden_act
    },
    # GteConfig's defaults (gte-multilingual-base), for keys a config.json leaves out
    config_defaults={
        "vocab_size": 250048,
        "max_position_embeddings": 8192,
        "type_vocab_size": 1,
        "pad_token_id": 1,
        "attention_probs_dropout_prob": 0.0,
        "rotary_base": 160000.0,
    },
    config_required={"rope_type": "default"},
)

# NomicBERT (Nussbaum et al. 2024, "Nomic Embed"; transformers 5's modeling_nomic_bert.py, whose
# save_pretrained writes nomic-ai's original layout read here): BERT's embeddings without
# positions (`emb_ln` outside `embeddings`), a fused bias-free `Wqkv`, `out_proj`, post-LN
# (`norm1`, `norm2`), a bias-free SwiGLU (`fc12` is the activated gate, `fc11` the linear
# input: joined gate first, as ours), `fc2`. Masked LM: BERT's `cls.predictions` with the
# hidden_act and a `layer_norm`. transformers has no NomicBERT QA or multiple-choice class.
_NL = "encoder.layers.{i}"
NOMIC_BERT = FamilyMap(
    model_type="nomic_bert",
    base_prefix="nomic_bert.",
    trunk={
        "embeddings.word_embeddings.weight": "encoder.embeddings.token.weight",
        "embeddings.token_type_embeddings.weight": "encoder.embeddings.segment.weight",
        **_wb("emb_ln", "encoder.embeddings.norm"),
        "embeddings.position_ids": None,  # buffer
        "embeddings.token_type_ids": None,  # buffer
        **_wb(f"{_NL}.attn.Wqkv", "encoder.layers.{i}.attention.qkv"),
        **_wb(f"{_NL}.attn.out_proj", "encoder.layers.{i}.attention.out"),
        **_wb(f"{_NL}.norm1", "encoder.layers.{i}.attention_norm"),
        "encoder.layers.{i}.ffn.up.weight": Join(
            (f"{_NL}.mlp.fc12.weight", f"{_NL}.mlp.fc11.weight")
        ),
        **_wb(f"{_NL}.mlp.fc2", "encoder.layers.{i}.ffn.down"),
        **_wb(f"{_NL}.norm2", "encoder.layers.{i}.ffn_norm"),
    },
    pooler=_BERT_POOLER,
    heads={
        "mlm": {
            **_wb("cls.predictions.transform.dense", "mlm_head.dense"),
            **_wb("cls.predictions.transform.layer_norm", "mlm_head.norm"),
            "cls.predictions.bias": "mlm_head.bias",
            "cls.predictions.decoder.weight": None,  # tied to the token embedding
            "cls.predictions.decoder.bias": None,  # alias of cls.predictions.bias
        },
        "classify": _wb("classifier", "task_head.out"),
        "tokens": _wb("classifier", "task_head.out"),
    },
    architectures={
        "": "NomicBertModel",
        "mlm": "NomicBertForMaskedLM",
        "classify": "NomicBertForSequenceClassification",
        "tokens": "NomicBertForTokenClassification",
    },
    config_fields=_ROPE_BERT_CONFIG,
    config_fixed={
        **_ROPE_BERT_FIXED,
        "attention_bias": False,
        "ffn_kind": "swiglu",
        "mlp_bias": False,
        "norm_bias": True,
        "mlm_activation": None,  # the MLM transform applies the hidden_act
    },
    # NomicBertConfig's defaults (nomic-embed-text-v1.5)
    config_defaults={
        "vocab_size": 30528,
        "max_position_embeddings": 2048,
        "hidden_act": "silu",
        "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0,
        "rotary_base": 1000.0,
    },
    config_required={"rope_type": "default"},
)

FAMILIES: dict[str, FamilyMap] = {
    m.model_type: m
    for m in (
        BERT,
        ROBERTA,
        DISTILBERT,
        ALBERT,
        DEBERTA,
        DEBERTA_V2,
        LONGFORMER,
        XLM_ROBERTA,
        CAMEMBERT,
        ELECTRA,
        ROFORMER,
        ERNIE,
        MPNET,
        MODERNBERT,
        GTE,
        NOMIC_BERT,
    )
}

# Hugging Face activation names → ours, and back.
HF_ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
    "quick_gelu": "gelu_sigmoid",
    "relu": "relu",
    "silu": "silu",
    "swish": "silu",
}
OUR_ACTIVATIONS_TO_HF = {
    "gelu": "gelu",
    "gelu_tanh": "gelu_new",
    "gelu_sigmoid": "quick_gelu",
    "relu": "relu",
    "silu": "silu",
}
