"""EncoderConfig: the one description of every model in the family.

Every behaviour of a model comes from a field of this dataclass; no code branches on a preset's
name. Fields are grouped by axis (sizes, embeddings, attention, feed-forward, norms, layer
sharing, heads). `build.py` is the one place where these values become modules.

Shape legend used across the package: B batch, T sequence, S key length, H hidden, N heads,
Dh head dim, I FFN inner, E embedding (ALBERT), V vocab, W window, R relative positions,
C classes / condition size, L layers.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from .errors import ArgumentTypeError, ConfigError, InputError, UnknownNameError

# the bounds and field kinds, re-exported: the public bounds are read from config
from .presets import (  # noqa: F401
    _BOOLS,
    _FLOATS,
    _INTS,
    _POSITIVE_INTS,
    _STRINGS,
    DEFAULT_MAX_PARAMETERS,
    MAX_LAYER_STEPS,
    MAX_PARAMETERS_ENV,
    SIZE_LIMITS,
    _is_int,
    _is_number,
)

NORM_SITES = ("embeddings", "attention", "ffn", "mlm")  # where a norm can be conditional
ACTIVATIONS = ("gelu", "gelu_tanh", "gelu_sigmoid", "relu", "silu")
ATTENTION_KINDS = ("full", "disentangled", "windowed")  # BERT; DeBERTa §3.1; Longformer §3
RELATIVE_ATTENTION_TYPES = ("c2p", "p2c")  # DeBERTa's position terms
POSITION_SCHEMES = ("absolute", "absolute_from_padding")
POSITION_EMBEDDING_TYPES = ("absolute", "rotary")  # a learned table at the input; RoPE per layer
FFN_KINDS = ("mlp", "geglu", "swiglu")  # BERT's; gated linear units (Shazeer 2020)
NORM_POSITIONS = ("post", "pre")  # BERT's post-LN; pre-LN with a final norm (ModernBERT)


# The losses of a sequence-classification head, under transformers' names (config.json's
# problem_type): mean squared error, cross-entropy, binary cross-entropy per label.
PROBLEM_TYPES = ("regression", "single_label_classification", "multi_label_classification")


@dataclass(frozen=True)
class EncoderConfig:
    """Sizes and component choices of one BERT-family encoder.

    Raises:
        ConfigError (a ValueError): on creation, when a value has the wrong type, is out of
            range or is inconsistent with another (e.g. ``hidden_size`` not divisible by
            ``num_attention_heads``); the message names the field and the offending value.
    """

    # --- sizes -------------------------------------------------------------------------------
    vocab_size: int = 30522
    hidden_size: int = 768  # H
    num_hidden_layers: int = 12  # L
    num_attention_heads: int = 12  # N; Dh = H / N
    intermediate_size: int = 3072  # I
    embedding_size: int | None = None  # E; None = H (ALBERT factorises E < H)

    # --- embeddings ----------------------------------------------------------------------------
    max_position_embeddings: int = 512
    type_vocab_size: int = 2  # 0 = no segment embedding (DistilBERT)
    # "absolute": positions 0..T-1. "absolute_from_padding": RoBERTa, positions start at
    # pad_token_id + 1 and padding tokens keep position pad_token_id.
    position_scheme: str = "absolute"
    pad_token_id: int = 0
    # ERNIE's task-type embedding (Sun et al. 2020, "ERNIE 2.0" §4.2.3: one row per pretraining
    # task, added at the input like the segment embedding; ErnieConfig's names): with use_task_id
    # a (task_type_vocab_size, E) table whose row 0 is added to every token (transformers'
    # default when no task_type_ids are given).
    use_task_id: bool = False
    task_type_vocab_size: int = 3

    # --- attention -----------------------------------------------------------------------------
    attention_kind: str = "full"
    attention_bias: bool = True
    # DeBERTa (attention_kind "disentangled"; He et al. 2021 §3.1). relative_attention: the
    # encoder owns a (2k, H) relative position table shared by all layers, k =
    # max_relative_positions (<= 0 means max_position_embeddings). pos_att_type: the position
    # terms added to content-to-content, "c2p|p2c", "c2p", "p2c" or "" (a list is accepted and
    # joined). position_biased_input=False: no absolute position embedding is added at the input.
    relative_attention: bool = False
    max_relative_positions: int = -1
    pos_att_type: str = ""
    position_biased_input: bool = True
    # DeBERTa-v2/v3 (transformers' modeling_deberta_v2.py; the microsoft/DeBERTa code). The
    # names are DebertaV2Config's. position_buckets > 0: distances are log-bucketed
    # (`modules.attention_disentangled.log_bucket_position`) into a (2 · position_buckets, H)
    # table; <= 0: no buckets, a (2k, H) table. share_att_key: the position projections reuse
    # the content Q/K projections (no separate K^r, Q^r). norm_rel_ebd: "layer_norm" puts a
    # LayerNorm on the relative table, "none" does not. key_bias: the key projections K^c and K^r
    # have biases (v2: separate biased Q/K/V; v1: a bias-free fused Q/K/V with Q and V biases).
    position_buckets: int = -1
    share_att_key: bool = False
    norm_rel_ebd: str = "none"
    key_bias: bool = False
    # DeBERTa-v2's convolution beside the first layer (conv_kernel_size 0 = none): a 1-D
    # convolution over the embeddings, conv_act, added to the first layer's output, LayerNorm.
    conv_kernel_size: int = 0
    conv_act: str = "tanh"
    conv_groups: int = 1
    # windowed (Longformer): the full window of each layer (even; a token sees W = window / 2
    # tokens on each side); one int for every layer or a sequence of L ints. Used only by
    # attention_kind "windowed".
    attention_window: int | tuple[int, ...] = 512
    # Rotary position embeddings (RoPE; Su et al. 2021, "RoFormer", eq. 34): with
    # position_embedding_type "rotary" the queries and keys of every layer are rotated by their
    # position, angle t·base^(-2i/Dh) for dimension pair i, and no table is added at the input
    # (position_biased_input must be False). rotary_interleaved: the pairs are dims (2i, 2i+1)
    # (RoFormer) instead of (i, i + Dh/2) (GPT-NeoX style). rotary_value: rotate the values too
    # (RoFormer's option). rotary_table: the sin/cos table is a frozen (P, Dh) parameter stored
    # in checkpoints (RoFormer's `embed_positions`), else computed on the fly.
    position_embedding_type: str = "absolute"
    rotary_base: float = 10000.0
    rotary_interleaved: bool = False
    rotary_value: bool = False
    rotary_table: bool = False
    # T5-style relative position buckets (Raffel et al. 2020 §2.1; MPNet): > 0 = a (buckets, N)
    # table shared by all layers gives every head a learned bias per bucketed distance, added to
    # the attention scores (half the buckets exact, the rest log-spaced up to 128 positions).
    relative_attention_buckets: int = 0
    # Local attention (ModernBERT; Warner et al. 2024 §2.1.1): local_attention > 0 is the full
    # sliding window (a token sees local_attention // 2 positions each side); every
    # global_attention_every-th layer (0, n, 2n, ...) attends globally, the others locally. With
    # rotary positions the local layers rotate with base local_rope_theta, the global ones with
    # rotary_base.
    local_attention: int = 0
    global_attention_every: int = 1
    local_rope_theta: float = 10000.0

    # --- feed-forward --------------------------------------------------------------------------
    hidden_act: str = "gelu"  # gelu = exact erf form x·Φ(x)
    # "mlp": dense H→I, hidden_act, dense I→H. "geglu" / "swiglu": a gated linear unit
    # (modules/ffn.GatedFeedForward: H→2I split into value and gate, act(value)·gate, I→H) with
    # hidden_act GELU / SiLU. mlp_bias: whether the FFN's projections have biases;
    # mlp_up_bias=False drops the bias of the input projection only (GTE: a bias-free H→2I,
    # a biased I→H).
    ffn_kind: str = "mlp"
    mlp_bias: bool = True
    mlp_up_bias: bool = True

    # --- norms ---------------------------------------------------------------------------------
    layer_norm_eps: float = 1e-12
    # "post": BERT's post-LN layers. "pre": each norm precedes its sub-block and a final norm
    # follows the last layer; first_attention_norm=False drops the first layer's attention norm
    # (ModernBERT: the embeddings are already normalised). norm_bias: LayerNorms with a bias.
    norm_position: str = "post"
    first_attention_norm: bool = True
    norm_bias: bool = True
    # Conditional Layer Normalization (modules/norms.py): which norms take a condition c of size C.
    # Sites: "embeddings" (in E), "attention" and "ffn" (the two norms of every layer, in H),
    # "mlm" (the MLM head's norm, in E). Empty = ordinary LayerNorms everywhere.
    conditional_norms: tuple[str, ...] = ()
    condition_size: int | None = None  # C; required iff conditional_norms is not empty

    # --- layer sharing (ALBERT) ----------------------------------------------------------------
    # Unique layers = num_hidden_groups * inner_group_num; layer i runs group
    # i // (num_hidden_layers / num_hidden_groups). BERT: groups = L, inner = 1 (no sharing).
    num_hidden_groups: int | None = None
    inner_group_num: int = 1

    # --- heads ---------------------------------------------------------------------------------
    use_pooler: bool = True
    # base_pooler=False: the model without heads has no pooler, although the heads that read
    # it (classification, the pair head) build one (GTE, NomicBERT: transformers' base class
    # takes add_pooling_layer=False, its sequence-classification class True).
    base_pooler: bool = True
    pair_head: str | None = "nsp"  # "nsp", "sop" or None: the sentence-pair pretraining head
    # DeBERTa enhanced mask decoder (He et al. 2021 §3.3): with an MLM head, the last layer is
    # re-applied this many times with absolute positions added to its queries (0 = off, the MLM
    # head reads the last hidden state as transformers' DebertaForMaskedLM does; 2 = pretraining).
    emd_layers: int = 0
    # Activation of the MLM head's transform (dense H→E, act, LayerNorm); None = hidden_act.
    # ELECTRA's generator applies GELU whatever its hidden_act (Clark et al. 2020, released code).
    mlm_activation: str | None = None

    # --- task heads (fine-tuning; heads/tasks.py) -------------------------------------------------
    # How sequence-level heads read a sequence: "pooler" = the encoder's pooled [CLS] (BERT,
    # ALBERT); "first_token_dense" = the first token through the head's own dense H→H and
    # classifier_activation (RoBERTa/Longformer: tanh; DistilBERT: relu; DeBERTa: gelu).
    classifier_pooling: str = "pooler"
    choice_pooling: str = "pooler"  # multiple choice (RoBERTa/Longformer use the pooler here)
    classifier_activation: str = "tanh"
    classifier_dropout: float | None = None  # None = hidden_dropout_prob
    # task_transform: every task head first applies dense H→H, classifier_activation and a norm
    # (ModernBERT's prediction head), to the pooled first token or to every token. head_bias:
    # whether that dense layer (and the MLM head's) has a bias.
    task_transform: bool = False
    head_bias: bool = True
    # Label names in id order (config.json's id2label); C = len; one label = regression (MSE).
    label_names: tuple[str, ...] = ("LABEL_0", "LABEL_1")
    # Loss of the classify head (config.json's problem_type): one of PROBLEM_TYPES, or None =
    # as transformers infers it (one label: regression; integer labels: single-label).
    problem_type: str | None = None
    # Separator token id (config.json's sep_token_id). Windowed-attention (Longformer) task heads
    # read it to put default global attention on the question (qa) or the answer (choice); see
    # heads/global_attention.py. None = unknown (those defaults then need an explicit mask).
    sep_token_id: int | None = None

    # --- regularisation and init ---------------------------------------------------------------
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    initializer_range: float = 0.02

    # --- checkpoint family (which key table reads/writes Hugging Face files) --------------------
    model_type: str = "bert"

    # --- free-form extras kept from a checkpoint's config.json (e.g. id2label) -----------------
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.num_hidden_groups is None:
            object.__setattr__(self, "num_hidden_groups", self.num_hidden_layers)
        if self.embedding_size is None:
            object.__setattr__(self, "embedding_size", self.hidden_size)
        self._check_types()
        self._check_sizes()
        steps = self.num_hidden_layers * self.inner_group_num
        if steps > MAX_LAYER_STEPS:
            raise ConfigError(
                f"num_hidden_layers={self.num_hidden_layers} (x inner_group_num="
                f"{self.inner_group_num}) exceeds the limit of {MAX_LAYER_STEPS:,} layer steps"
            )
        if self.layer_norm_eps <= 0:
            raise ConfigError(f"layer_norm_eps must be > 0, got {self.layer_norm_eps!r}")
        if self.initializer_range < 0:
            raise ConfigError(f"initializer_range must be >= 0, got {self.initializer_range!r}")
        if self.hidden_size % self.num_attention_heads:
            raise ConfigError(
                f"hidden_size ({self.hidden_size}) must be divisible by num_attention_heads "
                f"({self.num_attention_heads})"
            )
        if self.use_task_id and self.task_type_vocab_size <= 0:
            raise ConfigError(
                f"use_task_id needs task_type_vocab_size >= 1, got {self.task_type_vocab_size}"
            )
        if self.type_vocab_size < 0:
            raise ConfigError(f"type_vocab_size must be >= 0, got {self.type_vocab_size}")
        if self.hidden_act not in ACTIVATIONS:
            raise ConfigError(f"hidden_act {self.hidden_act!r} is not one of {ACTIVATIONS}")
        if self.attention_kind not in ATTENTION_KINDS:
            raise ConfigError(
                f"attention_kind {self.attention_kind!r} is not one of {ATTENTION_KINDS}"
            )
        self._check_disentangled()
        self._check_attention_window()
        self._check_positions()
        if self.position_scheme not in POSITION_SCHEMES:
            raise ConfigError(
                f"position_scheme {self.position_scheme!r} is not one of {POSITION_SCHEMES}"
            )
        if self.mlm_activation is not None and self.mlm_activation not in ACTIVATIONS:
            raise ConfigError(
                f"mlm_activation must be None or one of {ACTIVATIONS}, got {self.mlm_activation!r}"
            )
        if self.pair_head not in (None, "nsp", "sop"):
            raise ConfigError(f"pair_head must be 'nsp', 'sop' or None, got {self.pair_head!r}")
        if self.num_hidden_layers % self.num_hidden_groups:
            raise ConfigError(
                f"num_hidden_layers ({self.num_hidden_layers}) must be divisible by "
                f"num_hidden_groups ({self.num_hidden_groups})"
            )
        if not 0 <= self.pad_token_id < self.vocab_size:
            raise ConfigError(
                f"pad_token_id ({self.pad_token_id}) must lie in [0, vocab_size={self.vocab_size})"
            )
        if self.position_scheme == "absolute_from_padding" and (
            self.max_position_embeddings <= self.pad_token_id + 1
        ):
            raise ConfigError(
                f"max_position_embeddings ({self.max_position_embeddings}) leaves no positions "
                f"after the padding offset pad_token_id + 1 = {self.pad_token_id + 1}"
            )
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ConfigError(f"{name} must lie in [0, 1), got {getattr(self, name)}")
        self._check_conditional_norms()
        # task heads
        for name in ("classifier_pooling", "choice_pooling"):
            if getattr(self, name) not in ("pooler", "first_token_dense", "first_token"):
                raise ConfigError(
                    f"{name} must be 'pooler' or 'first_token_dense', got {getattr(self, name)!r}"
                )
        if self.classifier_activation not in ("tanh",) + ACTIVATIONS:
            raise ConfigError(
                f"classifier_activation {self.classifier_activation!r} is not one "
                f"of {('tanh',) + ACTIVATIONS}"
            )
        if self.classifier_dropout is not None and not 0.0 <= self.classifier_dropout < 1.0:
            raise ConfigError(
                f"classifier_dropout must lie in [0, 1), got {self.classifier_dropout}"
            )
        object.__setattr__(self, "label_names", tuple(str(n) for n in self.label_names))
        if self.sep_token_id is not None and (
            isinstance(self.sep_token_id, bool)
            or not isinstance(self.sep_token_id, int)
            or not 0 <= self.sep_token_id < self.vocab_size
        ):
            raise ConfigError(
                f"sep_token_id must be None or an integer in [0, vocab_size="
                f"{self.vocab_size}), got {self.sep_token_id!r}"
            )
        if self.problem_type is not None and self.problem_type not in PROBLEM_TYPES:
            raise InputError(
                f"problem_type must be None or one of {PROBLEM_TYPES}, got {self.problem_type!r}"
            )
        if not self.label_names or len(set(self.label_names)) != len(self.label_names):
            raise ConfigError(f"label_names must be non-empty and distinct, got {self.label_names}")

    def _check_types(self) -> None:
        """Every field's type (JSON gives any type anywhere); ints stay ints, numbers become
        floats where a float is meant."""
        for name in _POSITIVE_INTS:
            value = getattr(self, name)
            if not _is_int(value) or value <= 0:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")
        for name in _INTS:
            value = getattr(self, name)
            if not _is_int(value):
                raise ConfigError(f"{name} must be an integer, got {value!r}")
        for name in _BOOLS:
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise ConfigError(f"{name} must be true or false, got {value!r}")
        for name in _STRINGS:
            value = getattr(self, name)
            if not isinstance(value, str):
                raise ConfigError(f"{name} must be a string, got {value!r}")
        for name in _FLOATS:
            value = getattr(self, name)
            if not _is_number(value):
                raise ConfigError(f"{name} must be a finite number, got {value!r}")
            object.__setattr__(self, name, float(value))
        dropout = self.classifier_dropout
        if dropout is not None:
            if not _is_number(dropout):
                raise ConfigError(f"classifier_dropout must be null or a number, got {dropout!r}")
            object.__setattr__(self, "classifier_dropout", float(dropout))
        if self.pair_head is not None and not isinstance(self.pair_head, str):
            raise ConfigError(f"pair_head must be 'nsp', 'sop' or None, got {self.pair_head!r}")
        if not isinstance(self.label_names, (list, tuple)):
            raise ConfigError(f"label_names must be a sequence of names, got {self.label_names!r}")
        if not isinstance(self.conditional_norms, (list, tuple, str)):
            raise ConfigError(
                f"conditional_norms must be a sequence of site names, got "
                f"{self.conditional_norms!r}"
            )
        if not isinstance(self.extra, dict):
            raise ConfigError(f"extra must be a dict, got {type(self.extra).__name__}")

    def _check_sizes(self) -> None:
        """The one bound check of every size field (`SIZE_LIMITS`), for every family, after the
        types and before any rule or module uses a size."""
        for name, limit in SIZE_LIMITS.items():
            value = getattr(self, name)
            values = value if isinstance(value, (list, tuple)) else (value,)
            big = max((v for v in values if _is_int(v)), default=None)
            if big is not None and big > limit:
                raise ConfigError(
                    f"{name}={big} exceeds the limit of {limit:,} (no BERT-family model comes "
                    f"near it; a size like this would only allocate memory). If the model is "
                    f"real, raise bertfamily.config.SIZE_LIMITS[{name!r}] before loading it"
                )

    def _check_conditional_norms(self) -> None:
        if isinstance(self.conditional_norms, str):
            raise ConfigError(
                f"conditional_norms must be a sequence of site names, got the "
                f"string {self.conditional_norms!r}"
            )
        sites = tuple(self.conditional_norms)
        object.__setattr__(self, "conditional_norms", sites)  # lists (from JSON) become tuples
        unknown = [s for s in sites if not isinstance(s, str) or s not in NORM_SITES]
        if unknown or len(set(sites)) != len(sites):
            raise ConfigError(
                f"conditional_norms {sites!r} must be distinct names from {NORM_SITES}"
            )
        C = self.condition_size
        if sites and (not isinstance(C, int) or isinstance(C, bool) or C <= 0):
            raise ConfigError(
                f"condition_size must be a positive integer when conditional_norms "
                f"is set, got {C!r}"
            )
        if not sites and C is not None:
            raise ConfigError(
                f"condition_size={C!r} given but conditional_norms is empty; name "
                f"the norms to condition, e.g. conditional_norms=('attention', 'ffn')"
            )

    def _check_disentangled(self) -> None:
        """Normalise and validate the DeBERTa fields (see the attention block above)."""
        types = self.pos_att_type
        if isinstance(types, (list, tuple)):
            if not all(isinstance(t, str) for t in types):
                raise ConfigError(f"pos_att_type must list strings like 'c2p', got {types!r}")
            types = "|".join(types)
        if not isinstance(types, str):
            raise ConfigError(f"pos_att_type must be a string like 'c2p|p2c', got {types!r}")
        parts = [t.strip().lower() for t in types.split("|") if t.strip()]
        bad = [t for t in parts if t not in RELATIVE_ATTENTION_TYPES]
        if bad or len(set(parts)) != len(parts):
            raise ConfigError(
                f"pos_att_type {self.pos_att_type!r}: each term must be one of "
                f"{RELATIVE_ATTENTION_TYPES}, at most once"
            )
        object.__setattr__(self, "pos_att_type", "|".join(parts))
        if (self.relative_attention or parts) and self.attention_kind != "disentangled":
            raise ConfigError(
                f"relative_attention / pos_att_type need attention_kind "
                f"'disentangled', got {self.attention_kind!r}"
            )
        if self.emd_layers < 0:
            raise ConfigError(f"emd_layers must be an integer >= 0, got {self.emd_layers!r}")
        if self.emd_layers and self.position_biased_input:
            raise ConfigError(
                "emd_layers > 0 (enhanced mask decoder) needs position_biased_input="
                "False: the decoder is where absolute positions enter"
            )
        self._check_deberta_v2()

    def _check_deberta_v2(self) -> None:
        """Validate the DeBERTa-v2/v3 fields (see the attention block above)."""
        norms = [t.strip().lower() for t in self.norm_rel_ebd.split("|") if t.strip()]
        if any(t not in ("none", "layer_norm") for t in norms):
            raise ConfigError(f"norm_rel_ebd {self.norm_rel_ebd!r} must be 'none' or 'layer_norm'")
        object.__setattr__(self, "norm_rel_ebd", "layer_norm" if "layer_norm" in norms else "none")
        used = [
            name
            for name, on in (
                ("position_buckets", self.position_buckets > 0),
                ("share_att_key", self.share_att_key),
                ("norm_rel_ebd", self.norm_rel_ebd != "none"),
                ("key_bias", self.key_bias),
                ("conv_kernel_size", self.conv_kernel_size > 0),
            )
            if on
        ]
        if used and self.attention_kind != "disentangled":
            raise ConfigError(
                f"{', '.join(used)} need attention_kind 'disentangled', got {self.attention_kind!r}"
            )
        buckets = self.position_buckets
        if buckets > 0:
            # log_bucket_position divides by log((k - 1) / (buckets // 2)): it must be > 0
            if buckets < 2 or self.relative_span - 1 <= buckets // 2:
                raise ConfigError(
                    f"position_buckets={buckets} needs 2 <= position_buckets and "
                    f"position_buckets // 2 < k - 1 with k = max_relative_positions "
                    f"(or max_position_embeddings) = {self.relative_span}"
                )
        if self.conv_kernel_size < 0 or (self.conv_kernel_size and self.conv_kernel_size % 2 == 0):
            raise ConfigError(
                f"conv_kernel_size must be 0 (no convolution) or an odd positive integer (the "
                f"output keeps T positions), got {self.conv_kernel_size}"
            )
        if self.conv_groups <= 0 or self.hidden_size % self.conv_groups:
            raise ConfigError(
                f"conv_groups ({self.conv_groups}) must be a positive divisor of hidden_size "
                f"({self.hidden_size})"
            )
        if self.conv_act not in ("tanh",) + ACTIVATIONS:
            raise ConfigError(f"conv_act {self.conv_act!r} is not one of {('tanh',) + ACTIVATIONS}")
        if self.conv_kernel_size and (
            self.num_hidden_groups != self.num_hidden_layers or self.inner_group_num != 1
        ):
            raise ConfigError(
                "conv_kernel_size > 0 (a convolution beside the first layer) needs unshared "
                "layers (num_hidden_groups = num_hidden_layers, inner_group_num = 1)"
            )

    def _check_positions(self) -> None:
        """Validate the rotary and relative-bucket fields (see the attention block above)."""
        kind = self.position_embedding_type
        if kind not in POSITION_EMBEDDING_TYPES:
            raise ConfigError(
                f"position_embedding_type {kind!r} is not one of {POSITION_EMBEDDING_TYPES}"
            )
        rotary = kind == "rotary"
        if rotary and self.position_biased_input:
            raise ConfigError(
                "position_embedding_type 'rotary' needs position_biased_input=False (RoPE "
                "replaces the learned position table at the input)"
            )
        if rotary and self.head_dim % 2:
            raise ConfigError(f"rotary positions need an even head dim, got {self.head_dim}")
        if self.rotary_base <= 0:
            raise ConfigError(f"rotary_base must be > 0, got {self.rotary_base}")
        used = [
            n for n in ("rotary_interleaved", "rotary_value", "rotary_table") if getattr(self, n)
        ]
        if used and not rotary:
            raise ConfigError(f"{', '.join(used)} need position_embedding_type 'rotary'")
        for name, kinds in (("ffn_kind", FFN_KINDS), ("norm_position", NORM_POSITIONS)):
            if getattr(self, name) not in kinds:
                raise ConfigError(f"{name} {getattr(self, name)!r} is not one of {kinds}")
        if self.local_attention < 0 or self.local_attention % 2:
            raise ConfigError(
                f"local_attention must be 0 (none) or an even window, got {self.local_attention}"
            )
        if self.global_attention_every < 1:
            raise ConfigError(
                f"global_attention_every must be >= 1, got {self.global_attention_every}"
            )
        if self.local_attention and self.attention_kind != "full":
            raise ConfigError("local_attention needs attention_kind 'full'")
        if self.local_rope_theta <= 0:
            raise ConfigError(f"local_rope_theta must be > 0, got {self.local_rope_theta}")
        if self.relative_attention_buckets < 0 or self.relative_attention_buckets == 1:
            raise ConfigError(
                f"relative_attention_buckets must be 0 (none) or >= 2, got "
                f"{self.relative_attention_buckets}"
            )

    def _check_attention_window(self) -> None:
        window = self.attention_window
        if isinstance(window, (list, tuple)):
            window = tuple(window)
            object.__setattr__(self, "attention_window", window)
            if len(window) != self.num_hidden_layers:
                raise ConfigError(
                    f"attention_window lists {len(window)} windows; expected one per layer "
                    f"(num_hidden_layers={self.num_hidden_layers})"
                )
        for value in window if isinstance(window, tuple) else (window,):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0 or value % 2:
                raise ConfigError(
                    f"attention_window must be a positive even integer (the full window, twice "
                    f"the one-sided window), got {value!r}"
                )

    # --- derived values --------------------------------------------------------------------------
    @property
    def head_dim(self) -> int:
        """Dh = H / N (64 for BERT-base, 26 for TinyBERT-4L)."""
        return self.hidden_size // self.num_attention_heads

    @property
    def position_offset(self) -> int:
        """Index of the first real position (RoBERTa: pad_token_id + 1, else 0)."""
        return self.pad_token_id + 1 if self.position_scheme == "absolute_from_padding" else 0

    @property
    def max_sequence_length(self) -> int:
        """Longest input the position table allows (RoBERTa: 514 - 1 - 1 = 512)."""
        return self.max_position_embeddings - self.position_offset

    @property
    def relative_span(self) -> int:
        """k: relative distances are clipped to [-k, k) (DeBERTa; max_position_embeddings when
        max_relative_positions <= 0, as in the published checkpoints)."""
        k = self.max_relative_positions
        return k if k >= 1 else self.max_position_embeddings

    @property
    def relative_table_size(self) -> int:
        """Rows of the relative position table, 2 · (position_buckets when > 0, else k)."""
        return 2 * (self.position_buckets if self.position_buckets > 0 else self.relative_span)

    @property
    def attention_windows(self) -> list[int]:
        """The full attention window of each of the L layers (windowed attention)."""
        w = self.attention_window
        return list(w) if isinstance(w, tuple) else [w] * self.num_hidden_layers

    @property
    def num_labels(self) -> int:
        """C: number of outputs of the classification heads (1 = regression)."""
        return len(self.label_names)

    @property
    def label2id(self) -> dict[str, int]:
        """Label name -> class id (the position in ``label_names``)."""
        return {name: i for i, name in enumerate(self.label_names)}

    @property
    def num_unique_layers(self) -> int:
        """Layers with their own parameters: num_hidden_groups × inner_group_num."""
        return self.num_hidden_groups * self.inner_group_num

    @property
    def layer_schedule(self) -> list[int]:
        """Index of the unique layer run at each of the L steps (ALBERT shares one layer)."""
        # Hugging Face ALBERT: each of the L steps runs every inner layer of its group.
        per_group = self.num_hidden_layers // self.num_hidden_groups
        return [
            (i // per_group) * self.inner_group_num + j
            for i in range(self.num_hidden_layers)
            for j in range(self.inner_group_num)
        ]

    def reads_pooler(self, heads: tuple[str, ...] | list[str]) -> bool:
        """Whether any of ``heads`` reads the pooled output (B, H): the pair head, or a
        "classify" / "choice" head whose ``classifier_pooling`` / ``choice_pooling`` is
        "pooler". `build.build_model` builds the pooler only then (or for the base model)."""
        return (
            "pair" in heads
            or ("classify" in heads and self.classifier_pooling == "pooler")
            or ("choice" in heads and self.choice_pooling == "pooler")
        )

    def parameter_count(self, heads: tuple[str, ...] | list[str] = ()) -> int:
        """The exact parameter count of ``build_model(config, heads)``, in closed form: no torch,
        no allocation (`bertfamily models` lists the presets with it; a test checks it against
        the built model for every preset and head set).

        Counted: embeddings (token, position unless nothing reads it, segment, norm, ALBERT's
        E→H projection), every unique layer (fused Q/K/V, output, FFN, two norms; Longformer's
        global projections; DeBERTa's position projections and key bias), DeBERTa's relative
        table (+ its LayerNorm) and convolution, conditional norms, the pooler (the base model
        when ``use_pooler``, else only where a head reads it), and each named head: "mlm"
        (dense H→E, norm, bias; decoder tied), "pair", "rtd", or one task head.
        """
        heads = tuple(heads)
        V, H, I, E = self.vocab_size, self.hidden_size, self.intermediate_size, self.embedding_size
        P, T = self.max_position_embeddings, self.type_vocab_size
        if not self.position_biased_input and not (self.emd_layers and "mlm" in heads):
            P = 0  # DeBERTa: no absolute table unless the enhanced mask decoder reads it
        C = self.condition_size or 0
        cond = 2 * C  # a conditional norm adds W_gamma, W_beta (C·dim each) per normalised dim
        sites = set(self.conditional_norms)
        T += self.task_type_vocab_size if self.use_task_id else 0  # ERNIE's task table
        nb = 2 if self.norm_bias else 1  # parameters per normalised feature

        def per(site: str) -> int:  # a conditional norm always has its bias β0
            return 2 if site in sites else nb

        total = (V + P + T) * E + per("embeddings") * E + (cond * E if "embeddings" in sites else 0)
        if E != H:
            total += E * H + H
        layer = 4 * H * H + (4 * H if self.attention_bias else 0)
        layer += (per("attention") + per("ffn")) * H
        up_bias = self.mlp_bias and self.mlp_up_bias
        if self.ffn_kind == "mlp":
            layer += 2 * H * I + (I if up_bias else 0) + (H if self.mlp_bias else 0)
        else:  # gated: H→2I and I→H
            layer += 3 * H * I + (2 * I if up_bias else 0) + (H if self.mlp_bias else 0)
        layer += cond * H * (("attention" in sites) + ("ffn" in sites))
        if self.attention_kind == "windowed":  # separate global Q/K/V projections
            layer += 3 * (H * H + H)
        if self.attention_kind == "disentangled":
            # v1 has no K bias (its Q/V biases are counted above); the position projections,
            # unless they share the content ones (K^r's bias: key_bias)
            layer -= 0 if self.key_bias else H
            if self.relative_attention and not self.share_att_key:
                types = self.pos_att_type.split("|")
                layer += (H * H + (H if self.key_bias else 0)) * ("c2p" in types)  # K^r
                layer += (H * H + H) * ("p2c" in types)  # Q^r
        total += self.num_unique_layers * layer
        if self.norm_position == "pre":
            total += nb * H  # the final norm
        if not self.first_attention_norm:  # layer 0's attention norm is absent
            total -= (per("attention") + (cond if "attention" in sites else 0)) * H
        if self.relative_attention:
            total += self.relative_table_size * H
            total += 2 * H if self.norm_rel_ebd == "layer_norm" else 0
        if self.rotary_table:  # RoFormer's frozen sin/cos table, (P, Dh)
            total += self.max_position_embeddings * self.head_dim
        total += self.relative_attention_buckets * self.num_attention_heads  # MPNet's (R, N)
        if self.conv_kernel_size:  # convolution (weight, bias) and its LayerNorm
            total += H * (H // self.conv_groups) * self.conv_kernel_size + H + 2 * H
        if self.use_pooler and (self.reads_pooler(heads) or (not heads and self.base_pooler)):
            total += H * H + H  # pooler
        hb = 1 if self.head_bias else 0
        if "mlm" in heads:
            total += H * E + hb * E + per("mlm") * E + V + (cond * E if "mlm" in sites else 0)
        if self.task_transform and {"classify", "choice", "tokens", "qa"} & set(heads):
            total += H * H + hb * H + nb * H
        if "pair" in heads:
            total += 2 * H + 2
        if "rtd" in heads:  # replaced-token detection: dense H→H, then H→1
            total += H * H + 2 * H + 1
        C_out = self.num_labels
        if "classify" in heads or "choice" in heads:
            pooling = self.classifier_pooling if "classify" in heads else self.choice_pooling
            outputs = C_out if "classify" in heads else 1
            total += (H * H + H if pooling == "first_token_dense" else 0) + H * outputs + outputs
        if "tokens" in heads:
            total += H * C_out + C_out
        if "qa" in heads:
            total += 2 * H + 2
        return total

    def estimated_parameters(self, heads: tuple[str, ...] | list[str] = ("mlm", "pair")) -> int:
        """The parameter count `check_parameter_budget` compares with the limit before anything
        is allocated: `parameter_count` of ``heads`` plus, when they name no task head, a task
        head at its largest (dense H→H and C outputs) and the pooler."""
        heads = tuple(heads)
        total = self.parameter_count(heads)
        if not {"classify", "tokens", "qa", "choice"} & set(heads):
            H = self.hidden_size
            total += H * H + H + H * max(self.num_labels, 2) + self.num_labels
            if heads and self.use_pooler and not self.reads_pooler(heads):
                total += H * H + H
        return total

    # --- construction ----------------------------------------------------------------------------
    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> EncoderConfig:
        """Config of a named preset (see `bertfamily.presets.PRESETS`), with field overrides.

        Raises:
            KeyError: unknown preset; the message lists the valid names.
            TypeError: an override that is not a field of EncoderConfig.
        """
        from .presets import PRESETS

        if name not in PRESETS:
            raise UnknownNameError(f"unknown preset {name!r}; valid presets: {', '.join(PRESETS)}")
        unknown = set(overrides) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ArgumentTypeError(f"not EncoderConfig fields: {sorted(unknown)}")
        return cls(**{**PRESETS[name], **overrides})

    def replace(self, **changes: Any) -> EncoderConfig:
        """A copy with ``changes`` applied (`dataclasses.replace`). transformers' ``num_labels=C``
        is accepted and means ``label_names=("LABEL_0", …, "LABEL_{C-1}")``.

        Raises:
            ArgumentTypeError: a name that is no field (the message suggests the closest ones).
            ConfigError: a value the field refuses.
        """
        if "num_labels" in changes:
            n = changes.pop("num_labels")
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise ConfigError(f"num_labels must be a positive integer, got {n!r}")
            if "label_names" not in changes and n != len(self.label_names):
                changes["label_names"] = tuple(f"LABEL_{i}" for i in range(n))
        names = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(changes) - names)
        if unknown:
            import difflib

            hints = []
            for name in unknown:
                close = difflib.get_close_matches(name, sorted(names), n=2, cutoff=0.6)
                hints.append(
                    f"{name!r}" + (f" (did you mean {' or '.join(close)}?)" if close else "")
                )
            raise ArgumentTypeError(f"unknown EncoderConfig field(s): {', '.join(hints)}")
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """All fields as a dict (`dataclasses.asdict`)."""
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        """`to_dict` as indented JSON with sorted keys."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)


def as_config(config: Any, what: str = "config") -> EncoderConfig:
    """``config`` as an `EncoderConfig`: the one coercion of every public function that takes
    a config (`build.build_model`, `check_parameter_budget`, the builders of `build`, ...).

    Args:
        config: an `EncoderConfig`; a preset name (``"mpnet-base"``, `presets.PRESETS`); or
            a mapping of EncoderConfig fields (what `EncoderConfig.to_dict` gives).
        what: the argument's name, for the message.

    Raises:
        UnknownNameError: a string that is no preset (the message lists them).
        ArgumentTypeError: any other type, or a mapping with keys that are no field.
        ConfigError: a mapping with a value the field refuses.
    """
    if isinstance(config, EncoderConfig):
        return config
    if isinstance(config, str):
        return EncoderConfig.from_preset(config)
    if isinstance(config, dict):
        return EncoderConfig().replace(**config)
    raise ArgumentTypeError(
        f"{what} must be an EncoderConfig, a preset name or a dict of EncoderConfig fields, "
        f"got {type(config).__name__}"
    )


def max_parameters_limit(max_parameters: int | None = None) -> int:
    """The parameter budget: ``max_parameters`` when given, else the ``BERTFAMILY_MAX_PARAMETERS``
    environment variable, else `DEFAULT_MAX_PARAMETERS`.

    Raises:
        ConfigError: the keyword or the variable is not a positive integer.
    """
    if max_parameters is None:
        from .runtime import env_int  # the one parser of numeric environment variables

        try:
            max_parameters = env_int(MAX_PARAMETERS_ENV, DEFAULT_MAX_PARAMETERS, minimum=1)
        except InputError as e:
            raise ConfigError(str(e)) from None
    if not _is_int(max_parameters) or max_parameters <= 0:
        raise ConfigError(f"max_parameters must be a positive integer, got {max_parameters!r}")
    return max_parameters


def check_parameter_budget(
    config: EncoderConfig,
    max_parameters: int | None = None,
    heads: tuple[str, ...] | list[str] = ("mlm", "pair"),
) -> int:
    """Refuse a config whose model would exceed the parameter budget, before allocating it.

    Returns:
        the estimated parameter count (`EncoderConfig.estimated_parameters`).

    Raises:
        ConfigError: the estimate exceeds the limit (`max_parameters_limit`); the message names
            the largest contributing fields and how to raise the limit.
    """
    config = as_config(config)
    limit = max_parameters_limit(max_parameters)
    count = config.estimated_parameters(heads)
    if count > limit:
        fields = ", ".join(
            f"{name}={getattr(config, name)}"
            for name in (
                "vocab_size",
                "hidden_size",
                "num_hidden_layers",
                "intermediate_size",
                "max_position_embeddings",
            )
        )
        raise ConfigError(
            f"the model would have about {count:,} parameters, over the limit of {limit:,} "
            f"({fields}); pass max_parameters= or set {MAX_PARAMETERS_ENV} to allow it"
        )
    return count
