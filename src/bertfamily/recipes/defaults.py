"""Each recipe's training defaults, as data (`TrainConfig` field names; no torch import).

The command line's option defaults and the Python recipes both read this table, so
``bertfamily pretrain --corpus C -o OUT`` and ``pretrain(PretrainConfig(corpus=C, ...),
output_dir=OUT)`` are the same run (same `TrainConfig`, same ``run.json``). A field not listed
takes `TrainConfig`'s own default.
"""

from __future__ import annotations

from typing import Any

__all__ = ["TRAIN_DEFAULTS"]

TRAIN_DEFAULTS: dict[str, dict[str, Any]] = {
    # BERT pretraining at the small scale these runs have: a 1e-3 peak with 5 % warm-up
    "pretrain": {
        "max_steps": 10_000,
        "learning_rate": 1e-3,
        "warmup_ratio": 0.05,
        "eval_every": 500,
        "save_every": 500,
        "log_every": 50,
        "metric_for_best": "loss",
    },
    # DistilBERT / TinyBERT: the pretraining schedule with a lower peak
    "distill": {
        "max_steps": 10_000,
        "learning_rate": 5e-4,
        "warmup_ratio": 0.05,
        "eval_every": 500,
        "save_every": 500,
        "log_every": 50,
    },
    # BERT's fine-tuning learning-rate range (Devlin et al. 2019, §A.3) and 10 % warm-up;
    # max_steps comes from the epochs, logging from the run's length (finetune plans both)
    "finetune": {
        "learning_rate": 5e-5,
        "warmup_ratio": 0.1,
        "save_every": 0,
        "log_every": 0,
    },
    # sentence-transformers' trainers for bi-encoders and cross-encoders: transformers' AdamW
    # defaults (lr 5e-5, eps 1e-8, no weight decay) and the 10 % warm-up of its examples;
    # max_steps from the epochs, logging a tenth of the run
    "embedding": {
        "learning_rate": 5e-5,
        "warmup_ratio": 0.1,
        "weight_decay": 0.0,
        "adam_eps": 1e-8,
        "save_every": 0,
        "log_every": 0,
    },
    "rerank": {
        "learning_rate": 5e-5,
        "warmup_ratio": 0.1,
        "transformers_warmup": True,  # sentence-transformers' CrossEncoderTrainer schedule
        "weight_decay": 0.0,
        "adam_eps": 1e-8,
        "save_every": 0,
        "log_every": 0,
    },
    # PyLate trains ColBERT with sentence-transformers' trainer: transformers' defaults (lr
    # 5e-5, AdamW eps 1e-8, no weight decay, no warm-up, linear decay, clipping at norm 1)
    "colbert": {
        "learning_rate": 5e-5,
        "warmup_ratio": 0.0,
        "transformers_warmup": True,
        "weight_decay": 0.0,
        "adam_eps": 1e-8,
        "save_every": 0,
        "log_every": 0,
    },
}
