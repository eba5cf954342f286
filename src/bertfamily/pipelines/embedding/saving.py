"""`save_directory` (what `SentenceEmbedder.save` runs) writes a sentence-embedding model as a
whole sentence-transformers directory that sentence-transformers'
``SentenceTransformer``, our `SentenceEmbedder`, ``serve`` and ``index`` load with equal
vectors (`tests/training/test_embedding_train.py`).

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
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch import nn

from ...files import atomic_write, make_directory_inside, write_text_atomic
from .sentence_modules import MODEL_SETTINGS_FILE, MODULES_FILE, SETTINGS_FILE

if TYPE_CHECKING:
    from .embed import SentenceEmbedder

__all__ = ["model_card", "save_directory"]

_ST_TYPE = "sentence_transformers.models."


def save_directory(model: SentenceEmbedder, directory: Path, card: dict[str, Any]) -> Path:
    """Write ``model``'s whole sentence-transformers directory (see the module docstring) into
    ``directory`` (the encoder's files first, atomically each). Every write stays inside
    ``directory``: a module subdirectory that is a symbolic link is refused
    (`files.check_inside`), never written through.

    Raises:
        UnsafePathError: a write would go through a link out of ``directory``.
    """
    d = Path(directory)
    model.model.save_pretrained(d)
    model.tokenizer.save_pretrained(d)
    settings = {"max_seq_length": model.max_seq_length, "do_lower_case": model.do_lower_case}
    write_text_atomic(d / SETTINGS_FILE, json.dumps(settings, indent=2) + "\n", inside=d)
    modules = [{"idx": 0, "name": "0", "path": "", "type": _ST_TYPE + "Transformer"}]

    def add(kind: str) -> Path:
        i = len(modules)
        sub = f"{i}_{kind}"
        modules.append({"idx": i, "name": str(i), "path": sub, "type": _ST_TYPE + kind})
        return make_directory_inside(d, d / sub)

    pooling = {
        "embedding_dimension": model.model.config.hidden_size,
        "pooling_mode": model.pooling.mode
        if isinstance(model.pooling.mode, str)
        else list(model.pooling.mode),
        "include_prompt": model.pooling.include_prompt,
    }
    pooling_dir = add("Pooling")
    write_text_atomic(pooling_dir / "config.json", json.dumps(pooling, indent=2) + "\n", inside=d)
    for layer in model.dense:
        _save_dense(layer, add("Dense"), d)
    if model.pooling.normalize:
        add("Normalize")
    write_text_atomic(d / MODULES_FILE, json.dumps(modules, indent=2) + "\n", inside=d)
    settings = {
        "model_type": "SentenceTransformer",
        "prompts": model.prompts,
        "default_prompt_name": model.default_prompt_name,
        "similarity_fn_name": "cosine",
    }
    write_text_atomic(d / MODEL_SETTINGS_FILE, json.dumps(settings, indent=2) + "\n", inside=d)
    write_text_atomic(d / "README.md", model_card(model, card), inside=d)
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


def model_card(model: SentenceEmbedder, card: dict[str, Any]) -> str:
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
