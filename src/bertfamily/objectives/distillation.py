"""Knowledge distillation: DistilBERT (Sanh et al. 2019) and TinyBERT (Jiao et al. 2020).

Pure loss functions on tensors (shapes: B batch, T sequence, S key length = T, N heads, H hidden,
V vocabulary), and the objectives the `Trainer` optimises, one class per method, each
``forward(batch) -> (loss, parts)``:

- `DistilBertObjective`: `distilbert_loss` on masked inputs (soft targets from the teacher's
  MLM head at temperature T, the student's MLM loss, the cosine loss on the last hidden
  states). Needs a teacher with an MLM head and the same vocabulary; equal hidden sizes unless
  a projection is learned.
- `TinyBertObjective`: general distillation (Jiao et al. 2020 §3.1) on unmasked text,
  `tinybert_intermediate_loss` (embeddings, hidden states through W_e / W_h, attention
  scores). Needs the same vocabulary and head count, and teacher layers a multiple of student
  layers.
- `TinyBertTaskObjective`: task distillation (Jiao et al. 2020 §3.2, second stage) of a
  sequence classifier: the intermediate loss on task data, then `soft_cross_entropy` between
  the student's and the teacher's task logits.

`OBJECTIVES` maps the method names ("distilbert", "tinybert") to the classes;
`bertfamily.recipes.distill` wires them to models, data and the shared `Trainer`.

Layer mapping (TinyBERT §3.1, "mapping function" g(m) = m·k with k = L_teacher / L_student):

- hidden states, as the tuples ``EncoderOutput.hidden_states`` index them (0 = embedding
  output, m = output of layer m): student index m ↔ teacher index m·k, for m = 0..L_student
  (so the embedding outputs are matched with each other, eq. 9, and the last layers with
  each other);
- attention scores, as ``EncoderOutput.attention_scores`` index them (0-based, index i =
  layer i + 1): student index i ↔ teacher index (i + 1)·k − 1 = i·k + k − 1, i.e. the
  1-based student layer m attends like the 1-based teacher layer m·k, the same layer whose
  output its hidden state is matched with. Example: 4-layer student, 12-layer teacher (k = 3):
  hidden 0,1,2,3,4 ↔ 0,3,6,9,12; attention 0,1,2,3 ↔ 2,5,8,11.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from torch import nn
from torch.nn import functional as F

from ..config import EncoderConfig
from ..data.batching import IGNORE_INDEX
from ..errors import InputError
from ..files import atomic_write
from ..model import Model
from .units import step_denominators

__all__ = [
    "DISTILBERT_DEFAULTS",
    "layer_step",
    "hidden_layer_map",
    "attention_layer_map",
    "REDUCTIONS",
    "real_tokens",
    "real_token_pairs",
    "soft_target_kl",
    "soft_cross_entropy",
    "masked_cosine_loss",
    "masked_mse",
    "attention_score_mse",
    "distilbert_loss",
    "tinybert_intermediate_loss",
    "PROJECTION_FILE",
    "DistillationObjective",
    "DistilBertObjective",
    "TinyBertObjective",
    "build_projections",
    "TinyBertTaskObjective",
    "DISTILLABLE_TASKS",
    "OBJECTIVES",
    "METHODS",
    "TASK_STAGES",
    "check_compatible",
]

# Sanh et al. 2019 §3 / the authors' training script: temperature 2, α_ce 5, α_mlm 2, α_cos 1.
DISTILBERT_DEFAULTS = {"temperature": 2.0, "alpha_ce": 5.0, "alpha_mlm": 2.0, "alpha_cos": 1.0}


# --- layer mapping ---------------------------------------------------------------------------


def layer_step(teacher_layers: int, student_layers: int) -> int:
    """k = teacher layers / student layers (TinyBERT §3.1).

    Raises:
        ValueError: a non-positive count, a student deeper than the teacher, or counts that do
            not divide.
    """
    if teacher_layers < 1 or student_layers < 1:
        raise InputError(
            f"layer counts must be >= 1, got teacher {teacher_layers}, student {student_layers}"
        )
    if teacher_layers % student_layers:
        raise InputError(
            f"teacher layers ({teacher_layers}) must be a multiple of student "
            f"layers ({student_layers}) for the TinyBERT layer mapping"
        )
    return teacher_layers // student_layers


def hidden_layer_map(teacher_layers: int, student_layers: int) -> list[tuple[int, int]]:
    """[(student index, teacher index)] into the hidden-state tuples, embeddings (0, 0)
    included: m ↔ m·k for m = 0..student_layers."""
    k = layer_step(teacher_layers, student_layers)
    return [(m, m * k) for m in range(student_layers + 1)]


def attention_layer_map(teacher_layers: int, student_layers: int) -> list[tuple[int, int]]:
    """[(student index, teacher index)] into the 0-based attention-score tuples:
    i ↔ i·k + k − 1 (1-based: layer m ↔ layer m·k)."""
    k = layer_step(teacher_layers, student_layers)
    return [(i, i * k + k - 1) for i in range(student_layers)]


# --- elementary losses ------------------------------------------------------------------------

REDUCTIONS = ("mean", "sum")


def _check_reduction(reduction: str) -> None:
    if reduction not in REDUCTIONS:
        raise InputError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")


def _reduce(values: torch.Tensor, reduction: str) -> torch.Tensor:
    return values.sum() if reduction == "sum" else values.mean()


def real_tokens(batch: dict[str, torch.Tensor]) -> int:
    """The real (non-padding) tokens of a batch: the units of the per-token losses."""
    return int(batch["attention_mask"].bool().sum())


def real_token_pairs(batch: dict[str, torch.Tensor]) -> int:
    """Σ over rows of (real tokens)²: the (query, key) units of `attention_score_mse`."""
    n = batch["attention_mask"].bool().sum(-1).long()
    return int((n * n).sum())


def soft_target_kl(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    temperature: float = 2.0,
    mask: torch.Tensor | None = None,
    reduction: str = "mean",
) -> torch.Tensor:
    """T²·KL(softmax(teacher/T) ‖ softmax(student/T)), mean (or with ``reduction="sum"`` sum)
    over the selected positions (Hinton et al. 2015 §2; DistilBERT's L_ce, Sanh et al. 2019
    §3). The T² factor keeps the gradient scale independent of T.

    Args:
        student_logits / teacher_logits: (..., V) float, same shape.
        temperature: T > 0.
        mask: optional bool tensor of the leading shape (...): positions to average over
            (e.g. non-padding tokens); None = all.

    Returns:
        0-d float32 tensor (0 when no position is selected).

    Raises:
        ValueError: shape mismatch (e.g. different vocabularies), T <= 0 or an unknown
            reduction.
    """
    _check_reduction(reduction)
    if student_logits.shape != teacher_logits.shape:
        raise InputError(
            f"student logits {tuple(student_logits.shape)} and teacher logits "
            f"{tuple(teacher_logits.shape)} differ; soft targets need the same "
            f"vocabulary"
        )
    if temperature <= 0:
        raise InputError(f"temperature must be > 0, got {temperature}")
    s, t = student_logits.float(), teacher_logits.float()
    if mask is not None:
        s, t = s[mask], t[mask]
    if s.numel() == 0:
        return student_logits.sum() * 0.0
    log_p_s = F.log_softmax(s / temperature, dim=-1)
    log_p_t = F.log_softmax(t / temperature, dim=-1)
    kl = (log_p_t.exp() * (log_p_t - log_p_s)).sum(-1)  # (M,)
    return _reduce(kl, reduction) * temperature**2


def soft_cross_entropy(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    temperature: float = 1.0,
    reduction: str = "mean",
) -> torch.Tensor:
    """TinyBERT's prediction-layer loss (Jiao et al. 2020 eq. 10): −Σ softmax(z_T/t)·
    log_softmax(z_S/t), mean (or with ``reduction="sum"`` sum) over the leading dimensions.
    Used in task distillation on the teacher's task logits ((B, C) for classification).

    Raises:
        ValueError: shape mismatch, t <= 0 or an unknown reduction.
    """
    _check_reduction(reduction)
    if student_logits.shape != teacher_logits.shape:
        raise InputError(
            f"student logits {tuple(student_logits.shape)} and teacher logits "
            f"{tuple(teacher_logits.shape)} differ"
        )
    if temperature <= 0:
        raise InputError(f"temperature must be > 0, got {temperature}")
    p_t = F.softmax(teacher_logits.float() / temperature, dim=-1)
    per_row = -(p_t * F.log_softmax(student_logits.float() / temperature, dim=-1)).sum(-1)
    return _reduce(per_row, reduction)


def masked_cosine_loss(
    student_hidden: torch.Tensor,
    teacher_hidden: torch.Tensor,
    attention_mask: torch.Tensor,
    reduction: str = "mean",
) -> torch.Tensor:
    """DistilBERT's L_cos (Sanh et al. 2019 §3): mean (or with ``reduction="sum"`` sum) over
    real tokens of 1 − cos(h_S, h_T) (torch's CosineEmbeddingLoss with target 1).

    Args:
        student_hidden / teacher_hidden: (B, T, H) float, same H.
        attention_mask: (B, T) 0/1, 1 = real token.

    Raises:
        ValueError: different hidden sizes or an unknown reduction.
    """
    _check_reduction(reduction)
    if student_hidden.shape != teacher_hidden.shape:
        raise InputError(
            f"cosine loss needs equal hidden states; student "
            f"{tuple(student_hidden.shape)} vs teacher "
            f"{tuple(teacher_hidden.shape)} (configure a projection)"
        )
    keep = attention_mask.bool()
    s, t = student_hidden[keep].float(), teacher_hidden[keep].float()  # (M, H)
    if s.numel() == 0:
        return student_hidden.sum() * 0.0
    return _reduce(1.0 - F.cosine_similarity(s, t, dim=-1, eps=1e-8), reduction)


def masked_mse(
    student: torch.Tensor,
    teacher: torch.Tensor,
    attention_mask: torch.Tensor,
    reduction: str = "mean",
) -> torch.Tensor:
    """Mean squared error over the real tokens of (B, T, H) tensors: Σ over real tokens and
    features / (real tokens · H) (TinyBERT eq. 8/9 restricted to non-padding positions). With
    ``reduction="sum"``: Σ over real tokens of each token's mean over the H features (so
    mean = sum / real tokens).

    Raises:
        ValueError: shape mismatch or an unknown reduction.
    """
    _check_reduction(reduction)
    if student.shape != teacher.shape:
        raise InputError(
            f"MSE needs equal shapes; got {tuple(student.shape)} and {tuple(teacher.shape)}"
        )
    keep = attention_mask.bool()
    s, t = student[keep].float(), teacher[keep].float()
    if s.numel() == 0:
        return student.sum() * 0.0
    if reduction == "sum":
        return F.mse_loss(s, t, reduction="sum") / s.shape[-1]
    return F.mse_loss(s, t)


def attention_score_mse(
    student_scores: torch.Tensor,
    teacher_scores: torch.Tensor,
    attention_mask: torch.Tensor,
    reduction: str = "mean",
) -> torch.Tensor:
    """TinyBERT's attention loss (eq. 7) on pre-softmax scores QKᵀ/√Dh: the entries whose
    query or key is padding are zeroed in both (they carry no information; the official code
    zeroes the masked keys), and the squared error is averaged over the N·(real query, real
    key) entries that remain. With ``reduction="sum"``: Σ over (real query, real key) pairs of
    each pair's mean over the N heads (so mean = sum / pairs).

    Args:
        student_scores / teacher_scores: (B, N, T, S) float (same N).
        attention_mask: (B, T) 0/1, 1 = real token.

    Raises:
        ValueError: shape mismatch (e.g. different head counts) or an unknown reduction.
    """
    _check_reduction(reduction)
    if student_scores.shape != teacher_scores.shape:
        raise InputError(
            f"attention scores differ in shape: student "
            f"{tuple(student_scores.shape)} vs teacher "
            f"{tuple(teacher_scores.shape)}; TinyBERT needs the same number of "
            f"heads"
        )
    m = attention_mask.bool()
    pair = (m[:, :, None] & m[:, None, :])[:, None].expand_as(student_scores)  # (B, N, T, S)
    s = student_scores.float().masked_fill(~pair, 0.0)
    t = teacher_scores.float().masked_fill(~pair, 0.0)
    count = pair.sum()
    if count == 0:
        return student_scores.sum() * 0.0
    if reduction == "sum":
        return ((s - t) ** 2).sum() / student_scores.shape[1]
    return ((s - t) ** 2).sum() / count


# --- the recipes ------------------------------------------------------------------------------


def distilbert_loss(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    student_hidden: torch.Tensor,
    teacher_hidden: torch.Tensor,
    attention_mask: torch.Tensor,
    labels: torch.Tensor | None,
    *,
    temperature: float = 2.0,
    alpha_ce: float = 5.0,
    alpha_mlm: float = 2.0,
    alpha_cos: float = 1.0,
    denominators: dict[str, float] | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """DistilBERT's triple loss (Sanh et al. 2019 §3):
    α_ce·T²·KL(p_T ‖ p_S) + α_mlm·CE(student, labels) + α_cos·(1 − cos(h_S, h_T)).

    The soft-target and cosine terms run on every non-padding position (the published
    script's default); the MLM term on the positions with a label (≠ -100).

    Args:
        student_logits / teacher_logits: (B, T, V) float, same V.
        student_hidden / teacher_hidden: (B, T, H) last hidden states (student projected to
            the teacher's H when sizes differ).
        attention_mask: (B, T) 0/1.
        labels: (B, T) int64 MLM targets, -100 elsewhere; None or α_mlm = 0 skips the term.
        denominators: None (each term a mean over its positions), or ``{"tokens", "mlm"}``
            (`DistilBertObjective.counts`): the soft-target and cosine terms summed over real
            tokens ÷ ``tokens``, the MLM term summed over labelled tokens ÷ ``mlm``.

    Returns:
        (loss, {"ce_loss", "mlm_loss", "cos_loss"}) — parts detached and unweighted.
    """
    mask = attention_mask.bool()
    red = "mean" if denominators is None else "sum"
    ce = soft_target_kl(student_logits, teacher_logits, temperature, mask, reduction=red)
    cos = masked_cosine_loss(student_hidden, teacher_hidden, attention_mask, reduction=red)
    if denominators is not None:
        ce, cos = ce / denominators["tokens"], cos / denominators["tokens"]
    loss = alpha_ce * ce + alpha_cos * cos
    parts = {"ce_loss": ce.detach(), "cos_loss": cos.detach()}
    if labels is not None and alpha_mlm:
        sel = labels != IGNORE_INDEX
        mlm = (
            F.cross_entropy(student_logits[sel].float(), labels[sel], reduction=red)
            if sel.any()
            else student_logits.sum() * 0.0
        )
        if denominators is not None:
            mlm = mlm / denominators["mlm"]
        loss = loss + alpha_mlm * mlm
        parts["mlm_loss"] = mlm.detach()
    return loss, parts


def tinybert_intermediate_loss(
    student_hidden: tuple[torch.Tensor, ...],
    teacher_hidden: tuple[torch.Tensor, ...],
    student_scores: tuple[torch.Tensor, ...],
    teacher_scores: tuple[torch.Tensor, ...],
    attention_mask: torch.Tensor,
    *,
    embedding_projection=None,
    hidden_projection=None,
    denominators: dict[str, float] | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """TinyBERT's Transformer-layer and embedding-layer distillation (Jiao et al. 2020 §3.1,
    eq. 7–9, 11): Σ_m MSE(A_S^m, A_T^{g(m)}) + Σ_m MSE(H_S^m W_h, H_T^{g(m)}) +
    MSE(E_S W_e, E_T), each layer weight λ = 1, with the mapping in the module docstring.

    Args:
        student_hidden / teacher_hidden: L+1 tensors (B, T, H_S) / (B, T, H_T) each.
        student_scores / teacher_scores: L tensors (B, N, T, T) each.
        attention_mask: (B, T) 0/1.
        embedding_projection / hidden_projection: W_e, W_h (callables H_S → H_T); None =
            identity (then H_S must equal H_T).
        denominators: None (each term a mean), or ``{"tokens", "pairs"}``
            (`TinyBertObjective.counts`): the embedding and hidden terms summed over real
            tokens ÷ ``tokens``, the attention terms summed over (query, key) pairs ÷
            ``pairs`` (each unit's loss a mean over features or heads).

    Returns:
        (loss, {"embedding_loss", "hidden_loss", "attention_loss"}) — each the sum over its
        layers, detached.

    Raises:
        ValueError: layer counts that do not divide, or shapes that do not match.
    """
    ls, lt = len(student_scores), len(teacher_scores)
    if len(student_hidden) != ls + 1 or len(teacher_hidden) != lt + 1:
        raise InputError("hidden-state tuples must hold L + 1 tensors (embeddings first)")
    we = embedding_projection or (lambda x: x)
    wh = hidden_projection or (lambda x: x)
    red = "mean" if denominators is None else "sum"
    emb = hid = att = None
    for s, t in hidden_layer_map(lt, ls):
        if s == 0:
            emb = masked_mse(we(student_hidden[0]), teacher_hidden[0], attention_mask, red)
        else:
            term = masked_mse(wh(student_hidden[s]), teacher_hidden[t], attention_mask, red)
            hid = term if hid is None else hid + term
    for s, t in attention_layer_map(lt, ls):
        term = attention_score_mse(student_scores[s], teacher_scores[t], attention_mask, red)
        att = term if att is None else att + term
    if denominators is not None:
        emb, hid = emb / denominators["tokens"], hid / denominators["tokens"]
        att = att / denominators["pairs"]
    loss = emb + hid + att
    return loss, {
        "embedding_loss": emb.detach(),
        "hidden_loss": hid.detach(),
        "attention_loss": att.detach(),
    }


# --- the objectives the trainer optimises ---------------------------------------------------------

PROJECTION_FILE = "distill_projections.safetensors"


def _check_vocabularies(method: str, teacher: EncoderConfig, student: EncoderConfig) -> None:
    if teacher.vocab_size != student.vocab_size:
        raise InputError(
            f"teacher vocabulary ({teacher.vocab_size}) and student vocabulary "
            f"({student.vocab_size}) differ; {method} feeds both the same token "
            f"ids and compares them position by position"
        )


def build_projections(
    student: EncoderConfig, teacher_hidden_size: int, names: Sequence[str] = ("hidden", "embedding")
) -> nn.ModuleDict:
    """The learned projections student H_S → teacher H_T, one ``nn.Linear(H_S, H_T)`` per name
    (TinyBERT's W_h for the hidden states and W_e for the embedding output, Jiao et al. 2020
    §3.1 eq. 8 and 10; DistilBERT's cosine loss uses "hidden" only): weights N(0, σ²) with the
    student's ``initializer_range`` σ, biases 0. Each maps (B, T, H_S) → (B, T, H_T)."""
    projections = nn.ModuleDict(
        {n: nn.Linear(student.hidden_size, teacher_hidden_size) for n in names}
    )
    for p in projections.values():
        nn.init.normal_(p.weight, 0.0, student.initializer_range)
        nn.init.zeros_(p.bias)
    return projections


class DistillationObjective(nn.Module):
    """What both methods share: student + frozen teacher + optional learned projections
    student H → teacher H; ``save_pretrained`` writes the student and the projections.

    The teacher is deliberately not a submodule: the optimizer, the checkpoints and DDP see
    only the student and the projections; it is kept in eval mode with gradients off and moved
    to the batch's device on first use.

    Subclasses set ``method`` (the name in `OBJECTIVES`), ``student_heads`` (the heads a fresh
    student needs), ``masked_inputs`` (whether training inputs are MLM-masked),
    ``hyperparameters`` (their keyword arguments besides ``projection``), and implement
    ``check`` (a staticmethod raising ValueError for an incompatible pair), ``counts`` and
    ``forward``.

    Gradient accumulation: ``counts(batch)`` gives the units of each loss term in a batch; pass
    it to the `Trainer` as ``count_fn`` and call ``forward(batch, denominators)``: each term is
    then summed over its units and divided by ``denominators[term]``, so an accumulated step
    equals one merged batch (see `bertfamily.train.loop`).
    """

    method = ""
    student_heads: tuple[str, ...] = ()
    masked_inputs = False
    hyperparameters: tuple[str, ...] = ()

    def __init__(self, student: Model, teacher: Model, projections: Sequence[str] = ()) -> None:
        super().__init__()
        self.student = student
        self.projections = (
            build_projections(student.config, teacher.config.hidden_size, projections)
            if projections
            else None
        )
        teacher.eval()
        teacher.requires_grad_(False)
        self._teacher = [teacher]

    @staticmethod
    def check(
        teacher: EncoderConfig,
        student: EncoderConfig,
        *,
        teacher_heads: Sequence[str] = (),
        projection: bool = False,
    ) -> None:
        """Raise ValueError for a teacher/student pair this method cannot distil; the base class
        raises NotImplementedError (subclasses implement it)."""
        raise NotImplementedError

    def counts(self, batch: dict[str, torch.Tensor]) -> dict[str, int]:
        """The units of each loss term in ``batch`` (the `Trainer`'s ``count_fn``); the base
        class raises NotImplementedError."""
        raise NotImplementedError

    @property
    def teacher(self) -> Model:
        """The frozen teacher `Model` (not a submodule)."""
        return self._teacher[0]

    @property
    def config(self) -> EncoderConfig:
        """The student's config."""
        return self.student.config

    def _inputs(self, model: Model, batch: dict[str, torch.Tensor]) -> dict[str, Any]:
        types = batch.get("token_type_ids") if model.config.type_vocab_size else None
        return dict(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            token_type_ids=types,
        )

    def _teacher_on(self, device: torch.device) -> Model:
        teacher = self.teacher
        if next(teacher.parameters()).device != device:
            teacher.to(device)
        teacher.eval()
        return teacher

    def save_pretrained(self, path: str | Path) -> Path:
        """The student in the Hugging Face layout, plus the projections (if any) in
        ``distill_projections.safetensors``."""
        path = Path(path)
        self.student.save_pretrained(path)
        if self.projections is not None:
            state = {
                k: v.detach().cpu().contiguous() for k, v in self.projections.state_dict().items()
            }
            atomic_write(path / PROJECTION_FILE, lambda tmp: save_file(state, str(tmp)))
        return path


class DistilBertObjective(DistillationObjective):
    """DistilBERT (Sanh et al. 2019 §3); ``forward(batch) -> (loss, parts)`` with parts
    ``ce_loss``, ``mlm_loss``, ``cos_loss`` (`distilbert_loss`).

    Args:
        student / teacher: `Model`s, both with an MLM head.
        projection: learn W_h, student H → teacher H, for the cosine loss.
        temperature, alpha_ce, alpha_mlm, alpha_cos: `distilbert_loss` weights.

    Batch fields: input_ids, attention_mask (B, T) int64, optional token_type_ids (B, T),
    labels (B, T) int64 (the MLM term; -100 elsewhere).

    Raises:
        ValueError: an incompatible pair (`check`), a student without an MLM head, or a
            temperature <= 0.
    """

    method = "distilbert"
    student_heads = ("mlm",)
    masked_inputs = True
    hyperparameters = ("temperature", "alpha_ce", "alpha_mlm", "alpha_cos")

    def __init__(
        self,
        student: Model,
        teacher: Model,
        *,
        projection: bool = False,
        temperature: float = DISTILBERT_DEFAULTS["temperature"],
        alpha_ce: float = DISTILBERT_DEFAULTS["alpha_ce"],
        alpha_mlm: float = DISTILBERT_DEFAULTS["alpha_mlm"],
        alpha_cos: float = DISTILBERT_DEFAULTS["alpha_cos"],
    ) -> None:
        self.check(
            teacher.config, student.config, teacher_heads=teacher.heads, projection=projection
        )
        if student.mlm_head is None:
            raise InputError("the DistilBERT student needs an MLM head")
        if temperature <= 0:
            raise InputError(f"temperature must be > 0, got {temperature}")
        super().__init__(student, teacher, ["hidden"] if projection else [])
        self.weights = dict(
            temperature=temperature, alpha_ce=alpha_ce, alpha_mlm=alpha_mlm, alpha_cos=alpha_cos
        )

    @staticmethod
    def check(
        teacher: EncoderConfig,
        student: EncoderConfig,
        *,
        teacher_heads: Sequence[str] = (),
        projection: bool = False,
    ) -> None:
        """Raise ValueError unless the vocabularies agree, the teacher has an MLM head (soft
        targets) and the hidden sizes agree or a projection is learned (cosine loss)."""
        _check_vocabularies("distilbert", teacher, student)
        if "mlm" not in teacher_heads:
            raise InputError(
                "DistilBERT's soft targets need the teacher's MLM logits but the "
                "teacher has no MLM head; use method 'tinybert' (intermediate "
                "losses only) or give the teacher a trained MLM head"
            )
        if teacher.hidden_size != student.hidden_size and not projection:
            raise InputError(
                f"the cosine loss needs equal hidden sizes (teacher "
                f"{teacher.hidden_size}, student {student.hidden_size}); "
                f"configure a learned projection"
            )

    def counts(self, batch: dict[str, torch.Tensor]) -> dict[str, int]:
        """``tokens``: real tokens (soft-target and cosine terms); ``mlm``: labelled tokens
        (0 without labels or with α_mlm = 0)."""
        labels = batch.get("labels")
        mlm = int((labels != IGNORE_INDEX).sum()) if labels is not None else 0
        return {"tokens": real_tokens(batch), "mlm": mlm if self.weights["alpha_mlm"] else 0}

    def forward(
        self, batch: dict[str, torch.Tensor], denominators: dict[str, float] | None = None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Batch (see the class) → (loss, parts ``ce_loss``, ``mlm_loss``, ``cos_loss``); the
        teacher runs without gradients. ``denominators``: see `distilbert_loss`."""
        denominators = step_denominators(denominators)  # a Trainer step's
        teacher = self._teacher_on(batch["input_ids"].device)
        with torch.no_grad():
            t = teacher(**self._inputs(teacher, batch))
        s = self.student(**self._inputs(self.student, batch))
        h = s.last_hidden_state
        if self.projections is not None:
            h = self.projections["hidden"](h)
        return distilbert_loss(
            s.logits,
            t.logits,
            h,
            t.last_hidden_state,
            batch["attention_mask"],
            batch.get("labels"),
            **self.weights,
            denominators=denominators,
        )


class TinyBertObjective(DistillationObjective):
    """TinyBERT general distillation (Jiao et al. 2020 §3.1); ``forward(batch) -> (loss,
    parts)`` with parts ``embedding_loss``, ``hidden_loss``, ``attention_loss``
    (`tinybert_intermediate_loss`).

    Args:
        student / teacher: `Model`s (no head needed).
        projection: learn W_h and W_e, student H → teacher H; forced on when the hidden sizes
            differ.

    Batch fields: input_ids, attention_mask (B, T) int64, optional token_type_ids (B, T).

    Raises:
        ValueError: an incompatible pair (`check`).
    """

    method = "tinybert"
    student_heads = ()
    masked_inputs = False

    def __init__(self, student: Model, teacher: Model, *, projection: bool = False) -> None:
        if student.config.hidden_size != teacher.config.hidden_size:
            projection = True
        self.check(
            teacher.config, student.config, teacher_heads=teacher.heads, projection=projection
        )
        super().__init__(student, teacher, ["hidden", "embedding"] if projection else [])

    @staticmethod
    def check(
        teacher: EncoderConfig,
        student: EncoderConfig,
        *,
        teacher_heads: Sequence[str] = (),
        projection: bool = False,
    ) -> None:
        """Raise ValueError unless the vocabularies and head counts agree (attention scores
        are compared head by head) and teacher layers are a multiple of student layers; hidden
        sizes may differ (W_h, W_e)."""
        _check_vocabularies("tinybert", teacher, student)
        if teacher.num_attention_heads != student.num_attention_heads:
            raise InputError(
                f"TinyBERT compares attention scores head by head: teacher has "
                f"{teacher.num_attention_heads} heads, student "
                f"{student.num_attention_heads}"
            )
        layer_step(teacher.num_hidden_layers, student.num_hidden_layers)

    def counts(self, batch: dict[str, torch.Tensor]) -> dict[str, int]:
        """``tokens``: real tokens (embedding and hidden terms); ``pairs``: (real query, real
        key) pairs (attention terms)."""
        return {"tokens": real_tokens(batch), "pairs": real_token_pairs(batch)}

    def forward(
        self, batch: dict[str, torch.Tensor], denominators: dict[str, float] | None = None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Batch (see the class) → (loss, parts ``embedding_loss``, ``hidden_loss``,
        ``attention_loss``); the teacher runs without gradients. ``denominators``: see
        `tinybert_intermediate_loss`."""
        denominators = step_denominators(denominators)  # a Trainer step's
        teacher = self._teacher_on(batch["input_ids"].device)
        with torch.no_grad():
            t = teacher(
                **self._inputs(teacher, batch), output_hidden_states=True, output_attentions=True
            )
        s = self.student(
            **self._inputs(self.student, batch), output_hidden_states=True, output_attentions=True
        )
        p = self.projections
        return tinybert_intermediate_loss(
            s.hidden_states,
            t.hidden_states,
            s.attention_scores,
            t.attention_scores,
            batch["attention_mask"],
            embedding_projection=p["embedding"] if p is not None else None,
            hidden_projection=p["hidden"] if p is not None else None,
            denominators=denominators,
        )


TASK_STAGES = ("intermediate", "prediction")


# Task heads whose logits TinyBERT's prediction-layer loss compares: one distribution per
# sequence (B, C) or per token (B, T, C).
DISTILLABLE_TASKS = ("classify", "tokens")


class TinyBertTaskObjective(TinyBertObjective):
    """TinyBERT task distillation (Jiao et al. 2020 §3.2) for sequence classification (a
    classify head, logits (B, C)) or token classification (a tokens head, logits (B, T, C));
    ``forward(batch) -> (loss, parts)``.

    Stage "intermediate": `tinybert_intermediate_loss` (parts ``embedding_loss``,
    ``hidden_loss``, ``attention_loss``) on task inputs. Stage "prediction":
    ``soft_cross_entropy(student_logits, teacher_logits, temperature)`` (part
    ``prediction_loss``; eq. 10), per sequence, or per real token (attention_mask 1) for a
    tokens head. Set ``stage`` between the two runs. Teacher and student both need the same
    task head (one of `DISTILLABLE_TASKS`) with the same labels; the teacher is frozen and not
    a submodule.

    Raises:
        ValueError: an incompatible pair (`TinyBertObjective.check`), missing or different
            task heads, different label sets, an unknown stage, a temperature <= 0.
    """

    def __init__(
        self,
        student: Model,
        teacher: Model,
        *,
        stage: str = "intermediate",
        projection: bool = False,
        temperature: float = 1.0,
    ) -> None:
        for name, m in (("teacher", teacher), ("student", student)):
            if m.task not in DISTILLABLE_TASKS:
                raise InputError(
                    f"task distillation needs a {name} with a head of {DISTILLABLE_TASKS}; "
                    f"it has {m.heads or 'none'}"
                )
        if teacher.task != student.task:
            raise InputError(
                f"teacher ({teacher.task}) and student ({student.task}) task heads differ"
            )
        if teacher.config.label_names != student.config.label_names:
            raise InputError(
                f"teacher labels {teacher.config.label_names} and student labels "
                f"{student.config.label_names} differ"
            )
        if temperature <= 0:
            raise InputError(f"temperature must be > 0, got {temperature}")
        super().__init__(student, teacher, projection=projection)
        self.temperature = temperature
        self.stage = stage

    @property
    def stage(self) -> str:
        """ "intermediate" or "prediction"; setting any other value raises ValueError."""
        return self._stage

    @stage.setter
    def stage(self, value: str) -> None:
        if value not in TASK_STAGES:
            raise InputError(f"stage must be one of {TASK_STAGES}, got {value!r}")
        self._stage = value

    def counts(self, batch: dict[str, torch.Tensor]) -> dict[str, int]:
        """Stage "intermediate": `TinyBertObjective.counts`; stage "prediction":
        ``sequences`` (the rows of the batch), or for a tokens head ``tokens`` (real
        tokens)."""
        if self.stage == "intermediate":
            return super().counts(batch)
        if self.student.task == "tokens":
            return {"tokens": real_tokens(batch)}
        return {"sequences": int(batch["input_ids"].shape[0])}

    def forward(
        self, batch: dict[str, torch.Tensor], denominators: dict[str, float] | None = None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Batch → (loss, parts): the intermediate losses, or in stage "prediction" the soft
        cross-entropy of the student's logits against the teacher's (``prediction_loss``).
        ``denominators``: keys of `counts`; each term summed over its units and divided."""
        denominators = step_denominators(denominators)  # a Trainer step's
        if self.stage == "intermediate":
            return super().forward(batch, denominators)
        teacher = self._teacher_on(batch["input_ids"].device)
        with torch.no_grad():
            t = teacher(**self._inputs(teacher, batch)).logits
        s = self.student(**self._inputs(self.student, batch)).logits
        unit = "sequences"
        if self.student.task == "tokens":  # (B, T, C) → (real tokens, C)
            keep = batch["attention_mask"].bool()
            s, t, unit = s[keep], t[keep], "tokens"
        if denominators is None:
            loss = soft_cross_entropy(s, t, self.temperature)
        else:
            loss = soft_cross_entropy(s, t, self.temperature, "sum") / denominators[unit]
        return loss, {"prediction_loss": loss.detach()}


OBJECTIVES: dict[str, type[DistillationObjective]] = {
    "distilbert": DistilBertObjective,
    "tinybert": TinyBertObjective,
}
METHODS = tuple(OBJECTIVES)


def check_compatible(
    method: str,
    teacher: EncoderConfig,
    student: EncoderConfig,
    *,
    teacher_heads: Sequence[str] = (),
    projection: bool = False,
) -> None:
    """Raise ValueError when the pair cannot be distilled with ``method`` (one of `METHODS`):
    the ``check`` of its objective class.

    Raises:
        ValueError: an unknown method, or an incompatible pair.
    """
    if method not in OBJECTIVES:
        raise InputError(f"method must be one of {METHODS}, got {method!r}")
    OBJECTIVES[method].check(teacher, student, teacher_heads=teacher_heads, projection=projection)
