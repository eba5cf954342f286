"""The one place where `EncoderConfig` values become modules, and where weights are initialised."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from torch import nn

from .config import EncoderConfig, as_config, check_parameter_budget
from .errors import InputError
from .heads.enhanced_mask_decoder import EnhancedMaskDecoder
from .heads.global_attention import HEAD_DEFAULTS, TaskGlobalAttention
from .heads.pretraining import MaskedLMHead, PairHead, ReplacedTokenHead
from .heads.task_heads import (
    TASK_HEADS,
    PredictionTransform,
    SequenceHead,
    SpanHead,
    TokenHead,
)
from .model import Model
from .modules.activations import activation
from .modules.attention import SelfAttention
from .modules.attention_disentangled import DisentangledSelfAttention, RelativePositionEmbeddings
from .modules.attention_windowed import GlobalAttentionInputs, WindowedSelfAttention
from .modules.convolution import ConvolutionBranch
from .modules.embeddings import Embeddings
from .modules.encoder import Encoder, Pooler
from .modules.ffn import FeedForward, GatedFeedForward
from .modules.layer import EncoderLayer
from .modules.norms import ConditionalLayerNorm
from .modules.positions import ChainedInputs, RelativePositionBias, RotaryEmbedding

HEADS = ("mlm", "pair", "rtd") + TASK_HEADS


def build_norm(config: EncoderConfig, size: int, site: str | None = None) -> nn.Module:
    """The norm component over ``size`` features: LayerNorm (Ba et al. 2016), or Conditional
    LayerNorm (`modules.norms.ConditionalLayerNorm`) when ``site`` (one of `config.NORM_SITES`)
    is in ``config.conditional_norms``."""
    if site is not None and site in config.conditional_norms:
        return ConditionalLayerNorm(size, config.condition_size, eps=config.layer_norm_eps)
    return nn.LayerNorm(size, eps=config.layer_norm_eps, bias=config.norm_bias)


@dataclass(frozen=True)
class AttentionKind:
    """How one ``EncoderConfig.attention_kind`` is assembled.

    Attributes:
        layer: (config, unique layer index) → the attention component of that layer.
        encoder_inputs: config → the encoder-level provider of attention inputs shared by every
            layer (see `Encoder.attention_inputs`), or None.
        task_inputs: (config, task head name) → the task head's defaults for optional encoder
            inputs (a `Model`'s ``default_inputs``), or None.
        first_layer_branch: config → the encoder's branch beside the first layer step (see
            `Encoder.first_layer_branch`), or None.
    """

    layer: Callable[[EncoderConfig, int], nn.Module]
    encoder_inputs: Callable[[EncoderConfig], nn.Module | None] = lambda config: None
    task_inputs: Callable[[EncoderConfig, str], Callable | None] = lambda config, task: None
    first_layer_branch: Callable[[EncoderConfig], nn.Module | None] = lambda config: None


def is_local_layer(config: EncoderConfig, index: int) -> bool:
    """Whether unique layer ``index`` attends within the local window (``local_attention``):
    all but every ``global_attention_every``-th layer, counted from 0 (ModernBERT)."""
    return bool(config.local_attention) and index % config.global_attention_every != 0


def rotary_table_name(config: EncoderConfig, index: int) -> str | None:
    """The rotary table unique layer ``index`` reads (`modules.positions.RotaryEmbedding`):
    "local" for local layers, else "global"; None without rotary positions."""
    if config.position_embedding_type != "rotary":
        return None
    return "local" if is_local_layer(config, index) else "global"


def _full(config: EncoderConfig, index: int) -> nn.Module:
    return SelfAttention(
        config.hidden_size,
        config.num_attention_heads,
        config.attention_probs_dropout_prob,
        bias=config.attention_bias,
        rotary=rotary_table_name(config, index),
        rotary_value=config.rotary_value,
        window=config.local_attention // 2 if is_local_layer(config, index) else 0,
    )


def _disentangled(config: EncoderConfig, index: int) -> nn.Module:
    return DisentangledSelfAttention(
        config.hidden_size,
        config.num_attention_heads,
        config.attention_probs_dropout_prob,
        position_dropout=config.hidden_dropout_prob,
        pos_att_type=tuple(t for t in config.pos_att_type.split("|") if t),
        relative=config.relative_attention,
        share_att_key=config.share_att_key,
        key_bias=config.key_bias,
    )


def _relative_table(config: EncoderConfig) -> nn.Module | None:
    # One relative table shared by all layers (He et al. 2021 §3.1); DeBERTa-v2: log buckets
    # and a LayerNorm on the table.
    if not config.relative_attention:
        return None
    norm = build_norm(config, config.hidden_size) if config.norm_rel_ebd == "layer_norm" else None
    return RelativePositionEmbeddings(
        config.relative_span, config.hidden_size, config.position_buckets, norm
    )


def _convolution(config: EncoderConfig) -> nn.Module | None:
    # DeBERTa-v2's convolution beside the first layer (modules/convolution.py).
    if not config.conv_kernel_size:
        return None
    return ConvolutionBranch(
        config.hidden_size,
        config.conv_kernel_size,
        config.conv_groups,
        nn.Tanh() if config.conv_act == "tanh" else activation(config.conv_act),
        build_norm(config, config.hidden_size),
        config.hidden_dropout_prob,
    )


def _windowed(config: EncoderConfig, index: int) -> nn.Module:
    return WindowedSelfAttention(
        config.hidden_size,
        config.num_attention_heads,
        config.attention_probs_dropout_prob,
        window=config.attention_windows[index],
        bias=config.attention_bias,
    )


def _task_global_attention(config: EncoderConfig, task: str) -> TaskGlobalAttention | None:
    # Beltagy et al. 2020 §4: each task head puts global attention on its own tokens.
    if task not in HEAD_DEFAULTS:
        return None
    return TaskGlobalAttention(HEAD_DEFAULTS[task], config.sep_token_id)


ATTENTION_KINDS: dict[str, AttentionKind] = {
    "full": AttentionKind(_full),
    "disentangled": AttentionKind(
        _disentangled, encoder_inputs=_relative_table, first_layer_branch=_convolution
    ),
    "windowed": AttentionKind(
        _windowed,
        encoder_inputs=lambda config: GlobalAttentionInputs(),
        task_inputs=_task_global_attention,
    ),
}


def build_position_inputs(config: EncoderConfig) -> list[nn.Module]:
    """The encoder-level position providers every layer shares, whatever the attention kind:
    rotary tables (``position_embedding_type`` "rotary") and MPNet's relative position bias
    (``relative_attention_buckets`` > 0)."""
    providers: list[nn.Module] = []
    if config.position_embedding_type == "rotary":
        bases = {"global": config.rotary_base}
        if any(is_local_layer(config, i) for i in range(config.num_unique_layers)):
            bases["local"] = config.local_rope_theta
        providers.append(
            RotaryEmbedding(
                config.head_dim,
                bases,
                interleaved=config.rotary_interleaved,
                stored_positions=config.max_position_embeddings if config.rotary_table else 0,
            )
        )
    if config.relative_attention_buckets:
        providers.append(
            RelativePositionBias(config.relative_attention_buckets, config.num_attention_heads)
        )
    return providers


def _encoder_inputs(config: EncoderConfig) -> nn.Module | None:
    """The attention kind's provider and the position providers, chained when more than one."""
    kind = attention_kind(config).encoder_inputs(config)
    providers = ([kind] if kind is not None else []) + build_position_inputs(config)
    if not providers:
        return None
    return providers[0] if len(providers) == 1 else ChainedInputs(providers)


