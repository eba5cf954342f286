"""Distillation recipes on the shared `Trainer`: DistilBERT and TinyBERT.

- `init_student`: a student whose embeddings and layers are copies of chosen teacher layers
  (DistilBERT: every other layer, Sanh et al. 2019 §3 "Student initialization").
- `distill`: general distillation, corpus → packed instances → batches → `Trainer`
  (checkpoints, exact resume, time budget and torchrun come from the trainer). The method name
  picks the objective class (`bertfamily.objectives.distillation.OBJECTIVES`):
  ``"distilbert"`` (`DistilBertObjective`, on masked inputs: dynamic token masking, 15 %,
  80/10/10) or ``"tinybert"`` (`TinyBertObjective`, Jiao et al. 2020 §3.1, on unmasked text).
- `distill_task`: TinyBERT task distillation of a sequence classifier (Jiao et al. 2020 §3.2,
  `TinyBertTaskObjective`): the intermediate loss on task data, then soft cross-entropy on the
  teacher's task logits, two `Trainer` runs; optionally on the training set grown by TinyBERT's
  data augmentation (`bertfamily.tasks.augment`, §3.2 and Algorithm 1).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..build import build_model
from ..config import EncoderConfig
from ..data.augment import AugmentConfig, Augmenter, AugmentStats
from ..data.batching import IndexedBatches
from ..data.tables import read_table
from ..data.task_data import HEAD_OF_TASK, TaskData, TaskOptions, pad_batch
from ..errors import InputError
from ..files import write_text_atomic
from ..model import Model
from ..objectives.distillation import (
    DISTILBERT_DEFAULTS,
    METHODS,
    OBJECTIVES,
    DistillationObjective,
    TinyBertTaskObjective,
)
from ..objectives.masking import MaskingConfig
from ..presets import PRESETS
from ..pretrained import from_pretrained
from ..tokenization.tokenizer import load_tokenizer
from ..train.distributed import init_distributed
from ..train.loop import TrainConfig, Trainer
from ..train.rundir import locks_run_directory, seed_all
from .common import config_for_tokenizer, finish_run, mlm_data, save_pretrained, train_config
from .pretrain import load_for_continued_pretraining

__all__ = [
    "STRUCTURE_FIELDS",
    "init_student",
    "DistillConfig",
    "distill",
    "evaluate_distillation",
    "TaskDistillConfig",
    "distill_task",
]

logger = logging.getLogger(__name__)

# Fields a student preset contributes to a layer-copied student (sizes come from the teacher):
# its checkpoint family and what that family fixes (segments, pooler, pair head, and how its
# task heads read a sequence), so that the student saves as that family's classes.
STRUCTURE_FIELDS = (
    "model_type",
    "type_vocab_size",
    "use_pooler",
    "pair_head",
    "classifier_pooling",
    "choice_pooling",
    "classifier_activation",
)


# --- student initialisation ------------------------------------------------------------------


def init_student(
    teacher: Model,
    layers: Sequence[int],
    *,
    preset: str | None = None,
    heads: Sequence[str] | None = None,
    fold_token_types: bool = True,
) -> Model:
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
    layers = [int(i) for i in layers]
    L = teacher.config.num_hidden_layers
    if not layers or any(i < 0 or i >= L for i in layers):
        raise InputError(f"layers must be non-empty and lie in [0, {L}); got {layers}")
    if sorted(set(layers)) != layers:
        raise InputError(f"layers must be strictly increasing, got {layers}")
    config = teacher.config.replace(
        num_hidden_layers=len(layers), num_hidden_groups=len(layers), inner_group_num=1
    )
    if preset is not None:
        if preset not in PRESETS:
            raise InputError(f"unknown preset {preset!r}; valid: {', '.join(PRESETS)}")
        config = config.replace(
            **{k: v for k, v in PRESETS[preset].items() if k in STRUCTURE_FIELDS}
        )
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
        logger.warning(
            "student weights not in the teacher (freshly initialised): %s", ", ".join(missing)
        )
    student.load_state_dict(new, strict=False)
    return student.train()


# --- general distillation ---------------------------------------------------------------------


@dataclass
class DistillConfig:
    """What to distil (the optimisation lives in `TrainConfig`).

    Attributes:
        teacher: teacher model directory (its tokenizer is used for both models).
        method: "distilbert" | "tinybert" (`METHODS`): picks the objective class.
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


