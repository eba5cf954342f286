"""The encoder trunk: embeddings, a schedule of (possibly shared) layers, optional pooler."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from ..errors import ArgumentTypeError, InputError
from .attention import AttentionOutput
from .context import AttentionContext
from .unpad import Unpadded


@dataclass
class EncoderOutput:
    """Output of the trunk.

    Attributes:
        last_hidden_state: (B, T, H) float.
        pooler_output: (B, H) float, tanh(dense(h[:, 0])), or None for models without a pooler.
        hidden_states: L + 1 tensors (B, T, H) (embeddings, then each layer) when asked for.
        attentions: L tensors (B, N, T, S) of softmax probabilities when asked for.
        attention_scores: L tensors (B, N, T, S) of pre-softmax scores QKᵀ/√Dh (unmasked)
            when asked for (TinyBERT distils these).
    """

    last_hidden_state: torch.Tensor
    pooler_output: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None
    attention_scores: tuple[torch.Tensor, ...] | None = None


@dataclass
class EncoderRun:
    """A forward in progress (see `Encoder.begin`): the hidden states after ``next_step``
    layer steps and what the remaining steps need.

    Attributes:
        x: (B, T, H) float hidden states, or (total_tokens, H) packed real tokens under
            ``plan``.
        ctx: the batch's `AttentionContext` (padded layout); run_ctx: the one the layers get
            (with the unpadding plan).
        plan: the unpadding plan, or None.
        embedded: (B, T, H) the embeddings' output (attention kinds' inputs are rebuilt from
            it when rows leave, see `Encoder.keep_rows`).
        attention_mask: (B, T) 0/1 or a (B, T, T) visibility matrix, 1 = keep.
        condition, global_attention_mask: the forward's (row-selected), or None.
        next_step: the index into the schedule of the next layer step.
    """

    x: torch.Tensor
    ctx: AttentionContext
    run_ctx: AttentionContext
    plan: Unpadded | None
    embedded: torch.Tensor
    attention_mask: torch.Tensor
    condition: torch.Tensor | None
    global_attention_mask: torch.Tensor | None
    next_step: int = 0

    def hidden(self) -> torch.Tensor:
        """(B, T, H) float: the current hidden states in the padded layout."""
        return self.plan.scatter(self.x) if self.plan is not None else self.x


class Pooler(nn.Module):
    """(B, T, H) → (B, H): the first token's hidden state through dense + tanh
    (Devlin et al. §3)."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """(B, T, H) float → (B, H) float: tanh(dense(first token))."""
        return torch.tanh(self.dense(hidden[:, 0]))


class Encoder(nn.Module):
    """Embeddings → L layer steps → pooler.

    Args:
        embeddings: the input embedding module (returns (B, T, H)).
        layers: the unique layers.
        schedule: index into ``layers`` for each of the L steps (ALBERT reuses one layer;
            Lan et al. 2020 §3.1 "cross-layer parameter sharing").
        pooler: optional Pooler.
        vocab_size, type_vocab_size, max_positions, position_offset, pad_token_id: limits used
            to validate inputs before any lookup.
    """

    def __init__(
        self,
        embeddings: nn.Module,
        layers: list[nn.Module],
        schedule: list[int],
        pooler: nn.Module | None,
        *,
        vocab_size: int,
        type_vocab_size: int,
        max_positions: int,
        position_offset: int,
        pad_token_id: int,
    ) -> None:
        super().__init__()
        self.embeddings = embeddings
        self.layers = nn.ModuleList(layers)
        self.schedule = list(schedule)
        self.pooler = pooler
        self.vocab_size = vocab_size
        self.type_vocab_size = type_vocab_size
        self.max_positions = max_positions
        self.position_offset = position_offset
        self.pad_token_id = pad_token_id
        # Optional encoder-level provider of attention inputs shared by all layers (e.g. the
        # relative position embeddings of disentangled attention): called once per forward as
        # provider(x, ctx) -> {AttentionContext field: value}; its ``inputs`` attribute names
        # the forward keywords it reads (e.g. global_attention_mask).
        self.attention_inputs: nn.Module | None = None
        # Optional branch beside the first layer step, called as branch(embeddings, first
        # layer output, ctx) -> new first layer output (DeBERTa-v2's convolution).
        self.first_layer_branch: nn.Module | None = None
        # Unpadded execution (see modules/unpad.py): on by default where it applies; set False to
        # always run the padded batch.
        self.unpad = True
        # Batch-invariant execution (`modules.kernels.make_batch_invariant`, set by the
        # inference engine): every batch runs packed, even one without padding, so a sequence
        # is computed the same way whatever its batch neighbours.
        self.batch_invariant = False
        # Activation checkpointing (Chen et al. 2016, "Training Deep Nets with Sublinear Memory
        # Cost"): when True, in training with gradients on, each layer step keeps only its
        # input and recomputes its activations during backward (torch.utils.checkpoint,
        # non-reentrant, same dropout masks). Set by the Trainer's checkpoint_activations.
        self.checkpoint_activations = False
        # Optional norm after the last layer step (pre-LN encoders, ModernBERT's final_norm):
        # applied to the last hidden state, which is also the last of ``hidden_states`` (as
        # transformers gives them).
        self.final_norm: nn.Module | None = None

    # ------------------------------------------------------------------------------------------
    def check_inputs(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None,
        token_type_ids: torch.Tensor | None,
        position_ids: torch.Tensor | None,
    ) -> None:
        """Validate a batch before any embedding lookup.

        Raises:
            ValueError: input_ids not (B, T) integers or outside [0, vocab_size); a sequence
                longer than the position table allows, or of length 0; attention_mask not
                integer/bool 0/1 values (a float mask, or a value such as 2 or -1, is refused:
                it would silently count as 1); attention_mask / token_type_ids /
                position_ids of another shape than input_ids (attention_mask may also be a
                (B, T, T) visibility matrix, for attention kinds that support one);
                token_type_ids outside [0, type_vocab_size), or passed at all to a model
                without segment embeddings;
                position_ids outside the table.
        """
        if input_ids.dim() != 2:
            raise InputError(f"input_ids must be (B, T), got shape {tuple(input_ids.shape)}")
        if input_ids.dtype.is_floating_point or input_ids.dtype == torch.bool:
            raise InputError(f"input_ids must be an integer tensor, got {input_ids.dtype}")
        B, T = input_ids.shape
        if T == 0:
            raise InputError(
                f"input_ids have shape {tuple(input_ids.shape)}: a sequence of length 0 has no "
                "tokens to encode (a tokenizer adds at least the special tokens)"
            )
        if input_ids.numel():
            lo, hi = int(input_ids.min()), int(input_ids.max())
            if lo < 0 or hi >= self.vocab_size:
                bad = lo if lo < 0 else hi
                raise InputError(
                    f"input_ids contain {bad}, outside [0, vocab_size={self.vocab_size})"
                )
        limit = self.max_positions - self.position_offset
        if T > limit:
            raise InputError(
                f"sequence length {T} exceeds the model's maximum of {limit} "
                f"positions (max_position_embeddings={self.max_positions}"
                + (
                    f" minus the padding offset {self.position_offset})"
                    if self.position_offset
                    else ")"
                )
            )
        for name, t in (
            ("attention_mask", attention_mask),
            ("token_type_ids", token_type_ids),
            ("position_ids", position_ids),
        ):
            if (
                t is not None
                and tuple(t.shape) != (B, T)
                and not (name == "position_ids" and tuple(t.shape) == (1, T))
                and not (name == "attention_mask" and tuple(t.shape) == (B, T, T))
            ):
                raise InputError(
                    f"{name} has shape {tuple(t.shape)}; expected {(B, T)} like input_ids"
                    + (f" (or a (B, T, T) visibility matrix {(B, T, T)})" if name[0] == "a" else "")
                )
        if attention_mask is not None and attention_mask.dim() == 3:
            if not all(
                getattr(layer.attention, "supports_attention_matrix", False)
                for layer in self.layers
            ):
                raise InputError(
                    "a (B, T, T) attention_mask (visibility matrix) needs an attention kind "
                    "that attends with a per-query mask; this model's attention "
                    f"({type(self.layers[0].attention).__name__}) takes a (B, T) mask only"
                )
        if attention_mask is not None:
            _check_attention_mask(attention_mask)
        if token_type_ids is not None:
            if self.type_vocab_size == 0:
                raise InputError(
                    "token_type_ids were given but this model has no segment "
                    "embedding (type_vocab_size=0); do not pass them"
                )
            if token_type_ids.numel() and (
                int(token_type_ids.min()) < 0 or int(token_type_ids.max()) >= self.type_vocab_size
            ):
                raise InputError(
                    f"token_type_ids contain {int(token_type_ids.max())}, outside "
                    f"[0, type_vocab_size={self.type_vocab_size})"
                )
        if (
            position_ids is not None
            and position_ids.numel()
            and (int(position_ids.min()) < 0 or int(position_ids.max()) >= self.max_positions)
        ):
            raise InputError(
                f"position_ids must lie in [0, max_position_embeddings={self.max_positions})"
            )

    def position_ids_for(self, input_ids: torch.Tensor) -> torch.Tensor:
        """(B, T) int64 positions: 0..T-1, or (RoBERTa) pad_token_id + 1 + rank among real tokens
        with padding tokens at pad_token_id, so left and right padding give the same positions."""
        if self.position_offset == 0:
            return torch.arange(input_ids.shape[1], device=input_ids.device)[None, :]
        real = input_ids.ne(self.pad_token_id).long()
        return torch.cumsum(real, dim=1) * real + self.pad_token_id

    def _unpad_plan(self, attention_mask: torch.Tensor, ctx: AttentionContext) -> Unpadded | None:
        """An unpadding plan when it applies: switched on, a right-padded batch with padding,
        no attention weights requested, no per-sequence condition, and attention components
        that support packed sequences (``supports_unpadded``)."""
        if not self.unpad or ctx.need_weights or ctx.condition is not None:
            return None
        if not ctx.padded and not self.batch_invariant:
            return None
        if attention_mask.dim() == 3:  # per-query visibility: packed rows cannot express it
            return None
        if not all(getattr(layer.attention, "supports_unpadded", False) for layer in self.layers):
            return None
        if self.first_layer_branch is not None:  # it convolves the padded (B, T, H) layout
            return None
        return Unpadded.from_mask(attention_mask, always=self.batch_invariant)

    @property
    def forward_inputs(self) -> tuple[str, ...]:
        """The optional forward keywords of this encoder's attention kind (e.g.
        ("global_attention_mask",) for windowed attention); others are rejected."""
        return tuple(getattr(self.attention_inputs, "inputs", ()))

    def attention_context(
        self,
        x: torch.Tensor,
        attention_mask: torch.Tensor,
        *,
        need_weights: bool = False,
        condition: torch.Tensor | None = None,
        global_attention_mask: torch.Tensor | None = None,
    ) -> AttentionContext:
        """The batch's `AttentionContext` for embeddings ``x`` (B, T, H) and the (B, T) 0/1
        ``attention_mask``, with the attention kind's encoder-level inputs filled in."""
        ctx = AttentionContext.from_mask(
            attention_mask,
            x.dtype,
            need_weights=need_weights,
            condition=condition,
            global_attention_mask=global_attention_mask,
        )
        if self.attention_inputs is not None:
            ctx = dataclasses.replace(ctx, **self.attention_inputs(x, ctx))
        return ctx

    # ------------------------------------------------------------------------------------------
    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        *,
        global_attention_mask: torch.Tensor | None = None,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
        condition: torch.Tensor | None = None,
        return_context: bool = False,
    ):
        """Run the trunk.

        Args:
            input_ids: (B, T) int64 in [0, V).
            attention_mask: (B, T) 0/1, 1 = real token; None = all real. Or a (B, T, T) 0/1
                visibility matrix, [b, i, j] = 1 lets token i attend to token j (K-BERT's
                visible matrix, Liu et al. 2020 §3.3); its diagonal marks the real tokens.
            token_type_ids: (B, T) int64 segment ids; None = zeros. Rejected by models
                without a segment embedding.
            position_ids: (B, T) or (1, T) int64; None = the model's scheme.
            global_attention_mask: (B, T) 0/1 or bool, 1 = global attention (Beltagy et al.
                2020 §3.1); windowed-attention models only.
            output_hidden_states: also return the L + 1 hidden states.
            output_attentions: also return attention probabilities and scores (slower path).
            condition: (B, C) or (B, T, C) condition for conditional norms (None otherwise).
            return_context: also return the batch's `AttentionContext` (for a decoder that
                re-applies a layer, e.g. DeBERTa's enhanced mask decoder).

        Returns:
            EncoderOutput, or (EncoderOutput, AttentionContext) with ``return_context``.

        Raises:
            ValueError: see `check_inputs`.
            TypeError: a ``global_attention_mask`` for an attention kind that reads none.
        """
        run = self.begin(
            input_ids,
            attention_mask,
            token_type_ids,
            position_ids,
            global_attention_mask=global_attention_mask,
            condition=condition,
            need_weights=output_attentions,
        )
        hidden, probs, scores = [run.x], [], []
        for _ in self.schedule:
            att = self.step(run)
            if output_hidden_states:  # else each layer's output is freed (long inputs)
                hidden.append(run.x)
            probs.append(att.probs)
            scores.append(att.scores)
        if self.final_norm is not None:
            run.x = self.final_norm(run.x)
            if output_hidden_states:
                hidden[-1] = run.x
        x, ctx = run.hidden(), run.ctx
        if run.plan is not None and output_hidden_states:
            hidden = [run.plan.scatter(h) for h in hidden]
        out = EncoderOutput(
            last_hidden_state=x,
            pooler_output=self.pooler(x) if self.pooler is not None else None,
            hidden_states=tuple(hidden) if output_hidden_states else None,
            attentions=tuple(probs) if output_attentions else None,
            attention_scores=tuple(scores) if output_attentions else None,
        )
        return (out, ctx) if return_context else out

    # --- one layer step at a time (early exit) ------------------------------------------------
    def begin(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        *,
        global_attention_mask: torch.Tensor | None = None,
        condition: torch.Tensor | None = None,
        need_weights: bool = False,
    ) -> EncoderRun:
        """Check the inputs, embed them and plan the batch: an `EncoderRun` before its first
        layer step. ``forward`` is ``begin`` + one `step` per schedule entry + the pooler;
        a caller that decides after each step which rows go on (early exit) uses the same
        three calls plus `keep_rows`, so its outputs equal ``forward``'s bit for bit.

        Args: as `forward`. Raises: as `forward`.
        """
        if global_attention_mask is not None and "global_attention_mask" not in (
            self.forward_inputs
        ):
            raise ArgumentTypeError(
                "global_attention_mask is not an input of this model: its attention "
                "reads none (only windowed attention has global tokens)"
            )
        if not torch.jit.is_tracing():  # the ONNX exporter traces; values are checked eagerly
            device = self.embeddings.token.weight.device
            input_ids = as_input_tensor(input_ids, "input_ids", device)
            attention_mask = as_input_tensor(attention_mask, "attention_mask", device, False)
            token_type_ids = as_input_tensor(token_type_ids, "token_type_ids", device)
            position_ids = as_input_tensor(position_ids, "position_ids", device)
            self.check_inputs(input_ids, attention_mask, token_type_ids, position_ids)
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if position_ids is None:
            position_ids = self.position_ids_for(input_ids)
        x = self.embeddings(
            input_ids,
            position_ids,
            token_type_ids,
            **({"condition": condition} if condition is not None else {}),
        )
        return self._plan_run(x, x, attention_mask, condition, global_attention_mask, need_weights)

    def _plan_run(
        self,
        x: torch.Tensor,
        embedded: torch.Tensor,
        attention_mask: torch.Tensor,
        condition: torch.Tensor | None,
        global_attention_mask: torch.Tensor | None,
        need_weights: bool,
        next_step: int = 0,
    ) -> EncoderRun:
        """The run of padded hidden states ``x`` (B, T, H) about to take step ``next_step``."""
        ctx = self.attention_context(
            embedded,
            attention_mask,
            need_weights=need_weights,
            condition=condition,
            global_attention_mask=global_attention_mask,
        )
        plan = self._unpad_plan(attention_mask, ctx)
        run_ctx = ctx
        if plan is not None:
            x = plan.gather(x)  # (B, T, H) -> (total_tokens, H)
            run_ctx = dataclasses.replace(ctx, unpadded=plan)
        return EncoderRun(
            x, ctx, run_ctx, plan, embedded, attention_mask, condition, global_attention_mask,
            next_step,
        )  # fmt: skip

    def step(self, run: EncoderRun) -> AttentionOutput:
        """Apply the next layer step of the schedule to ``run`` in place (``run.x`` becomes its
        output, ``run.next_step`` advances) and return that layer's attention output (its
        ``probs`` / ``scores`` when weights were asked for)."""
        index = self.schedule[run.next_step]
        layer_input = run.x
        if self.checkpoint_activations and self.training and torch.is_grad_enabled():
            x, att = checkpoint(self.layers[index], run.x, run.run_ctx, use_reentrant=False)
        else:
            x, att = self.layers[index](run.x, run.run_ctx)
        if run.next_step == 0 and self.first_layer_branch is not None:
            x = self.first_layer_branch(layer_input, x, run.run_ctx)
        run.x, run.next_step = x, run.next_step + 1
        return att

    def keep_rows(self, run: EncoderRun, rows: torch.Tensor) -> EncoderRun:
        """The run of the batch rows ``rows`` ((R,) int64 indices or (B,) bool) only, at the
        same step: its context and unpadding plan are rebuilt as a forward of these rows alone
        would build them (their T is kept)."""

        def sub(t: torch.Tensor | None) -> torch.Tensor | None:
            return t[rows] if t is not None else None

        return self._plan_run(
            run.hidden()[rows],
            run.embedded[rows],
            run.attention_mask[rows],
            sub(run.condition),
            sub(run.global_attention_mask),
            run.ctx.need_weights,
            run.next_step,
        )


