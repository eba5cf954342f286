"""Distillation recipes on the shared `Trainer`: DistilBERT and TinyBERT (SPEC §3).

- `init_student`: a student whose embeddings and layers are copies of chosen teacher layers
  (DistilBERT: every other layer, Sanh et al. 2019 §3 "Student initialization").
- `DistillationModel`: student + frozen teacher (eval mode, ``torch.no_grad``) + optional
  learned projections; ``forward(batch) -> (loss, parts)`` as the `Trainer` wants it.
- `distill`: corpus → packed instances → batches → `Trainer` (checkpoints, exact resume,
  time budget and torchrun come from the trainer).

Methods:

- ``"distilbert"``: `objectives.distillation.distilbert_loss` on masked inputs (dynamic
  token masking, 15 %, 80/10/10): soft targets from the teacher's MLM head at temperature T,
  the student's MLM loss, and the cosine loss on the last hidden states. Needs a teacher
  with an MLM head and the same vocabulary; equal hidden sizes unless ``projection="learned"``.
- ``"tinybert"``: general distillation (Jiao et al. 2020 §3.1–3.3) on unmasked text:
  `objectives.distillation.tinybert_intermediate_loss` (embeddings, hidden states through
  W_e / W_h, attention scores). Needs the same vocabulary and head count, and teacher layers
  a multiple of student layers. Task distillation (§3.3, second stage) is the same
  intermediate loss on task data followed by `objectives.distillation.soft_cross_entropy`
  between the student's and the teacher's task logits: `TaskDistillationModel` and
  `distill_task` (sequence classification, two stages on the shared `Trainer`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .config import EncoderConfig
from .model import Model
from .objectives.distillation import (DISTILBERT_DEFAULTS, distilbert_loss, layer_step,
                                      soft_cross_entropy, tinybert_intermediate_loss)

__all__ = ["METHODS", "PROJECTION_FILE", "init_student", "check_compatible",
           "DistillationModel", "DistillConfig", "distill", "STRUCTURE_FIELDS",
           "TASK_STAGES", "TaskDistillationModel", "distill_task"]

logger = logging.getLogger(__name__)

METHODS = ("distilbert", "tinybert")
PROJECTION_FILE = "distill_projections.safetensors"
# Fields a student preset contributes to a layer-copied student (sizes come from the teacher).
STRUCTURE_FIELDS = ("model_type", "type_vocab_size", "use_pooler", "pair_head")


# --- student initialisation ------------------------------------------------------------------

def init_student(teacher: Model, layers: Sequence[int], *, preset: str | None = None,
                 heads: Sequence[str] | None = None, fold_token_types: bool = True) -> Model:
    """A student with len(layers) layers copied from the teacher (Sanh et al. 2019 §3).

    The student config is the teacher's with ``num_hidden_layers = len(layers)``; a
    ``preset`` contributes only its structure (`STRUCTURE_FIELDS`: model type, segment table,
    pooler, pair head; e.g. "distilbert-base": no token types, no pooler), never sizes.
    Copied exactly: token and position embeddings, the embedding norm (and ALBERT's E→H
    projection), each chosen layer, the pooler and heads both have. When the student has no
    segment table but the teacher has one, the teacher's segment row 0 (what every
    single-segment input adds) is folded into the position table when ``fold_token_types``
    (student position = teacher position + segment[0], so the embedding outputs of both agree
    on single-segment inputs), else dropped as DistilBERT's extraction did.

    Args:
        teacher: the teacher `Model`.
        layers: 0-based teacher layer steps, strictly increasing (e.g. 0, 2, 4).
        preset: optional preset name for the structure fields.
        heads: student heads; None = the teacher's heads the student structure allows.
        fold_token_types: see above.

    Returns:
        The student `Model` (train mode).

    Raises:
        ValueError: empty, repeated, unsorted or out-of-range layers; an unknown preset.
    """
    from .build import build_model

    layers = [int(i) for i in layers]
    L = teacher.config.num_hidden_layers
    if not layers or any(i < 0 or i >= L for i in layers):
        raise ValueError(f"layers must be non-empty and lie in [0, {L}); got {layers}")
    if sorted(set(layers)) != layers:
        raise ValueError(f"layers must be strictly increasing, got {layers}")
    config = teacher.config.replace(num_hidden_layers=len(layers),
                                    num_hidden_groups=len(layers), inner_group_num=1)
    if preset is not None:
        from .presets import PRESETS

        if preset not in PRESETS:
            raise ValueError(f"unknown preset {preset!r}; valid: {', '.join(PRESETS)}")
        config = config.replace(**{k: v for k, v in PRESETS[preset].items()
                                   if k in STRUCTURE_FIELDS})
    if config.pair_head and not config.use_pooler:
        config = config.replace(pair_head=None)
    if heads is None:
        heads = [h for h in teacher.heads if h != "pair" or config.pair_head]
    student = build_model(config, heads=heads)

    t, s = teacher.state_dict(), student.state_dict()
    schedule = teacher.config.layer_schedule
    new: dict[str, torch.Tensor] = {}
    for key in s:
        if key.startswith("encoder.layers."):
            rest = key.split(".", 3)
            src = f"encoder.layers.{schedule[layers[int(rest[2])]]}.{rest[3]}"
        else:
            src = key
        if src in t and t[src].shape == s[key].shape:
            new[key] = t[src].clone()
    seg = "encoder.embeddings.segment.weight"
    pos = "encoder.embeddings.position.weight"
    if fold_token_types and seg in t and seg not in s and pos in new:
        new[pos] = new[pos] + t[seg][0]
    missing = [k for k in s if k not in new]
    if missing:
        logger.warning("student weights not in the teacher (freshly initialised): %s",
                       ", ".join(missing))
    student.load_state_dict(new, strict=False)
    return student.train()


# --- compatibility ---------------------------------------------------------------------------

def check_compatible(method: str, teacher: EncoderConfig, student: EncoderConfig, *,
                     teacher_heads: Sequence[str] = (), projection: bool = False) -> None:
    """Raise ValueError when the pair cannot be distilled with ``method``.

    Both methods feed the same token ids to teacher and student: the vocabularies must agree.
    DistilBERT: the teacher needs an MLM head (soft targets); the cosine loss needs equal
    hidden sizes unless a projection is learned. TinyBERT: equal head counts (attention-score
    matrices are compared head by head) and teacher layers a multiple of student layers;
    hidden sizes may differ (W_h, W_e).
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if teacher.vocab_size != student.vocab_size:
        raise ValueError(f"teacher vocabulary ({teacher.vocab_size}) and student vocabulary "
                         f"({student.vocab_size}) differ; {method} feeds both the same token "
                         f"ids and compares them position by position")
    if method == "distilbert":
        if "mlm" not in teacher_heads:
            raise ValueError("DistilBERT's soft targets need the teacher's MLM logits but the "
                             "teacher has no MLM head; use method 'tinybert' (intermediate "
                             "losses only) or give the teacher a trained MLM head")
        if teacher.hidden_size != student.hidden_size and not projection:
            raise ValueError(f"the cosine loss needs equal hidden sizes (teacher "
                             f"{teacher.hidden_size}, student {student.hidden_size}); "
                             f"configure a learned projection")
    else:
        if teacher.num_attention_heads != student.num_attention_heads:
            raise ValueError(f"TinyBERT compares attention scores head by head: teacher has "
                             f"{teacher.num_attention_heads} heads, student "
                             f"{student.num_attention_heads}")
        layer_step(teacher.num_hidden_layers, student.num_hidden_layers)