def attention_kind(config: EncoderConfig) -> AttentionKind:
    """The `AttentionKind` of ``config.attention_kind``.

    Raises:
        ValueError: a kind with no entry in `ATTENTION_KINDS`.
    """
    try:
        return ATTENTION_KINDS[config.attention_kind]
    except KeyError:
        raise InputError(
            f"attention_kind {config.attention_kind!r} has no builder; known: "
            f"{sorted(ATTENTION_KINDS)}"
        ) from None


def build_attention(config: EncoderConfig, index: int = 0) -> nn.Module:
    """The attention component named by ``config.attention_kind``, for unique layer ``index``."""
    return attention_kind(config).layer(config, index)


def build_layer(config: EncoderConfig, index: int = 0) -> EncoderLayer:
    """One `EncoderLayer` for ``config``: layer ``index``'s attention, the FFN and their norms."""
    H, I = config.hidden_size, config.intermediate_size
    act = activation(config.hidden_act)
    kind = FeedForward if config.ffn_kind == "mlp" else GatedFeedForward
    ffn = kind(H, I, act, bias=config.mlp_bias, up_bias=config.mlp_bias and config.mlp_up_bias)
    first = index == 0 and not config.first_attention_norm
    return EncoderLayer(
        attention=build_attention(config, index),
        attention_norm=nn.Identity() if first else build_norm(config, H, "attention"),
        ffn=ffn,
        ffn_norm=build_norm(config, H, "ffn"),
        dropout=config.hidden_dropout_prob,
        pre_norm=config.norm_position == "pre",
    )