def as_input_tensor(value, name: str, device: torch.device | None = None, index: bool = True):
    """A model input as a tensor, as transformers' models accept it: a torch tensor, a NumPy
    array or a (nested, rectangular) Python list. Index inputs (``input_ids``,
    ``token_type_ids``, ``position_ids``) of any integer width become int64; a mask keeps its
    integer or bool dtype. None stays None; a tensor of another kind (float, bool ids) is left
    for `Encoder.check_inputs` to refuse.

    Raises:
        ValueError: a ragged list, a list or array of non-numbers, or another type (one line
            naming the input).
    """
    if value is None:
        return None
    if not isinstance(value, torch.Tensor):
        import numpy as np

        if not isinstance(value, (list, tuple, np.ndarray)):
            raise InputError(
                f"{name} must be a torch tensor, a NumPy array or a list of ints, got "
                f"{type(value).__name__}"
            )
        try:
            array = np.asarray(value)
        except ValueError:
            raise InputError(
                f"{name} is a ragged list (rows of different lengths); pad the rows to one "
                "length (the tokenizer's padding=True) and pass attention_mask"
            ) from None
        if array.dtype.kind not in "iub" or (index and array.dtype.kind == "b"):
            if array.dtype == object:
                raise InputError(f"{name} is a ragged or mixed list; give rows of ints")
            raise InputError(f"{name} must hold integers, got NumPy dtype {array.dtype}")
        if array.dtype.kind == "u" and array.size and int(array.max()) > 2**62:
            raise InputError(f"{name} contains {int(array.max())}, far outside any vocabulary")
        value = torch.from_numpy(
            np.ascontiguousarray(array).astype(np.int64, copy=False)
            if array.dtype.kind != "b"
            else array.copy()
        )
        if device is not None:
            value = value.to(device)
    if (
        index
        and value.dtype not in (torch.int64,)
        and not (
            value.dtype.is_floating_point or value.dtype.is_complex or value.dtype == torch.bool
        )
    ):
        value = value.long()  # uint8, int16, int32, ...: embedding lookups need int64
    return value


def _check_attention_mask(attention_mask: torch.Tensor) -> None:
    """Refuse a mask that is not 0/1: float masks (an additive -inf bias or a 0.5 weight would
    silently count as 1) and integer values other than 0 and 1, naming the offending value."""
    if attention_mask.dtype == torch.bool:
        return
    if attention_mask.dtype.is_floating_point or attention_mask.is_complex():
        raise InputError(
            f"attention_mask must hold integers 0/1 or bools, got {attention_mask.dtype}; "
            "a float mask is refused (pass mask.long() of a 0/1 mask)"
        )
    if attention_mask.numel():
        lo, hi = int(attention_mask.min()), int(attention_mask.max())
        if lo < 0 or hi > 1:
            raise InputError(
                f"attention_mask contains {lo if lo < 0 else hi}; only 0 (padding) and "
                "1 (real token) are allowed"
            )