# --- the model the trainer optimises -----------------------------------------------------------

class DistillationModel(nn.Module):
    """Student + frozen teacher + projections; ``forward(batch) -> (loss, parts)``.

    The teacher is deliberately not a submodule: the optimizer, the checkpoints and DDP see
    only the student and the projections; it is kept in eval mode with gradients off and moved
    to the batch's device on first use.

    Args:
        student / teacher: `Model`s (DistilBERT: both with an MLM head).
        method: "distilbert" | "tinybert".
        projection: learn W_h (and, TinyBERT, W_e), student H → teacher H; forced on for
            TinyBERT when the hidden sizes differ.
        temperature, alpha_ce, alpha_mlm, alpha_cos: DistilBERT weights (`distilbert_loss`).

    Batch fields: input_ids, attention_mask (B, T), optional token_type_ids, labels (B, T)
    (DistilBERT's MLM term).

    Raises:
        ValueError: an incompatible pair (`check_compatible`).
    """

    def __init__(self, student: Model, teacher: Model, method: str, *,
                 projection: bool = False, temperature: float = 2.0, alpha_ce: float = 5.0,
                 alpha_mlm: float = 2.0, alpha_cos: float = 1.0) -> None:
        super().__init__()
        hs, ht = student.config.hidden_size, teacher.config.hidden_size
        if method == "tinybert" and hs != ht:
            projection = True
        check_compatible(method, teacher.config, student.config, teacher_heads=teacher.heads,
                         projection=projection)
        if method == "distilbert" and student.mlm_head is None:
            raise ValueError("the DistilBERT student needs an MLM head")
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.student, self.method = student, method
        self.weights = dict(temperature=temperature, alpha_ce=alpha_ce, alpha_mlm=alpha_mlm,
                            alpha_cos=alpha_cos)
        self.projections = None
        if projection:
            names = ["hidden"] + (["embedding"] if method == "tinybert" else [])
            self.projections = nn.ModuleDict({n: nn.Linear(hs, ht) for n in names})
            for p in self.projections.values():
                nn.init.normal_(p.weight, 0.0, student.config.initializer_range)
                nn.init.zeros_(p.bias)
        teacher.eval()
        teacher.requires_grad_(False)
        self._teacher = [teacher]

    @property
    def teacher(self) -> Model:
        return self._teacher[0]

    @property
    def config(self) -> EncoderConfig:
        return self.student.config

    def _inputs(self, model: Model, batch: dict[str, torch.Tensor]) -> dict[str, Any]:
        types = batch.get("token_type_ids") if model.config.type_vocab_size else None
        return dict(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                    token_type_ids=types)

    def forward(self, batch: dict[str, torch.Tensor]):
        tiny = self.method == "tinybert"
        teacher = self.teacher
        device = batch["input_ids"].device
        if next(teacher.parameters()).device != device:
            teacher.to(device)
        teacher.eval()
        with torch.no_grad():
            t = teacher(**self._inputs(teacher, batch), output_hidden_states=tiny,
                        output_attentions=tiny)
        s = self.student(**self._inputs(self.student, batch), output_hidden_states=tiny,
                         output_attentions=tiny)
        mask = batch["attention_mask"]
        if tiny:
            p = self.projections
            return tinybert_intermediate_loss(
                s.hidden_states, t.hidden_states, s.attention_scores, t.attention_scores, mask,
                embedding_projection=p["embedding"] if p is not None else None,
                hidden_projection=p["hidden"] if p is not None else None)
        h = s.last_hidden_state
        if self.projections is not None:
            h = self.projections["hidden"](h)
        return distilbert_loss(s.logits, t.logits, h, t.last_hidden_state, mask,
                               batch.get("labels"), **self.weights)

    def save_pretrained(self, path: str | Path) -> Path:
        """The student in the Hugging Face layout, plus the projections (if any) in
        ``distill_projections.safetensors``."""
        from safetensors.torch import save_file

        from .files import atomic_write

        path = Path(path)
        self.student.save_pretrained(path)
        if self.projections is not None:
            state = {k: v.detach().cpu().contiguous()
                     for k, v in self.projections.state_dict().items()}
            atomic_write(path / PROJECTION_FILE, lambda tmp: save_file(state, str(tmp)))
        return path


