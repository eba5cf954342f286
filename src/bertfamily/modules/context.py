"""What every layer's attention needs about the batch, computed once per forward by the encoder."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .unpad import Unpadded


@dataclass
class GlobalTokens:
    """Where the global tokens of a batch are (windowed attention), shared by all layers.

    Attributes:
        is_global: (B, T) bool, True at real tokens with global attention.
        index: (B, G) int64 positions of the global tokens of each row, ascending; rows with fewer
            than G global tokens are padded with 0 (see ``valid``).
        valid: (B, G) bool, True where ``index`` names a real global token.
    """

    is_global: torch.Tensor
    index: torch.Tensor
    valid: torch.Tensor


@dataclass
class AttentionContext:
    """The batch as every attention layer sees it.

    The optional fields are set by the encoder-level input provider of an attention kind
    (`Encoder.attention_inputs`) or by a decoder; a kind reads only its own.

    Attributes:
        mask: (B, S) bool, True = real token to attend to.
        bias: (B, 1, 1, S) float additive mask: 0 where ``mask``, the dtype's minimum elsewhere
            (finite, so a row with no real key stays finite in every dtype); (B, 1, T, S) when
            the caller gave a (B, T, S) visibility matrix (a query row per token).
        need_weights: return attention probabilities and pre-softmax scores (slow path).
        padded: whether any key is masked. False when every token of the batch is real: the
            attention kinds then skip the all-zero ``bias`` (SDPA without a mask runs faster
            on CPU). Always True while the ONNX exporter traces (the graph keeps the mask).
        condition: (B, C) or (B, T, C) condition vector for conditional norms, or None.
        unpadded: the unpadding plan when the layers run on packed real tokens
            (see `modules.unpad`), else None.
        relative_embeddings: (2T - 1, H) relative position embeddings shared by all layers
            (disentangled attention), row r for distance r - (T - 1).
        key_value_states: (B, T, H) states to take keys and values from instead of the layer
            input (DeBERTa's enhanced mask decoder), else None.
        global_attention_mask: (B, T) 0/1 caller's global attention mask (windowed attention).
        global_tokens: the global tokens derived from it (windowed attention), else None.
        rotary: table name → `modules.positions.RotaryTables` of positions 0..T-1 (rotary
            positions); each layer reads the table its attention names, else None.
        position_bias: (1, N, T, T) float bias added to every layer's attention scores
            (MPNet's relative position buckets), else None.
        memo: tensors the layers of one forward derive alike from the batch, computed by the
            first layer that needs them and reused by the others (ModernBERT's (T, T) local
            band, one per window, length and dtype).
    """

    mask: torch.Tensor
    bias: torch.Tensor
    need_weights: bool = False
    padded: bool = True
    condition: torch.Tensor | None = None
    unpadded: Unpadded | None = None
    relative_embeddings: torch.Tensor | None = None
    key_value_states: torch.Tensor | None = None
    global_attention_mask: torch.Tensor | None = None
    global_tokens: GlobalTokens | None = None
    rotary: dict | None = None
    position_bias: torch.Tensor | None = None
    memo: dict = field(default_factory=dict, repr=False)

    @classmethod
    def from_mask(
        cls, attention_mask: torch.Tensor, dtype: torch.dtype, need_weights: bool = False, **fields
    ) -> AttentionContext:
        """Build from a (B, S) 0/1 mask (1 = keep); ``fields`` set the optional attributes.

        A (B, T, S) mask is a visibility matrix: entry [b, i, j] = 1 lets query i attend to key
        j (e.g. K-BERT's visible matrix, Liu et al. 2020 §3.3). ``mask`` is then its diagonal
        (a token is real iff it sees itself) and ``bias`` (B, 1, T, S); ``padded`` is False
        only when every entry is 1 (then it equals the plain (B, S) all-ones case exactly).
        """
        if attention_mask.dim() == 3:
            visible = attention_mask.bool()  # (B, T, S)
            bias = torch.zeros(visible.shape, dtype=dtype, device=visible.device)
            bias = bias.masked_fill(~visible, torch.finfo(dtype).min)[:, None]  # (B, 1, T, S)
            padded = torch.jit.is_tracing() or not bool(visible.all())
            keys = visible.diagonal(dim1=1, dim2=2)  # (B, T)
            return cls(mask=keys, bias=bias, need_weights=need_weights, padded=padded, **fields)
        mask = attention_mask.bool()
        bias = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
        bias = bias.masked_fill(~mask, torch.finfo(dtype).min)[:, None, None, :]  # (B, 1, 1, S)
        padded = torch.jit.is_tracing() or not bool(mask.all())
        return cls(mask=mask, bias=bias, need_weights=need_weights, padded=padded, **fields)
