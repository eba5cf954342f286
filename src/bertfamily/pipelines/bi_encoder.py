"""`BiEncoder`: the trainable form of a sentence-embedding model (encoder → pooling → Dense
layers → optional L2 normalisation, exactly what `SentenceEmbedder` runs), and `save`, which
writes a whole sentence-transformers directory that sentence-transformers'
``SentenceTransformer``, our `SentenceEmbedder`, ``serve`` and ``index`` load with equal
vectors (`tests/test_embedding_train.py`).

The directory: the encoder's Hugging Face files and the tokenizer at the root (the
Transformer module, ``sentence_bert_config.json`` with ``max_seq_length`` and
``do_lower_case``), ``1_Pooling/config.json``, one ``k_Dense/`` per Dense layer
(``config.json`` + ``model.safetensors`` with ``linear.weight``/``linear.bias``),
``k_Normalize/`` when the vectors are normalised, ``modules.json`` listing them,
``config_sentence_transformers.json`` (prompts, ``similarity_fn_name`` "cosine") and a
``README.md`` model card (base model, training data, loss, metrics).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..errors import InputError
from ..files import atomic_write, make_directory_inside, write_text_atomic
from ..pretrained import from_pretrained
from ..tokenization.tokenizer import load_tokenizer
from .batching import token_lengths
from .embed import pool
from .sentence_modules import (
    MODEL_SETTINGS_FILE,
    MODULES_FILE,
    SETTINGS_FILE,
    PoolingSpec,
    read_sentence_modules,
)

__all__ = ["BiEncoder", "FEATURE_KEYS", "model_card"]

#: Tokenizer outputs the encoder reads.
FEATURE_KEYS = ("input_ids", "attention_mask", "token_type_ids")
_ST_TYPE = "sentence_transformers.models."


class BiEncoder(nn.Module):
    """Texts' token tensors → sentence vectors, with gradients.

    Args:
        model: a `bertfamily.Model` (its ``encoder`` is run).
        tokenizer: its tokenizer.
        pooling: how token states become one vector (`PoolingSpec`; its ``normalize`` is the
            final L2 normalisation, after ``dense``).
        dense: the Dense layers after pooling (Linear + activation each), trained too.
        max_seq_length: tokens per text (longer texts are truncated).
        do_lower_case / prompts / default_prompt_name: kept for `save`.
        source: the directory the model came from (for the model card).
    """

    def __init__(
        self,
        model: nn.Module,
        tokenizer: Any,
        pooling: PoolingSpec,
        dense: Sequence[nn.Module] = (),
        *,
        max_seq_length: int = 256,
        do_lower_case: bool = False,
        prompts: dict[str, str] | None = None,
        default_prompt_name: str | None = None,
        source: str | Path | None = None,
    ) -> None:
        super().__init__()
        self.model = model
        self.dense = nn.ModuleList(dense)
        self.tokenizer = tokenizer
        self.pooling = pooling
        self.max_seq_length = max_seq_length
        self.do_lower_case = do_lower_case
        self.prompts = dict(prompts or {})
        self.default_prompt_name = default_prompt_name
        self.source = None if source is None else str(source)

    @classmethod
    def from_directory(cls, path: str | Path, max_seq_length: int | None = None) -> BiEncoder:
        """Load a sentence-transformers (or plain Hugging Face: mean pooling, normalised)
        directory for training, as `SentenceEmbedder` reads it (`read_sentence_modules`).
        ``max_seq_length`` overrides the directory's (default: its value, else 256, capped by
        the tokenizer's and the model's limits)."""
        modules = read_sentence_modules(Path(path))
        model = from_pretrained(modules.model_dir)
        tok = load_tokenizer(modules.model_dir)
        if modules.do_lower_case:
            raise InputError(f"{path}: training a do_lower_case model is not supported")
        modules.check_dimensions(model.config.hidden_size)
        limits = [
            x for x in (tok.model_max_length, model.config.max_sequence_length) if x and x < 10**6
        ]
        length = max_seq_length or modules.pooling.max_seq_length or 256
        length = min([length, *limits])
        return cls(
            model,
            tok,
            modules.pooling,
            [d.module() for d in modules.dense],
            max_seq_length=length,
            do_lower_case=modules.do_lower_case,
            prompts=modules.prompts,
            default_prompt_name=modules.default_prompt_name,
            source=path,
        )

    def tokenize(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        """The encoder inputs of ``texts`` (padded to the longest, cut at ``max_seq_length``)."""
        batch = self.tokenizer(list(texts), max_length=self.max_seq_length)
        return {k: v for k, v in batch.items() if k in FEATURE_KEYS}

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """(B, T) inputs → (B, D) float32 vectors (normalised when ``pooling.normalize``)."""
        extra = {} if token_type_ids is None else {"token_type_ids": token_type_ids}
        hidden = self.model.encoder(
            input_ids=input_ids, attention_mask=attention_mask, **extra
        ).last_hidden_state
        vec = pool(hidden, attention_mask, self.pooling.modes, normalize=False)
        for layer in self.dense:
            vec = layer(vec)
        return F.normalize(vec, p=2, dim=-1) if self.pooling.normalize else vec

    @property
    def dimension(self) -> int:
        """Length of the output vectors."""
        width = len(self.pooling.modes) * self.model.config.hidden_size
        for layer in self.dense:
            width = layer[0].out_features
        return width

    @torch.no_grad()
    def encode(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """(N, D) float32 vectors of ``texts`` in eval mode (the mode is restored), batched by
        length."""
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        was_training = self.training
        self.eval()
        device = next(self.parameters()).device
        lengths = token_lengths(self.tokenizer, list(texts), max_length=self.max_seq_length)
        order = np.argsort(lengths, kind="stable")
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        try:
            for i in range(0, len(order), batch_size):
                idx = order[i : i + batch_size]
                feats = self.tokenize([texts[j] for j in idx])
                vec = self(**{k: v.to(device) for k, v in feats.items()})
                out[idx] = vec.float().cpu().numpy()
        finally:
            self.train(was_training)
        return out

    def save(self, directory: str | Path, card: dict[str, Any] | None = None) -> Path:
        """Write the whole sentence-transformers directory (see the module docstring) into
        ``directory`` (the encoder's files first, atomically each). Every write stays inside
        ``directory``: a module subdirectory that is a symbolic link is refused
        (`files.check_inside`), never written through.

        Raises:
            UnsafePathError: a write would go through a link out of ``directory``.
        """
        d = Path(directory)
        self.model.save_pretrained(d)
        self.tokenizer.save_pretrained(d)
        settings = {"max_seq_length": self.max_seq_length, "do_lower_case": self.do_lower_case}
        write_text_atomic(d / SETTINGS_FILE, json.dumps(settings, indent=2) + "\n", inside=d)
        modules = [{"idx": 0, "name": "0", "path": "", "type": _ST_TYPE + "Transformer"}]

        def add(kind: str) -> Path:
            i = len(modules)
            sub = f"{i}_{kind}"
            modules.append({"idx": i, "name": str(i), "path": sub, "type": _ST_TYPE + kind})
            return make_directory_inside(d, d / sub)

        pooling = {
            "embedding_dimension": self.model.config.hidden_size,
            "pooling_mode": self.pooling.mode
            if isinstance(self.pooling.mode, str)
            else list(self.pooling.mode),
            "include_prompt": self.pooling.include_prompt,
        }
        pooling_dir = add("Pooling")
        write_text_atomic(
            pooling_dir / "config.json", json.dumps(pooling, indent=2) + "\n", inside=d
        )
        for layer in self.dense:
            _save_dense(layer, add("Dense"), d)
        if self.pooling.normalize:
            add("Normalize")
        write_text_atomic(d / MODULES_FILE, json.dumps(modules, indent=2) + "\n", inside=d)
        settings = {
            "model_type": "SentenceTransformer",
            "prompts": self.prompts,
            "default_prompt_name": self.default_prompt_name,
            "similarity_fn_name": "cosine",
        }
        write_text_atomic(d / MODEL_SETTINGS_FILE, json.dumps(settings, indent=2) + "\n", inside=d)
        write_text_atomic(d / "README.md", model_card(self, card or {}), inside=d)
        return d


def _save_dense(layer: nn.Module, directory: Path, root: Path) -> None:
    from safetensors.torch import save_file

    linear, act = layer[0], layer[1]
    cfg = {
        "in_features": linear.in_features,
        "out_features": linear.out_features,
        "bias": linear.bias is not None,
        "activation_function": f"{type(act).__module__}.{type(act).__name__}",
    }
    write_text_atomic(directory / "config.json", json.dumps(cfg, indent=2) + "\n", inside=root)
    state = {
        f"linear.{k}": v.detach().float().contiguous().cpu() for k, v in linear.state_dict().items()
    }
    atomic_write(
        directory / "model.safetensors", lambda tmp: save_file(state, str(tmp)), inside=root
    )


def model_card(model: BiEncoder, card: dict[str, Any]) -> str:
    """The README.md of a trained directory: what it is, how to load it, and ``card``'s
    ``base_model``, ``train_data``, ``loss``, ``steps`` and ``metrics`` when given."""
    norm = "normalised, " if model.pooling.normalize else ""
    modes = "+".join(model.pooling.modes)
    lines = [
        "---",
        "library_name: sentence-transformers",
        "pipeline_tag: sentence-similarity",
        "tags:",
        "- sentence-transformers",
        "- bertfamily",
        "---",
        "",
        "# A sentence-embedding model trained with bertfamily",
        "",
        f"Vectors of {model.dimension} dimensions ({norm}{modes} pooling, "
        f"max_seq_length {model.max_seq_length}); "
        "compare them by cosine similarity.",
        "",
        "## Training",
        "",
    ]
    base = card.get("base_model", model.source)
    for label, value in (
        ("Base model", base),
        ("Training data", card.get("train_data")),
        ("Loss", card.get("loss")),
        ("Optimizer steps", card.get("steps")),
    ):
        if value is not None:
            lines.append(f"- {label}: `{value}`")
    metrics = card.get("metrics") or {}
    if metrics:
        lines += ["", "## Evaluation", "", "| metric | value |", "|---|---|"]
        lines += [f"| {k} | {v:.4f} |" for k, v in metrics.items() if isinstance(v, float | int)]
    lines += [
        "",
        "## Usage",
        "",
        "```python",
        "from sentence_transformers import SentenceTransformer",
        "model = SentenceTransformer('PATH')",
        "vectors = model.encode(['A sentence.', 'Another one.'])",
        "```",
        "",
        "```bash",
        "bertfamily embed --model PATH 'A sentence.'",
        "```",
        "",
    ]
    return "\n".join(lines)