# --- the driver --------------------------------------------------------------------------------

@dataclass
class DistillConfig:
    """What to distil (the optimisation lives in `TrainConfig`).

    Attributes:
        teacher: teacher model directory (its tokenizer is used for both models).
        method: "distilbert" | "tinybert".
        corpus: corpus files (`bertfamily.corpora.read_documents`).
        student: a model directory or a preset name (sizes from ``student_overrides``;
            vocabulary, padding id and position table sized from the teacher/tokenizer).
        student_overrides: EncoderConfig fields for a preset student.
        projection: learn a projection student H → teacher H (TinyBERT: automatic when sizes
            differ).
        temperature, alpha_ce, alpha_mlm, alpha_cos: DistilBERT (defaults: Sanh et al. §3).
        max_length: tokens per packed instance, specials included.
        eval_documents / eval_batches: held-out documents and batches for the eval loss.
        split_sentences / text_field: corpus reading.
    """

    teacher: str | Path
    method: str
    corpus: Sequence[str | Path]
    student: str | Path = "tinybert-4l"
    student_overrides: dict[str, Any] = field(default_factory=dict)
    projection: bool = False
    temperature: float = DISTILBERT_DEFAULTS["temperature"]
    alpha_ce: float = DISTILBERT_DEFAULTS["alpha_ce"]
    alpha_mlm: float = DISTILBERT_DEFAULTS["alpha_mlm"]
    alpha_cos: float = DISTILBERT_DEFAULTS["alpha_cos"]
    max_length: int = 128
    eval_documents: int = 20
    eval_batches: int = 10
    split_sentences: bool = False
    text_field: str = "text"