def build_encoder(config: EncoderConfig, position_table: bool | None = None) -> Encoder:
    """The trunk. ``position_table``: keep the absolute position table even when it is not added
    at the input (DeBERTa's enhanced mask decoder reads it); None = only when it is added.
    ``config``: as `build_model` takes it (`config.as_config`)."""
    config = as_config(config)
    E = config.embedding_size
    if position_table is None:
        position_table = config.position_biased_input
    embeddings = Embeddings(
        vocab_size=config.vocab_size,
        embedding_size=E,
        max_positions=config.max_position_embeddings if position_table else 0,
        type_vocab_size=config.type_vocab_size,
        norm=build_norm(config, E, "embeddings"),
        hidden_size=config.hidden_size,
        dropout=config.hidden_dropout_prob,
        pad_token_id=config.pad_token_id,
        add_positions=config.position_biased_input,
        task_types=config.task_type_vocab_size if config.use_task_id else 0,
    )
    layers = [build_layer(config, i) for i in range(config.num_unique_layers)]
    encoder = Encoder(
        embeddings,
        layers,
        config.layer_schedule,
        Pooler(config.hidden_size) if config.use_pooler else None,
        vocab_size=config.vocab_size,
        type_vocab_size=config.type_vocab_size,
        max_positions=config.max_position_embeddings,
        position_offset=config.position_offset,
        pad_token_id=config.pad_token_id,
    )
    encoder.attention_inputs = _encoder_inputs(config)
    if config.norm_position == "pre":
        encoder.final_norm = build_norm(config, config.hidden_size)
    encoder.first_layer_branch = attention_kind(config).first_layer_branch(config)
    return encoder


def build_task_head(config: EncoderConfig, task: str) -> nn.Module:
    """The fine-tuning head for ``task`` (one of `heads.tasks.TASK_HEADS`), its variant chosen
    by ``classifier_pooling`` / ``choice_pooling`` / ``classifier_activation``.

    Raises:
        ValueError: unknown task, or a pooled-output head on a config without a pooler.
    """
    config = as_config(config)
    dropout = (
        config.classifier_dropout
        if config.classifier_dropout is not None
        else config.hidden_dropout_prob
    )
    H = config.hidden_size
    if task in ("classify", "choice"):
        pooling = config.classifier_pooling if task == "classify" else config.choice_pooling
        if pooling == "pooler" and not config.use_pooler:
            raise InputError(
                f"the {task!r} head of this config reads the pooled output, but use_pooler is False"
            )
        act = (
            nn.Tanh()
            if config.classifier_activation == "tanh"
            else activation(config.classifier_activation)
        )
        return SequenceHead(
            H,
            config.num_labels if task == "classify" else 1,
            pooling,
            act,
            dropout,
            transform=_task_transform(config),
        )
    if task == "tokens":
        return TokenHead(H, config.num_labels, dropout, transform=_task_transform(config))
    if task == "qa":
        return SpanHead(H, transform=_task_transform(config))
    raise InputError(f"unknown task head {task!r}; valid: {TASK_HEADS}")


def _task_transform(config: EncoderConfig) -> nn.Module | None:
    """ModernBERT's prediction head before a task head's output layer (``task_transform``)."""
    if not config.task_transform:
        return None
    act = (
        nn.Tanh()
        if config.classifier_activation == "tanh"
        else activation(config.classifier_activation)
    )
    H = config.hidden_size
    return PredictionTransform(H, act, build_norm(config, H), bias=config.head_bias)