def _load_student(cfg: DistillConfig, heads: Sequence[str], teacher: Model, tok) -> Model:
    path = Path(str(cfg.student))
    if path.is_dir():
        if heads:
            return load_for_continued_pretraining(path, heads)[0]
        return from_pretrained(path).train()
    config = EncoderConfig.from_preset(str(cfg.student), **cfg.student_overrides)
    config = config_for_tokenizer(config, tok, cfg.max_length, vocab_size=teacher.config.vocab_size)
    return build_model(config, heads=list(heads)).train()


@torch.no_grad()
def evaluate_distillation(model: DistillationObjective, batches) -> dict[str, float]:
    """Distillation loss and parts over fixed held-out batches (names as in training), each
    term per unit over all the batches (as one merged batch, like a training step).

    Args:
        model: a distillation objective; batches: dicts of (B, T) int64 tensors.

    Returns:
        {"loss": float, one float per part}.
    """
    device = next(model.parameters()).device
    totals: dict[str, int] = {}
    for batch in batches:
        for k, n in model.counts(batch).items():
            totals[k] = totals.get(k, 0) + n
    denominators = {k: float(max(n, 1)) for k, n in totals.items()}
    sums: dict[str, float] = {}
    for batch in batches:
        loss, parts = model({k: v.to(device) for k, v in batch.items()}, denominators)
        for k, v in {"loss": loss, **parts}.items():
            sums[k] = sums.get(k, 0.0) + float(v)
    return sums


def distill(
    cfg: DistillConfig, train: TrainConfig | None = None, **train_fields: Any
) -> dict[str, Any]:
    """Distil ``cfg.teacher`` into a student with the shared `Trainer`; alone or under torchrun.

    Writes ``output_dir/model`` (student + tokenizer + projections), ``checkpoint.pt``,
    ``metrics.jsonl`` (components ``ce_loss``/``mlm_loss``/``cos_loss`` or
    ``embedding_loss``/``hidden_loss``/``attention_loss``, and their ``eval_`` versions) and
    ``summary.json``.

    Returns:
        The `Trainer.train` summary plus ``method``, ``parameters`` (student trunk),
        ``teacher_parameters`` and ``instances``.

    Raises:
        ValueError: an unknown method, an incompatible teacher/student pair, a teacher without
            what the method needs, or a corpus too small.

    ``train``: the run's `TrainConfig`; or pass its fields as keywords instead
    (``output_dir=..., max_steps=...``): they start from ``TRAIN_DEFAULTS["distill"]``, the
    command line's defaults, so the same arguments make the same run.
    """
    return _distill(cfg, train_config("distill", train, **train_fields))


@locks_run_directory
def _distill(cfg: DistillConfig, train: TrainConfig) -> dict[str, Any]:
    """`distill` with its `TrainConfig` resolved, under the run directory's lock."""
    if cfg.method not in OBJECTIVES:
        raise InputError(f"method must be one of {METHODS}, got {cfg.method!r}")
    objective = OBJECTIVES[cfg.method]
    dist = init_distributed(train.device)
    tok = load_tokenizer(cfg.teacher)
    if tok.mask_token_id is None or tok.pad_token_id is None:
        raise InputError(f"tokenizer of {cfg.teacher} has no mask or pad token")
    teacher = from_pretrained(cfg.teacher)
    seed_all(train.seed)  # a new student (or its fresh heads) depends on the seed alone
    student = _load_student(cfg, objective.student_heads, teacher, tok)
    model = objective(
        student,
        teacher,
        projection=cfg.projection,
        **{k: getattr(cfg, k) for k in objective.hyperparameters},
    )
    limit = min(teacher.config.max_sequence_length, student.config.max_sequence_length)
    if cfg.max_length > limit:
        raise InputError(f"max_length {cfg.max_length} exceeds the models' limit of {limit}")

    # DistilBERT trains on masked inputs (MLM); TinyBERT's general distillation on plain text:
    # a masking that leaves every chosen token unchanged keeps the inputs intact.
    masking = (
        MaskingConfig()
        if objective.masked_inputs
        else MaskingConfig(mask_prob=0.0, random_prob=0.0)
    )
    data = mlm_data(
        cfg.corpus,
        tok,
        train,
        dist,
        kind="packed",
        max_length=cfg.max_length,
        masking=masking,
        eval_documents=cfg.eval_documents,
        eval_batches=cfg.eval_batches,
        split_sentences=cfg.split_sentences,
        text_field=cfg.text_field,
    )
    n_train, n_eval = len(data.train_instances), len(data.eval_instances)
    logger.info(
        "distilling (%s) %d-parameter teacher into %d-parameter student on %d/%d "
        "train/eval instances",
        cfg.method,
        teacher.num_parameters(),
        student.num_parameters(),
        n_train,
        n_eval,
    )
    # The student's pooler (and, for TinyBERT, any MLM head) gets no gradient.
    train = dataclasses.replace(train, find_unused_parameters=True)
    trainer = Trainer(
        model,
        lambda m, b, denominators: m(b, denominators),
        data.source,
        train,
        eval_fn=lambda m: evaluate_distillation(m, data.eval_batches),
        dist=dist,
        save_fn=save_pretrained,
        count_fn=model.counts,  # each term normalised over the whole accumulated step
    )
    summary = trainer.train()
    summary.update(
        method=cfg.method,
        parameters=student.num_parameters(),
        teacher_parameters=teacher.num_parameters(),
        instances={"train": n_train, "eval": n_eval},
        world_size=dist.world_size,
    )
    if dist.is_main:
        finish_run(train.output_dir, tok, summary)
    return summary