def _load_student(cfg: DistillConfig, teacher: Model, tok) -> Model:
    from .build import build_model

    heads = ["mlm"] if cfg.method == "distilbert" else []
    path = Path(str(cfg.student))
    if path.is_dir():
        if heads:
            from .train.pretrain import load_for_continued_pretraining

            return load_for_continued_pretraining(path, heads)[0]
        from .pretrained import from_pretrained

        return from_pretrained(path).train()
    config = EncoderConfig.from_preset(str(cfg.student), **cfg.student_overrides)
    config = config.replace(
        vocab_size=teacher.config.vocab_size, pad_token_id=tok.pad_token_id,
        max_position_embeddings=max(config.max_position_embeddings,
                                    cfg.max_length + config.position_offset))
    return build_model(config, heads=heads).train()


@torch.no_grad()
def evaluate_distillation(model: DistillationModel, batches) -> dict[str, float]:
    """Mean distillation loss and parts over fixed held-out batches (names as in training)."""
    device = next(model.parameters()).device
    sums: dict[str, float] = {}
    for batch in batches:
        loss, parts = model({k: v.to(device) for k, v in batch.items()})
        for k, v in {"loss": loss, **parts}.items():
            sums[k] = sums.get(k, 0.0) + float(v) / len(batches)
    return sums


def distill(cfg: DistillConfig, train) -> dict[str, Any]:
    """Distil ``cfg.teacher`` into a student with the shared `Trainer`; alone or under torchrun.

    Writes ``output_dir/model`` (student + tokenizer + projections), ``checkpoint.pt``,
    ``metrics.jsonl`` (components ``ce_loss``/``mlm_loss``/``cos_loss`` or
    ``embedding_loss``/``hidden_loss``/``attention_loss``, and their ``eval_`` versions) and
    ``summary.json``.

    Returns:
        The `Trainer.train` summary plus ``method``, ``parameters`` (student trunk),
        ``teacher_parameters`` and ``instances``.

    Raises:
        ValueError: an incompatible teacher/student pair, a teacher without what the method
            needs, or a corpus too small.
    """
    import dataclasses

    from .pretrained import from_pretrained
    from .corpora import read_documents
    from .objectives.instances import SpecialIds
    from .objectives.masking import MaskingConfig
    from .objectives.pretraining import MLMCollator, build_instances, tokenize_documents
    from .tokenization import load_tokenizer
    from .train.data import IndexedBatches
    from .train.distributed import init_distributed
    from .train.loop import Trainer
    from .train.pretrain import finish_run, fixed_eval_batches, split_documents

    if cfg.method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {cfg.method!r}")
    dist = init_distributed(train.device)
    tok = load_tokenizer(cfg.teacher)
    if tok.mask_token_id is None or tok.pad_token_id is None:
        raise ValueError(f"tokenizer of {cfg.teacher} has no mask or pad token")
    teacher = from_pretrained(cfg.teacher)
    student = _load_student(cfg, teacher, tok)
    model = DistillationModel(student, teacher, cfg.method, projection=cfg.projection,
                              temperature=cfg.temperature, alpha_ce=cfg.alpha_ce,
                              alpha_mlm=cfg.alpha_mlm, alpha_cos=cfg.alpha_cos)
    limit = min(teacher.config.max_sequence_length, student.config.max_sequence_length)
    if cfg.max_length > limit:
        raise ValueError(f"max_length {cfg.max_length} exceeds the models' limit of {limit}")

    docs = [d for path in cfg.corpus for d in read_documents(
        path, text_field=cfg.text_field, split=cfg.split_sentences)]
    train_docs, eval_docs = split_documents(docs, cfg.eval_documents, train.seed)
    special = SpecialIds(cls=tok.cls_token_id, sep=tok.sep_token_id)
    seg_train = tokenize_documents(train_docs, tok)
    seg_eval = tokenize_documents(eval_docs, tok)
    train_inst = build_instances(seg_train, "packed", cfg.max_length, special, train.seed)
    eval_inst = build_instances(seg_eval, "packed", cfg.max_length, special, train.seed + 1)
    # DistilBERT trains on masked inputs (MLM); TinyBERT's general distillation on plain text:
    # a masking that leaves every chosen token unchanged keeps the inputs intact.
    masking = (MaskingConfig() if cfg.method == "distilbert"
               else MaskingConfig(mask_prob=0.0, random_prob=0.0))
    common = dict(vocab_size=tok.vocab_size, mask_token_id=tok.mask_token_id,
                  special_ids=tok.all_special_ids)
    collate = MLMCollator(masking, pad_token_id=tok.pad_token_id, **common)
    source = IndexedBatches(train_inst, train.batch_size, collate, seed=train.seed,
                            rank=dist.rank, world_size=dist.world_size)
    eval_batches = fixed_eval_batches(eval_inst, masking, collate, train.batch_size,
                                      cfg.eval_batches, train.seed + 2, **common)
    logger.info("distilling (%s) %d-parameter teacher into %d-parameter student on %d/%d "
                "train/eval instances", cfg.method, teacher.num_parameters(),
                student.num_parameters(), len(train_inst), len(eval_inst))
    # The student's pooler (and, for TinyBERT, any MLM head) gets no gradient.
    train = dataclasses.replace(train, find_unused_parameters=True)
    trainer = Trainer(model, lambda m, b: m(b), source, train,
                      eval_fn=lambda m: evaluate_distillation(m, eval_batches), dist=dist)
    summary = trainer.train()
    summary.update(method=cfg.method, parameters=student.num_parameters(),
                   teacher_parameters=teacher.num_parameters(),
                   instances={"train": len(train_inst), "eval": len(eval_inst)},
                   world_size=dist.world_size)
    if dist.is_main:
        finish_run(train.output_dir, tok, summary)
    return summary


