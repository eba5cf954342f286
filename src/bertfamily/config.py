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

ACTIVATIONS = ("gelu", "gelu_tanh", "gelu_sigmoid", "relu", "silu")
ATTENTION_KINDS = ("full", "windowed")  # grows with the disentangled (DeBERTa) kind
POSITION_SCHEMES = ("absolute", "absolute_from_padding")


@dataclass(frozen=True)
class EncoderConfig:
    """Sizes and component choices of one BERT-family encoder.

    Raises:
        ValueError: on creation, when a value is out of range or inconsistent with another
            (e.g. ``hidden_size`` not divisible by ``num_attention_heads``); the message names
            the offending values.
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

    # --- attention -----------------------------------------------------------------------------
    attention_kind: str = "full"
    attention_bias: bool = True
    # windowed (Longformer): the full window of each layer (even; a token sees W = window / 2
    # tokens on each side); one int for every layer or a sequence of L ints. Used only by
    # attention_kind "windowed".
    attention_window: int | tuple[int, ...] = 512

    # --- feed-forward --------------------------------------------------------------------------
    hidden_act: str = "gelu"  # gelu = exact erf form x·Φ(x)

    # --- norms ---------------------------------------------------------------------------------
    layer_norm_eps: float = 1e-12

    # --- layer sharing (ALBERT) ----------------------------------------------------------------
    # Unique layers = num_hidden_groups * inner_group_num; layer i runs group
    # i // (num_hidden_layers / num_hidden_groups). BERT: groups = L, inner = 1 (no sharing).
    num_hidden_groups: int | None = None
    inner_group_num: int = 1

    # --- heads ---------------------------------------------------------------------------------
    use_pooler: bool = True
    pair_head: str | None = "nsp"  # "nsp", "sop" or None: the sentence-pair pretraining head

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
        for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                     "intermediate_size", "embedding_size", "max_position_embeddings",
                     "inner_group_num", "num_hidden_groups"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) must be divisible by num_attention_heads "
                f"({self.num_attention_heads})")
        if self.type_vocab_size < 0:
            raise ValueError(f"type_vocab_size must be >= 0, got {self.type_vocab_size}")
        if self.hidden_act not in ACTIVATIONS:
            raise ValueError(f"hidden_act {self.hidden_act!r} is not one of {ACTIVATIONS}")
        if self.attention_kind not in ATTENTION_KINDS:
            raise ValueError(
                f"attention_kind {self.attention_kind!r} is not one of {ATTENTION_KINDS}")
        self._check_attention_window()
        if self.position_scheme not in POSITION_SCHEMES:
            raise ValueError(
                f"position_scheme {self.position_scheme!r} is not one of {POSITION_SCHEMES}")
        if self.pair_head not in (None, "nsp", "sop"):
            raise ValueError(f"pair_head must be 'nsp', 'sop' or None, got {self.pair_head!r}")
        if self.num_hidden_layers % self.num_hidden_groups:
            raise ValueError(
                f"num_hidden_layers ({self.num_hidden_layers}) must be divisible by "
                f"num_hidden_groups ({self.num_hidden_groups})")
        if not 0 <= self.pad_token_id < self.vocab_size:
            raise ValueError(
                f"pad_token_id ({self.pad_token_id}) must lie in [0, vocab_size={self.vocab_size})")
        if self.position_scheme == "absolute_from_padding" and (
                self.max_position_embeddings <= self.pad_token_id + 1):
            raise ValueError(
                f"max_position_embeddings ({self.max_position_embeddings}) leaves no positions "
                f"after the padding offset pad_token_id + 1 = {self.pad_token_id + 1}")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name} must lie in [0, 1), got {getattr(self, name)}")

    def _check_attention_window(self) -> None:
        window = self.attention_window
        if isinstance(window, (list, tuple)):
            window = tuple(window)
            object.__setattr__(self, "attention_window", window)
            if len(window) != self.num_hidden_layers:
                raise ValueError(
                    f"attention_window lists {len(window)} windows; expected one per layer "
                    f"(num_hidden_layers={self.num_hidden_layers})")
        for value in (window if isinstance(window, tuple) else (window,)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0 or value % 2:
                raise ValueError(
                    f"attention_window must be a positive even integer (the full window, twice "
                    f"the one-sided window), got {value!r}")

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
    def attention_windows(self) -> list[int]:
        """The full attention window of each of the L layers (windowed attention)."""
        w = self.attention_window
        return list(w) if isinstance(w, tuple) else [w] * self.num_hidden_layers

    @property
    def num_unique_layers(self) -> int:
        return self.num_hidden_groups * self.inner_group_num

    @property
    def layer_schedule(self) -> list[int]:
        """Index of the unique layer run at each of the L steps (ALBERT shares one layer)."""
        # Hugging Face ALBERT: each of the L steps runs every inner layer of its group.
        per_group = self.num_hidden_layers // self.num_hidden_groups
        return [(i // per_group) * self.inner_group_num + j
                for i in range(self.num_hidden_layers) for j in range(self.inner_group_num)]

    # --- construction ----------------------------------------------------------------------------
    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> "EncoderConfig":
        """Config of a named preset (see `bertfamily.presets.PRESETS`), with field overrides.

        Raises:
            KeyError: unknown preset; the message lists the valid names.
            TypeError: an override that is not a field of EncoderConfig.
        """
        from .presets import PRESETS

        if name not in PRESETS:
            raise KeyError(f"unknown preset {name!r}; valid presets: {', '.join(PRESETS)}")
        unknown = set(overrides) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise TypeError(f"not EncoderConfig fields: {sorted(unknown)}")
        return cls(**{**PRESETS[name], **overrides})

    def replace(self, **changes: Any) -> "EncoderConfig":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)
