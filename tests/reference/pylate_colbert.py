"""PyLate's ColBERT (pylate 1.6) run on the installed sentence-transformers 6.

pylate 1.6 was written for sentence-transformers 3–5; on 6 its loading and tokenisation hooks
are no longer called, so ``pylate.models.ColBERT(directory)`` neither reads its own
``config_sentence_transformers.json`` fields nor pads queries to ``query_length``. This module
builds the reference exactly as pylate means it to run, with pylate's own classes:

- `make_pylate_colbert`: a new ColBERT on a Hugging Face encoder directory, saved by pylate's
  ``ColBERT.save`` (its own files: modules.json, 1_Dense, config_sentence_transformers.json);
- `load_pylate_colbert`: such a directory back into a ``pylate.models.ColBERT`` whose
  settings are the file's, with three shims for the sentence-transformers 5 calls pylate makes
  (``Transformer.tokenize`` with ``padding``, ``_text_length``, ``_model_config``).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

#: The fields of config_sentence_transformers.json that pylate's loader reads.
SETTINGS = (
    "query_prefix",
    "document_prefix",
    "query_length",
    "document_length",
    "attend_to_expansion_tokens",
    "skiplist_words",
    "do_query_expansion",
)


def _shim() -> None:
    """Give sentence-transformers 6's modules the sentence-transformers 5 calls pylate makes."""
    from pylate import models
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.models import Transformer

    if getattr(models.ColBERT, "_bertfamily_shimmed", False):
        return

    def tokenize(self, texts, padding=True, **_):
        # sentence-transformers 5's Transformer.tokenize: stripped texts, cut at
        # max_seq_length, padded as asked ("max_length" for pylate's queries)
        texts = [str(t).strip() for t in texts]
        if getattr(self, "do_lower_case", False):
            texts = [t.lower() for t in texts]
        out = self.tokenizer(
            texts,
            padding=padding,
            truncation="longest_first",
            return_tensors="pt",
            max_length=self.max_seq_length,
        )
        out = dict(out)
        out["modality"] = "text"
        return out

    Transformer.tokenize = tokenize
    models.ColBERT._text_length = staticmethod(SentenceTransformer._input_length)
    models.ColBERT._bertfamily_shimmed = True


def _dense(directory: Path):
    from pylate import models
    from safetensors.torch import load_file

    cfg = json.loads((directory / "config.json").read_text())
    layer = models.Dense(cfg["in_features"], cfg["out_features"], bias=cfg["bias"])
    layer.load_state_dict(load_file(str(directory / "model.safetensors")))
    return layer


def load_pylate_colbert(directory: str | Path):
    """A ``pylate.models.ColBERT`` of a directory pylate saved, with the file's settings."""
    from pylate import models
    from sentence_transformers.models import Transformer

    _shim()
    directory = Path(directory)
    cfg = json.loads((directory / "config_sentence_transformers.json").read_text())
    modules = json.loads((directory / "modules.json").read_text())
    dense = [_dense(directory / m["path"]) for m in modules[1:]]
    model = models.ColBERT(
        modules=[Transformer(str(directory)), *dense],
        device="cpu",
        **{k: cfg[k] for k in SETTINGS if k in cfg},
    )
    return model.eval()


def make_pylate_colbert(
    encoder_dir: str | Path, out_dir: str | Path, *, seed: int = 0, **settings
) -> Path:
    """A new ColBERT (random projection, seeded) on a Hugging Face encoder directory, saved by
    pylate's ``ColBERT.save``; ``settings`` are ColBERT's keywords (``embedding_size``,
    ``query_length``, ``attend_to_expansion_tokens``, ...)."""
    from pylate import models
    from sentence_transformers.models import Transformer

    _shim()
    torch.manual_seed(seed)
    model = models.ColBERT(modules=[Transformer(str(encoder_dir))], device="cpu", **settings)
    model._model_config = {}  # sentence-transformers 6 keeps no such dict; pylate's save reads it
    model.save(str(out_dir))
    return Path(out_dir)