# --- TinyBERT task distillation (Jiao et al. 2020 §3.2, second stage) ---------------------------

TASK_STAGES = ("intermediate", "prediction")


class TaskDistillationModel(DistillationModel):
    """TinyBERT task distillation for sequence classification; ``forward(batch) -> (loss,
    parts)``.

    Stage "intermediate": `tinybert_intermediate_loss` (parts ``embedding_loss``,
    ``hidden_loss``, ``attention_loss``) on task inputs. Stage "prediction":
    ``soft_cross_entropy(student_logits, teacher_logits, temperature)`` (part
    ``prediction_loss``). Set ``stage`` between the two runs. Teacher and student both need a
    classify head with the same labels; the teacher is frozen and not a submodule.

    Raises:
        ValueError: an incompatible pair (`check_compatible` "tinybert"), missing classify
            heads, different label sets, an unknown stage.
    """

    def __init__(self, student: Model, teacher: Model, *, stage: str = "intermediate",
                 projection: bool = False, temperature: float = 1.0) -> None:
        for name, m in (("teacher", teacher), ("student", student)):
            if m.task != "classify":
                raise ValueError(f"task distillation needs a {name} with a classify head; "
                                 f"it has {m.heads or 'none'}")
        if teacher.config.label_names != student.config.label_names:
            raise ValueError(f"teacher labels {teacher.config.label_names} and student labels "
                             f"{student.config.label_names} differ")
        super().__init__(student, teacher, "tinybert", projection=projection,
                         temperature=temperature)
        self.stage = stage

    @property
    def stage(self) -> str:
        return self._stage

    @stage.setter
    def stage(self, value: str) -> None:
        if value not in TASK_STAGES:
            raise ValueError(f"stage must be one of {TASK_STAGES}, got {value!r}")
        self._stage = value

    def forward(self, batch: dict[str, torch.Tensor]):
        if self.stage == "intermediate":
            return super().forward(batch)
        teacher = self.teacher
        if next(teacher.parameters()).device != batch["input_ids"].device:
            teacher.to(batch["input_ids"].device)
        teacher.eval()
        with torch.no_grad():
            t = teacher(**self._inputs(teacher, batch)).logits
        s = self.student(**self._inputs(self.student, batch)).logits
        loss = soft_cross_entropy(s, t, self.weights["temperature"])
        return loss, {"prediction_loss": loss.detach()}


