"""`pretrain`: corpus + tokenizer + preset (or an existing checkpoint) → a pretrained model.

Objectives default to the preset's: `RECIPES` where the config does not imply them
(SpanBERT: MLM + SBO with span masking), else MLM plus the config's ``pair_head`` ("nsp" for
BERT, "sop" for ALBERT, none for RoBERTa-style presets, which then get full-sentence packing);
``objectives`` and ``masking`` override them. ``objectives=["rtd"]``: ELECTRA's replaced-token
detection (`objectives.electra`): a generator of ``generator_size`` × the model's width trains
beside it, and the saved model is the discriminator (``ElectraForPreTraining`` layout), so the
model must be an ELECTRA one (``tiny-electra``, an ELECTRA ``init_from``).

Continued pretraining: ``init_from`` loads an existing Hugging Face directory (e.g. the real
all-MiniLM-L6-v2, which ships without an MLM head); heads the checkpoint lacks are freshly
initialised (BERT init) and reported, any other missing or unexpected weight is an error.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..build import build_model, build_span_boundary_head
from ..checkpoints.io import config_from_hf, read_hf_config
from ..config import EncoderConfig
from ..errors import InputError
from ..notices import waiting
from ..objectives.electra import RTD_WEIGHT, ReplacedTokenDetection, evaluate_rtd, generator_config
from ..objectives.instances import PACKINGS
from ..objectives.masking import MaskingConfig
from ..objectives.pretraining import PretrainingModel, evaluate_mlm, unigram_log_probs
from ..pretrained import from_pretrained
from ..tokenization.tokenizer import load_tokenizer
from ..train.distributed import init_distributed
from ..train.loop import TrainConfig, Trainer
from ..train.rundir import locks_run_directory, write_run_record
from .common import config_for_tokenizer, finish_run, mlm_data, save_pretrained, train_config

__all__ = ["RECIPES", "PretrainConfig", "pretrain", "load_for_continued_pretraining"]

logger = logging.getLogger(__name__)


# Pretraining recipes of the presets whose objectives are not implied by their config: data,
# like PRESETS; used for a model from scratch when objectives / masking are not given.
RECIPES: dict[str, dict[str, Any]] = {
    # SpanBERT (Joshi et al. 2020 §3): span masking + span boundary objective, no NSP.
    "spanbert-base": {"objectives": ("mlm", "sbo"), "masking": "span"},
    # RoBERTa (Liu et al. 2019 §4.1-4.2): dynamic masking, full-sentence packing, no NSP —
    # what pair_head=None already gives; listed for completeness.
    "roberta-base": {"objectives": ("mlm",), "masking": "token"},
}


@dataclass
class PretrainConfig:
    """What to pretrain on and how (the optimisation lives in `TrainConfig`).

    Attributes:
        corpus: corpus files (see `bertfamily.corpora.read_documents`).
        tokenizer: a tokenizer directory (None: the one in ``init_from``).
        preset: preset name for a model from scratch; overrides: EncoderConfig field values.
        init_from: an existing model directory to continue pretraining.
        objectives: subset of ("mlm", "nsp", "sop", "sbo"), or ("rtd",) alone (ELECTRA);
            None = the preset's recipe (`RECIPES`), else MLM + the config's ``pair_head``.
        generator_size: "rtd": the generator's width as a fraction of the discriminator's
            (`objectives.electra.generator_config`; ELECTRA §3.2: 1/4–1/2 works best).
        rtd_weight: "rtd": λ of L_MLM + λ·L_Disc (ELECTRA §2: 50).
        masking: `MaskingConfig` (strategy, rate, 80/10/10, cap); None = the recipe's
            strategy, else "token".
        static_copies: 0 = dynamic masking; k > 0 = k fixed maskings per instance.
        packing: single-segment (MLM-only) inputs: "full_sentences" (may cross documents) or
            "doc_sentences" (never cross a document; the batch grows to keep the tokens per
            batch of full_sentences), Liu et al. 2019 §4.2 (`objectives.instances.PACKINGS`).
        max_length: tokens per instance, specials included.
        short_seq_prob: probability of a shorter target length (NSP/SOP instances).
        eval_documents: documents held out for evaluation (taken at random, seeded).
        eval_corpus: corpus files of held-out documents; when given, they are the evaluation
            documents and every document of ``corpus`` is trained on (``eval_documents`` is
            then unused).
        eval_batches: held-out batches evaluated (fixed masking).
        split_sentences: split corpus lines into sentences with pysbd.
        chinese_words: word boundaries for whole-word masking from jieba.
        phrases: "english" | "chinese": ERNIE 1.0 phrase-level masking (Sun et al. 2019
            §3.2.2), a chunker's phrases masked as units with the "entity" strategy (the
            default masking then; another strategy is refused), see
            `objectives.phrase_masking`.
        text_field: the JSONL/dataset text field.
    """

    corpus: Sequence[str | Path]
    tokenizer: str | Path | None = None
    preset: str = "bert-tiny"
    overrides: dict[str, Any] = field(default_factory=dict)
    init_from: str | Path | None = None
    objectives: Sequence[str] | None = None
    generator_size: float = 0.25
    rtd_weight: float = RTD_WEIGHT
    masking: MaskingConfig | None = None
    static_copies: int = 0
    packing: str = "full_sentences"
    max_length: int = 128
    short_seq_prob: float = 0.1
    eval_documents: int = 20
    eval_corpus: Sequence[str | Path] = ()
    eval_batches: int = 20
    split_sentences: bool = False
    chinese_words: bool = False
    phrases: str | None = None
    text_field: str = "text"


def load_for_continued_pretraining(path: str | Path, heads: Sequence[str]):
    """Load ``path`` with ``heads``, initialising heads the checkpoint lacks.

    Returns:
        (model, names of freshly initialised parameters).

    Raises:
        ValueError: a weight of the trunk is missing, or a weight is unexpected/mismatched.
    """
    model, report = from_pretrained(path, heads=list(heads), strict=False, return_report=True)
    head_prefixes = ("mlm_head.", "pair_head.", "rtd_head.")
    fresh = [k for k in report.missing if k.startswith(head_prefixes)]
    trunk_missing = [k for k in report.missing if not k.startswith(head_prefixes)]
    if trunk_missing or report.unexpected or report.mismatched:
        raise InputError(
            f"{path} does not fit: missing {trunk_missing}, unexpected "
            f"{report.unexpected}, mismatched {report.mismatched}"
        )
    if fresh:
        logger.warning(
            "continued pretraining from %s: %d head weights freshly initialised (%s)",
            path,
            len(fresh),
            ", ".join(fresh),
        )
    return model.train(), fresh


def _objectives(cfg: PretrainConfig, config) -> tuple[str, ...]:
    if cfg.objectives is not None:
        objs = tuple(cfg.objectives)
    else:
        objs = ("mlm",) + ((config.pair_head,) if config.pair_head else ())
    if "rtd" in objs:
        if objs != ("rtd",):
            raise InputError(f"'rtd' (ELECTRA) is an objective of its own; got {objs}")
        if config.model_type != "electra":
            raise InputError(
                "'rtd' trains an ELECTRA discriminator: use an ELECTRA model (e.g. preset "
                f"tiny-electra, or init_from an ELECTRA directory), not {config.model_type!r}"
            )
        return objs
    bad = set(objs) - {"mlm", "nsp", "sop", "sbo"}
    if bad or "mlm" not in objs or {"nsp", "sop"} <= set(objs):
        raise InputError(
            f"objectives must include 'mlm', at most one of 'nsp'/'sop', and "
            f"optionally 'sbo'; or be 'rtd' alone; got {objs}"
        )
    return objs


def pretrain(
    cfg: PretrainConfig, train: TrainConfig | None = None, **train_fields: Any
) -> dict[str, Any]:
    """Build data, model and heads, and run the `Trainer`. Works alone or under torchrun.

    The run directory gets ``run.json`` (`bertfamily.train.rundir.write_run_record`: command
    line, resolved configuration, seed, threads, versions, sha256 of the corpus, tokenizer and
    initial model files) before training starts.

    Returns:
        The `Trainer.train` summary plus ``objectives``, ``instances`` (train/eval counts),
        ``parameters`` and ``fresh_heads``. Also written to ``output_dir/summary.json``.

    Raises:
        ValueError: bad corpus, objectives, packing (unknown, or DOC-SENTENCES with a pair
            objective, whose instances are pairs), or a tokenizer/model mismatch.

    ``train``: the run's `TrainConfig`; or pass its fields as keywords instead
    (``output_dir=..., max_steps=...``): they start from ``TRAIN_DEFAULTS["pretrain"]``, the
    command line's defaults, so the same arguments make the same run.
    """
    return _pretrain(cfg, train_config("pretrain", train, **train_fields))


@locks_run_directory
def _pretrain(cfg: PretrainConfig, train: TrainConfig) -> dict[str, Any]:
    """`pretrain` with its `TrainConfig` resolved, under the run directory's lock."""
    if cfg.packing not in PACKINGS:
        raise InputError(f"packing must be one of {PACKINGS}, got {cfg.packing!r}")
    dist = init_distributed(train.device)
    tok_dir = cfg.tokenizer or cfg.init_from
    if tok_dir is None:
        raise InputError("give a tokenizer directory (or init_from a model directory)")
    tok = load_tokenizer(tok_dir)
    if tok.mask_token_id is None or tok.pad_token_id is None:
        raise InputError(f"tokenizer {tok_dir} has no mask or pad token")

    if cfg.init_from is not None and cfg.overrides:
        raise InputError(
            f"init_from {cfg.init_from} continues that model at its own size; overrides "
            f"{sorted(cfg.overrides)} cannot apply to it (pretrain from a preset instead)"
        )
    fresh: list[str] = []
    torch.manual_seed(train.seed)  # new weights (model, fresh heads, SBO) depend on the seed only
    if cfg.init_from is not None:
        base = config_from_hf(read_hf_config(cfg.init_from))
        objectives = _objectives(cfg, base)
        pair = next((o for o in objectives if o in ("nsp", "sop")), None)
        model, fresh = load_for_continued_pretraining(
            cfg.init_from, ["rtd"] if "rtd" in objectives else ["mlm"] + (["pair"] if pair else [])
        )
        config = model.config
    else:
        config = EncoderConfig.from_preset(cfg.preset, **cfg.overrides)
        recipe = RECIPES.get(cfg.preset, {})
        if cfg.objectives is None and "objectives" in recipe:
            cfg = dataclasses.replace(cfg, objectives=recipe["objectives"])
        if cfg.masking is None and "masking" in recipe:
            cfg = dataclasses.replace(cfg, masking=MaskingConfig(strategy=recipe["masking"]))
        objectives = _objectives(cfg, config)
        pair = next((o for o in objectives if o in ("nsp", "sop")), None)
        config = config_for_tokenizer(
            config, tok, cfg.max_length, pair_head=pair, use_pooler=pair is not None
        )
        heads = ["rtd"] if "rtd" in objectives else ["mlm"] + (["pair"] if pair else [])
        model = build_model(config, heads=heads)
    if cfg.masking is None:
        strategy = "entity" if cfg.phrases else "token"
        cfg = dataclasses.replace(cfg, masking=MaskingConfig(strategy=strategy))
    if cfg.phrases and cfg.masking.strategy != "entity":
        raise InputError(
            f"phrase masking masks the phrases as units with the 'entity' strategy, "
            f"not {cfg.masking.strategy!r}"
        )
    if config.vocab_size < tok.vocab_size:
        raise InputError(
            f"tokenizer has {tok.vocab_size} tokens, the model only {config.vocab_size}"
        )
    if config.use_pooler and not pair:
        train = dataclasses.replace(train, find_unused_parameters=True)

    sbo = "sbo" in objectives
    if pair and cfg.packing != "full_sentences":
        raise InputError(
            f"packing {cfg.packing!r} packs single segments; {pair} builds sentence pairs"
        )
    with waiting("reading, tokenizing and masking the corpus"):
        data = _mlm_data(cfg, tok, train, dist, pair, sbo)
    train_inst, eval_inst = data.train_instances, data.eval_instances
    unigram = unigram_log_probs(train_inst, tok.vocab_size, tok.all_special_ids)
    generator_parameters = 0
    if "rtd" in objectives:
        generator = build_model(generator_config(config, cfg.generator_size), heads=["mlm"])
        pmodel = ReplacedTokenDetection(model, generator, cfg.rtd_weight)
        shared = {id(p) for p in model.parameters()}
        generator_parameters = sum(p.numel() for p in generator.parameters() if id(p) not in shared)

        def evaluate(m):
            return evaluate_rtd(m, data.eval_batches, train.seed)

    else:
        sbo_head = build_span_boundary_head(config, model) if sbo else None
        pmodel = PretrainingModel(model, sbo_head, pair_objective=pair is not None)

        def evaluate(m):
            return evaluate_mlm(m, data.eval_batches, unigram)

    logger.info(
        "pretraining %s (%d parameters) on %d/%d train/eval instances, objectives %s, "
        "batch size %d",
        config.model_type,
        model.num_parameters(heads=True),
        len(train_inst),
        len(eval_inst),
        objectives,
        data.batch_size,
    )

    if dist.is_main:  # run.json: what repeats this run
        inputs = [*cfg.corpus, *cfg.eval_corpus, tok_dir]
        if cfg.init_from is not None and cfg.init_from != tok_dir:
            inputs.append(cfg.init_from)
        write_run_record(
            train.output_dir,
            {"pretrain": cfg, "train": train, "model": config, "objectives": objectives},
            inputs,
            train.seed,
        )
    trainer = Trainer(
        pmodel,
        lambda m, b, denominators: m(b, denominators),
        data.source,
        train,
        eval_fn=evaluate,
        dist=dist,
        save_fn=save_pretrained,
        count_fn=pmodel.counts,  # each term normalised over the whole accumulated step
    )
    summary = trainer.train()
    summary.update(
        objectives=list(objectives),
        fresh_heads=fresh,
        instances={"train": len(train_inst), "eval": len(eval_inst)},
        packing=None if pair else cfg.packing,
        batch_size=data.batch_size,
        parameters=model.num_parameters(heads=True),
        generator_parameters=generator_parameters,
        world_size=dist.world_size,
    )
    if dist.is_main:
        finish_run(train.output_dir, tok, summary)
    return summary


def _mlm_data(cfg: PretrainConfig, tok, train: TrainConfig, dist, pair, sbo):
    """The pretraining instances of ``cfg`` (`recipes.common.mlm_data`)."""
    return mlm_data(
        cfg.corpus,
        tok,
        train,
        dist,
        kind=pair or ("doc_packed" if cfg.packing == "doc_sentences" else "packed"),
        max_length=cfg.max_length,
        masking=cfg.masking,
        eval_documents=cfg.eval_documents,
        eval_batches=cfg.eval_batches,
        short_seq_prob=cfg.short_seq_prob,
        static_copies=cfg.static_copies,
        sbo=sbo,
        chinese_words=cfg.chinese_words,
        phrases=cfg.phrases,
        split_sentences=cfg.split_sentences,
        text_field=cfg.text_field,
        eval_corpus=cfg.eval_corpus,
    )