# --- TinyBERT task distillation (Jiao et al. 2020 §3.2, second stage) ---------------------------


@dataclass
class TaskDistillConfig:
    """What to distil in TinyBERT task distillation (the optimisation lives in `TrainConfig`).

    Attributes:
        teacher: a model directory with a classify (or, for "ner", a tokens) head and a
            tokenizer (fine-tuned teacher).
        train_file: classification CSV/TSV/JSONL, or for "ner" a CoNLL file
            (`bertfamily.tasks.encode.TaskData`); its labels must be the teacher's label_names.
        student: a model directory, a preset name (sizes from ``student_overrides``), or teacher
            layers to copy (`init_student`, fresh classify head); None = every other layer.
        student_overrides: EncoderConfig fields for a preset student.
        task: "classify" (sequence classification) or "ner" (token classification: the
            prediction-layer loss per real token).
        intermediate_steps / prediction_steps: optimizer steps of stage 1 / stage 2 (0 skips
            the stage).
        text_column / label_column / max_length: reading and encoding the table.
        temperature: soft cross-entropy temperature (stage 2).
        projection: learn W_h, W_e (automatic when hidden sizes differ).
        augment: TinyBERT data augmentation of the training set (None: the set as it is);
            both stages then train on the originals plus ``augment.samples`` variants each.
        augment_model: the model directory whose MLM head predicts replacements for
            single-piece words and whose embedding table gives neighbours for longer words
            (None: the teacher, which then needs ``AugmentConfig(mlm=False)``).
    """

    teacher: str | Path
    train_file: str | Path
    student: str | Path | Sequence[int] | None = None
    student_overrides: dict[str, Any] = field(default_factory=dict)
    task: str = "classify"
    intermediate_steps: int = 100
    prediction_steps: int = 100
    text_column: str = "text"
    label_column: str = "label"
    max_length: int = 128
    temperature: float = 1.0
    projection: bool = False
    augment: AugmentConfig | None = None
    augment_model: str | Path | None = None


def augment_table(
    cfg: TaskDistillConfig, path: Path, teacher: Model, tok, seed: int
) -> AugmentStats:
    """Write ``cfg.train_file``'s examples and their augmented variants to ``path`` (JSONL,
    ``text_column`` / ``label_column``); returns the `AugmentStats`.

    Raises:
        ValueError: an unreadable table, or an augmentation the model cannot do (`Augmenter`).
    """
    model = teacher
    if cfg.augment_model is not None:
        model = (
            from_pretrained(cfg.augment_model, heads=["mlm"])
            if cfg.augment.mlm
            else (from_pretrained(cfg.augment_model))
        )
        tok = load_tokenizer(cfg.augment_model)
    augmenter = Augmenter(model, tok, cfg.augment)
    examples = read_table(
        cfg.train_file, text_column=cfg.text_column, label_column=cfg.label_column
    )
    variants, stats = augmenter.augment([e.text for e in examples], np.random.default_rng(seed))
    lines = [
        json.dumps({cfg.text_column: t, cfg.label_column: e.label}, ensure_ascii=False)
        for e, vs in zip(examples, variants)
        for t in [e.text, *vs]
    ]
    write_text_atomic(path, "\n".join(lines) + "\n")
    return stats


def _task_student(
    student,
    teacher: Model,
    tok,
    label_names,
    overrides: dict[str, Any],
    max_length: int,
    head: str = "classify",
) -> Model:
    """A student with the task ``head``: a directory, teacher layers (ints; fresh head) or a
    preset name."""
    if not isinstance(student, (str, Path)):
        model = init_student(teacher, list(student), heads=[head])
        fresh = build_model(model.config, heads=[head])
        model.task_head.load_state_dict(fresh.task_head.state_dict())
        return model.train()
    if Path(str(student)).is_dir():
        return from_pretrained(
            student, heads=[head], new_heads=True, label_names=label_names
        ).train()
    config = EncoderConfig.from_preset(str(student), **overrides)
    config = config_for_tokenizer(
        config,
        tok,
        max_length,
        vocab_size=teacher.config.vocab_size,
        label_names=tuple(label_names),
    )
    return build_model(config, heads=[head]).train()


