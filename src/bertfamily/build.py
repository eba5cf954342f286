"""The one place where `EncoderConfig` values become modules, and where weights are initialised."""

from __future__ import annotations

from collections.abc import Iterable

from torch import nn

from .config import EncoderConfig
from .heads.pretraining import MaskedLMHead, PairHead
from .model import Model
from .modules.activations import activation
from .modules.attention import SelfAttention
from .modules.embeddings import Embeddings
from .modules.encoder import Encoder, Pooler
from .modules.ffn import FeedForward
from .modules.layer import EncoderLayer

HEADS = ("mlm", "pair")


def build_norm(config: EncoderConfig, size: int) -> nn.Module:
    """The LayerNorm component (Ba et al. 2016) over ``size`` features."""
    return nn.LayerNorm(size, eps=config.layer_norm_eps)


def build_attention(config: EncoderConfig) -> nn.Module:
    """The attention component named by ``config.attention_kind``."""
    if config.attention_kind == "full":
        return SelfAttention(config.hidden_size, config.num_attention_heads,
                             config.attention_probs_dropout_prob, bias=config.attention_bias)
    raise ValueError(f"attention_kind {config.attention_kind!r} has no builder")


def build_layer(config: EncoderConfig) -> EncoderLayer:
    H = config.hidden_size
    return EncoderLayer(
        attention=build_attention(config),
        attention_norm=build_norm(config, H),
        ffn=FeedForward(H, config.intermediate_size, activation(config.hidden_act)),
        ffn_norm=build_norm(config, H),
        dropout=config.hidden_dropout_prob,
    )


def build_encoder(config: EncoderConfig) -> Encoder:
    E = config.embedding_size
    embeddings = Embeddings(
        vocab_size=config.vocab_size, embedding_size=E,
        max_positions=config.max_position_embeddings, type_vocab_size=config.type_vocab_size,
        norm=build_norm(config, E), hidden_size=config.hidden_size,
        dropout=config.hidden_dropout_prob, pad_token_id=config.pad_token_id)
    layers = [build_layer(config) for _ in range(config.num_unique_layers)]
    return Encoder(embeddings, layers, config.layer_schedule,
                   Pooler(config.hidden_size) if config.use_pooler else None,
                   vocab_size=config.vocab_size, type_vocab_size=config.type_vocab_size,
                   max_positions=config.max_position_embeddings,
                   position_offset=config.position_offset, pad_token_id=config.pad_token_id)


def build_model(config: EncoderConfig, heads: Iterable[str] = ()) -> Model:
    """A randomly initialised `Model` with the chosen heads ("mlm", "pair").

    Raises:
        ValueError: an unknown head name, or "pair" for a config whose ``pair_head`` is None
            or without a pooler.
    """
    heads = tuple(heads)
    unknown = set(heads) - set(HEADS)
    if unknown:
        raise ValueError(f"unknown heads {sorted(unknown)}; valid: {HEADS}")
    encoder = build_encoder(config)
    mlm = pair = None
    if "mlm" in heads:
        mlm = MaskedLMHead(config.hidden_size, config.embedding_size,
                           activation(config.hidden_act),
                           build_norm(config, config.embedding_size), encoder.embeddings.token)
    if "pair" in heads:
        if not config.use_pooler:
            raise ValueError("the pair (NSP/SOP) head needs a pooler; this config has none")
        pair = PairHead(config.hidden_size)
    model = Model(config, encoder, mlm, pair)
    init_weights(model, config.initializer_range)
    return model


def init_weights(model: nn.Module, std: float = 0.02) -> None:
    """BERT initialisation: N(0, std) weights, zero biases, unit LayerNorm, zero padding row."""
    for module in model.modules():
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, 0.0, std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, 0.0, std)
            if module.padding_idx is not None:
                module.weight.data[module.padding_idx].zero_()
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)
    for module in model.modules():
        if isinstance(module, MaskedLMHead):
            nn.init.zeros_(module.bias)


# --- pretraining heads outside the checkpoint layout (issue-pretrain) ------------------------


def build_span_boundary_head(config: EncoderConfig, model: Model, max_positions: int = 32,
                             position_size: int | None = None) -> nn.Module:
    """SpanBERT's span boundary head (SBO, Joshi et al. 2020 §3.2) for ``model``, its decoder
    tied to the model's token embedding; BERT initialisation."""
    from .heads.span_boundary import SpanBoundaryHead

    P = position_size or config.hidden_size
    head = SpanBoundaryHead(config.hidden_size, config.embedding_size, P, max_positions,
                            activation(config.hidden_act), build_norm(config, config.hidden_size),
                            build_norm(config, config.embedding_size),
                            model.encoder.embeddings.token)
    init_weights(head, config.initializer_range)
    nn.init.zeros_(head.bias)
    return head