def build_model(
    config: EncoderConfig | str, heads: Iterable[str] = (), *, max_parameters: int | None = None
) -> Model:
    """A randomly initialised `Model` with the chosen heads: pretraining heads ("mlm",
    "pair"; or "rtd", ELECTRA's replaced-token detection) or one fine-tuning head
    ("classify", "tokens", "qa", "choice").

    The pooler is built only where something reads it, as in transformers' class with the
    same heads: the base model (when ``config.use_pooler`` and ``config.base_pooler``), the
    pair head, and "classify" /
    "choice" heads whose pooling is "pooler". Masked LM, token classification, QA and
    first-token classifiers get none (the returned model's ``config.use_pooler`` is False).

    ``config``: an `EncoderConfig`, a preset name (``"mpnet-base"``) or a dict of its fields
    (`config.as_config`). ``max_parameters``: the largest model to allocate (the config's
    closed-form estimate is checked first); None = ``BERTFAMILY_MAX_PARAMETERS`` or 2·10^10.

    Raises:
        UnknownNameError / ArgumentTypeError: ``config`` is no preset name, or of another type.
        ValueError: an unknown head name, "pair" for a config whose ``pair_head`` is None
            or without a pooler, more than one task head, a task head with "mlm"/"pair", or
            "rtd" with "mlm" (both give ``logits``).
        ConfigError (a ValueError): the model would exceed ``max_parameters``.
    """
    heads, config = tuple(heads), as_config(config)
    check_parameter_budget(config, max_parameters, heads)
    unknown = set(heads) - set(HEADS)
    if unknown:
        raise InputError(f"unknown heads {sorted(unknown)}; valid: {HEADS}")
    tasks = [h for h in heads if h in TASK_HEADS]
    if tasks and len(tasks) != len(heads):
        raise InputError(f"a task head cannot be combined with other heads, got {heads}")
    if len(tasks) > 1:
        raise InputError(f"at most one task head per model, got {tasks}")
    if "rtd" in heads and "mlm" in heads:  # ELECTRA's generator and discriminator are two models
        raise InputError("the rtd and mlm heads both give logits; build them as two models")
    if config.use_pooler and not config.reads_pooler(heads) and (heads or not config.base_pooler):
        config = config.replace(use_pooler=False)
    emd = config.emd_layers > 0 and "mlm" in heads
    encoder = build_encoder(config, position_table=config.position_biased_input or emd)
    mlm = pair = None
    if "mlm" in heads:
        mlm = MaskedLMHead(
            config.hidden_size,
            config.embedding_size,
            activation(config.mlm_activation or config.hidden_act),
            build_norm(config, config.embedding_size, "mlm"),
            encoder.embeddings.token,
            bias=config.head_bias,
        )
    if "pair" in heads:
        if not config.use_pooler:
            raise InputError("the pair (NSP/SOP) head needs a pooler; this config has none")
        pair = PairHead(config.hidden_size)
    rtd = (
        ReplacedTokenHead(config.hidden_size, activation(config.hidden_act))
        if "rtd" in heads
        else None
    )
    task = tasks[0] if tasks else None
    decoder = None
    if emd:  # the decoder re-applies the encoder's last layer with its absolute positions
        decoder = EnhancedMaskDecoder(
            config.emd_layers, encoder.embeddings.position, encoder.layers[encoder.schedule[-1]]
        )
    model = Model(
        config,
        encoder,
        mlm,
        pair,
        mlm_decoder=decoder,
        task_head=build_task_head(config, task) if task else None,
        task=task,
        default_inputs=attention_kind(config).task_inputs(config, task) if task else None,
        rtd_head=rtd,
    )
    init_weights(model, config.initializer_range)
    return model


def init_weights(model: nn.Module, std: float = 0.02) -> None:
    """BERT initialisation: N(0, std) weights, zero biases, unit LayerNorm, zero padding row;
    conditional norms start as plain LayerNorms (W_γ = W_β = 0)."""
    for module in model.modules():
        if isinstance(module, (nn.Linear, nn.Conv1d)):
            nn.init.normal_(module.weight, 0.0, std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, 0.0, std)
            if module.padding_idx is not None:
                module.weight.data[module.padding_idx].zero_()
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, ConditionalLayerNorm):
            module.reset_parameters()
    for module in model.modules():
        if isinstance(module, MaskedLMHead):
            nn.init.zeros_(module.bias)


# --- pretraining heads outside the checkpoint layout -------------------------------------------


def build_span_boundary_head(
    config: EncoderConfig, model: Model, max_positions: int = 32, position_size: int | None = None
) -> nn.Module:
    """SpanBERT's span boundary head (SBO, Joshi et al. 2020 §3.2) for ``model``, its decoder
    tied to the model's token embedding; BERT initialisation."""
    from .heads.span_boundary import SpanBoundaryHead

    P = position_size or config.hidden_size
    head = SpanBoundaryHead(
        config.hidden_size,
        config.embedding_size,
        P,
        max_positions,
        activation(config.hidden_act),
        build_norm(config, config.hidden_size),
        build_norm(config, config.embedding_size),
        model.encoder.embeddings.token,
    )
    init_weights(head, config.initializer_range)
    nn.init.zeros_(head.bias)
    return head