def _task_student(student, teacher: Model, tok, label_names, overrides: dict[str, Any],
                  max_length: int) -> Model:
    """A classify student: a directory, teacher layers (ints; fresh head) or a preset name."""
    from .build import build_model
    from .pretrained import from_pretrained

    if not isinstance(student, (str, Path)):
        model = init_student(teacher, list(student), heads=["classify"])
        fresh = build_model(model.config, heads=["classify"])
        model.task_head.load_state_dict(fresh.task_head.state_dict())
        return model.train()
    if Path(str(student)).is_dir():
        return from_pretrained(student, heads=["classify"], new_heads=True,
                               label_names=label_names).train()
    config = EncoderConfig.from_preset(str(student), **overrides)
    config = config.replace(
        vocab_size=teacher.config.vocab_size, pad_token_id=tok.pad_token_id,
        label_names=tuple(label_names),
        max_position_embeddings=max(config.max_position_embeddings,
                                    max_length + config.position_offset))
    return build_model(config, heads=["classify"]).train()


def distill_task(teacher: str | Path, train_file: str | Path, output_dir: str | Path, *,
                 student: str | Path | Sequence[int] | None = None,
                 student_overrides: dict[str, Any] | None = None,
                 intermediate_steps: int = 100, prediction_steps: int = 100,
                 text_column: str = "text", label_column: str = "label",
                 max_length: int = 128, batch_size: int = 32, temperature: float = 1.0,
                 projection: bool = False, **train_config: Any) -> dict[str, Any]:
    """TinyBERT task distillation of a sequence classifier (Jiao et al. 2020 §3.2).

    Stage 1 ("intermediate", ``intermediate_steps``) then stage 2 ("prediction",
    ``prediction_steps``), each a `Trainer` run in ``output_dir/<stage>`` (its metrics.jsonl
    holds the loss parts); the final student + tokenizer go to ``output_dir/model``.

    Args:
        teacher: a model directory with a classify head and a tokenizer (fine-tuned teacher).
        train_file: classification CSV/TSV/JSONL (`finetune.run.TaskData`); its labels must be
            the teacher's label_names.
        student: a model directory, a preset name (sizes from ``student_overrides``), or teacher
            layers to copy (`init_student`, fresh classify head); None = every other layer.
        temperature: soft cross-entropy temperature (stage 2).
        train_config: `TrainConfig` fields shared by both stages (learning_rate, device, ...).

    Returns:
        {"intermediate": summary, "prediction": summary, "labels": [...], "parameters": n}.

    Raises:
        ValueError: incompatible pair, a teacher without a classify head, unknown labels.
    """
    import dataclasses

    from .pretrained import from_pretrained
    from .finetune.run import FinetuneOptions, TaskData, pad_batch
    from .tokenization import load_tokenizer
    from .train import IndexedBatches, TrainConfig, Trainer
    from .train.pretrain import finish_run

    out = Path(output_dir)
    tok = load_tokenizer(teacher)
    teacher_model = from_pretrained(teacher)
    if teacher_model.task != "classify":
        raise ValueError(f"the teacher {teacher} has no classify head (heads: "
                         f"{teacher_model.heads or 'none'}); fine-tune it first")
    labels = teacher_model.config.label_names
    opts = FinetuneOptions(text_column=text_column, label_column=label_column,
                           max_length=max_length)
    rows = TaskData("classify", tok, opts, label_names=labels).load(train_file)
    if student is None:
        student = list(range(1, teacher_model.config.num_hidden_layers, 2))
    student_model = _task_student(student, teacher_model, tok, labels,
                                  student_overrides or {}, max_length)
    model = TaskDistillationModel(student_model, teacher_model, projection=projection,
                                  temperature=temperature)
    pad = tok.pad_token_id or 0
    source = IndexedBatches(rows, min(batch_size, len(rows)),
                            lambda rs, rng: pad_batch(rs, pad))
    base = dict(batch_size=min(batch_size, len(rows)), find_unused_parameters=True)
    result: dict[str, Any] = {"labels": list(labels),
                              "parameters": student_model.num_parameters()}
    for stage, steps in (("intermediate", intermediate_steps), ("prediction", prediction_steps)):
        if steps <= 0:
            continue
        model.stage = stage
        cfg = TrainConfig(output_dir=out / stage, max_steps=steps, **{**base, **train_config})
        cfg = dataclasses.replace(cfg, find_unused_parameters=True)
        logger.info("task distillation, stage %s: %d steps on %d examples", stage, steps,
                    len(rows))
        result[stage] = Trainer(model, lambda m, b: m(b), source, cfg).train()
    model.save_pretrained(out / "model")
    finish_run(out, tok, result)
    return result