@locks_run_directory
def distill_task(cfg: TaskDistillConfig, train: TrainConfig) -> dict[str, Any]:
    """TinyBERT task distillation (Jiao et al. 2020 §3.2) of a sequence classifier
    (``cfg.task`` "classify") or a token classifier ("ner").

    Stage 1 ("intermediate", ``cfg.intermediate_steps``) then stage 2 ("prediction",
    ``cfg.prediction_steps``), each a `Trainer` run in ``output_dir/<stage>`` (its
    metrics.jsonl holds the loss parts) with ``train``'s settings (``max_steps`` and
    ``output_dir`` per stage, ``batch_size`` capped at the number of rows); the final student
    + tokenizer go to ``output_dir/model``.

    With ``cfg.augment`` the training set is first grown by TinyBERT's data augmentation
    (`augment_table`, written to ``output_dir/augmented.jsonl``).

    Returns:
        {"intermediate": summary, "prediction": summary, "labels": [...], "parameters": n,
        "examples": training rows, "augmentation": `AugmentStats` fields (with augment)}.

    Raises:
        ValueError: an unknown task, augmentation of token-level data, an incompatible pair,
            a teacher without the task's head, unknown labels.
    """
    if cfg.task not in ("classify", "ner"):
        raise InputError(f"task distillation task must be 'classify' or 'ner', got {cfg.task!r}")
    if cfg.augment is not None and cfg.task != "classify":
        raise InputError(
            "TinyBERT augmentation replaces words, which would leave token labels behind; "
            "it is for sequence classification only"
        )
    head = HEAD_OF_TASK[cfg.task]
    out = Path(train.output_dir)
    tok = load_tokenizer(cfg.teacher)
    teacher_model = from_pretrained(cfg.teacher)
    if teacher_model.task != head:
        raise InputError(
            f"the teacher {cfg.teacher} has no {head} head (heads: "
            f"{teacher_model.heads or 'none'}); fine-tune it first"
        )
    labels = teacher_model.config.label_names
    opts = TaskOptions(
        text_column=cfg.text_column, label_column=cfg.label_column, max_length=cfg.max_length
    )
    train_file, augmented = Path(cfg.train_file), None
    if cfg.augment is not None:
        out.mkdir(parents=True, exist_ok=True)
        train_file = out / "augmented.jsonl"
        augmented = augment_table(cfg, train_file, teacher_model, tok, train.seed)
        logger.info(
            "augmented %d examples with %d samples (%.1f%% of words replaced)",
            augmented.examples,
            augmented.samples,
            100 * augmented.replace_rate,
        )
    rows = TaskData(cfg.task, tok, opts, label_names=labels).load(train_file)
    student = cfg.student
    if student is None:
        student = list(range(1, teacher_model.config.num_hidden_layers, 2))
    seed_all(train.seed)  # the student's new head depends on the seed alone
    student_model = _task_student(
        student, teacher_model, tok, labels, cfg.student_overrides, cfg.max_length, head
    )
    model = TinyBertTaskObjective(
        student_model, teacher_model, projection=cfg.projection, temperature=cfg.temperature
    )
    pad = tok.pad_token_id or 0
    batch_size = min(train.batch_size, len(rows))
    source = IndexedBatches(rows, batch_size, lambda rs, rng: pad_batch(rs, pad))
    result: dict[str, Any] = {
        "labels": list(labels),
        "parameters": student_model.num_parameters(),
        "examples": len(rows),
    }
    if augmented is not None:
        result["augmentation"] = dict(
            dataclasses.asdict(augmented), replace_rate=augmented.replace_rate
        )
    for stage, steps in (
        ("intermediate", cfg.intermediate_steps),
        ("prediction", cfg.prediction_steps),
    ):
        if steps <= 0:
            continue
        model.stage = stage
        stage_cfg = dataclasses.replace(
            train,
            output_dir=out / stage,
            max_steps=steps,
            batch_size=batch_size,
            find_unused_parameters=True,
        )
        logger.info("task distillation, stage %s: %d steps on %d examples", stage, steps, len(rows))
        result[stage] = Trainer(
            model,
            lambda m, b, denominators: m(b, denominators),
            source,
            stage_cfg,
            save_fn=save_pretrained,
            count_fn=model.counts,  # follows model.stage
        ).train()
    model.save_pretrained(out / "model")
    finish_run(out, tok, result)
    return result
