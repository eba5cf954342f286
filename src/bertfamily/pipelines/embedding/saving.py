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
``README.md`` model card (`model_card`: the sections of sentence-transformers' cards, from this
run's data, with no path of this machine). The weights are stored once (``model.safetensors``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch import nn

from ...files import atomic_write, make_directory_inside, write_text_atomic
from .sentence_modules import MODEL_SETTINGS_FILE, MODULES_FILE, SETTINGS_FILE

if TYPE_CHECKING:
    from .embed import SentenceEmbedder

__all__ = [
    "card_text",
    "cross_encoder_card",
    "library_versions",
    "hub_id",
    "model_card",
    "public_name",
    "save_directory",
    "training_hyperparameters",
]

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


#: TrainConfig fields a card lists (paths, devices and switches of the run are left out).
CARD_HYPERPARAMETERS = (
    "max_steps", "batch_size", "grad_accum_steps", "learning_rate", "weight_decay",
    "adam_betas", "adam_eps", "warmup_steps", "warmup_ratio", "schedule", "max_grad_norm",
    "precision", "eval_every", "seed", "metric_for_best", "load_best_at_end",
)  # fmt: skip


def public_name(value: str | os.PathLike[str] | None) -> str | None:
    """How a card names a model or a data file without this machine's paths: an id
    (``org/name``, a resource name) as it is; a directory of the Hugging Face cache
    (``.../models--org--name/snapshots/<commit>``) as ``org/name``; a run's ``model/`` or
    ``best/`` as ``<run>/<model|best>``; any other path by its last component."""
    if value is None:
        return None
    text = os.fspath(value)
    path = Path(text)
    if not path.is_absolute() and not path.exists():
        return text  # an id: org/name, a resource name, stsb:train
    parts = path.resolve().parts
    for part in parts:
        if part.startswith("models--"):
            return part.removeprefix("models--").replace("--", "/", 1)
    name = path.resolve().name
    if name in ("model", "best") and len(parts) > 1:
        return f"{parts[-2]}/{name}"
    return name


def hub_id(value: str | os.PathLike[str] | None) -> str | None:
    """The Hugging Face id (``org/name``) of a model named by ``value``: an id itself, or a
    directory of the Hugging Face cache; None for any other directory."""
    name = public_name(value)
    if name is None or "/" not in name:
        return None
    text = os.fspath(value)
    return name if "models--" in text or not Path(text).exists() else None


def training_hyperparameters(config: Any, **extra: Any) -> dict[str, Any]:
    """The hyperparameters a card lists: `CARD_HYPERPARAMETERS` of a `TrainConfig` and the
    recipe's own (``extra``: the loss's scale, epochs, ...); None values left out."""
    found = {k: getattr(config, k, None) for k in CARD_HYPERPARAMETERS}
    return {k: v for k, v in {**found, **extra}.items() if v is not None}


def library_versions() -> dict[str, str]:
    """Python and the installed versions of the libraries a saved directory depends on."""
    import platform
    from importlib.metadata import PackageNotFoundError, version

    out = {"Python": platform.python_version()}
    for name in ("bertfamily", "sentence-transformers", "transformers", "torch", "tokenizers"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            continue
    return out


def model_card(model: SentenceEmbedder, card: dict[str, Any]) -> str:
    """The README.md of a sentence-embedding directory, in the sections sentence-transformers'
    cards have, filled from this run's data: model details and architecture, usage
    (sentence-transformers and bertfamily), evaluation (``card["metrics"]``), training
    details (``train_data``, ``loss``, ``steps``, ``hyperparameters``) and library versions.
    No absolute path of this machine appears: the base model and files go by `public_name`."""
    modes = "+".join(model.pooling.modes)
    modules = [f"Transformer(max_seq_length={model.max_seq_length})", f"Pooling({modes})"]
    modules += [
        f"Dense({layer[0].in_features} → {layer[0].out_features}, {type(layer[1]).__name__})"
        for layer in model.dense
    ]
    modules += ["Normalize()"] if model.pooling.normalize else []
    details = {
        "Model type": "Sentence Transformer",
        "Base model": public_name(card.get("base_model", model.source)),
        "Maximum sequence length": f"{model.max_seq_length} tokens",
        "Output dimensionality": f"{model.dimension} dimensions",
        "Similarity function": "cosine similarity",
        "Pooling": modes + (", L2-normalised" if model.pooling.normalize else ""),
        "Prompts": ", ".join(f"{k}: {v!r}" for k, v in model.prompts.items()) or None,
    }
    usage = [
        "### sentence-transformers",
        "",
        "```python",
        "from sentence_transformers import SentenceTransformer",
        "",
        'model = SentenceTransformer("PATH")',
        'vectors = model.encode(["A sentence.", "Another one."])',
        "print(model.similarity(vectors, vectors))",
        "```",
        "",
        "### bertfamily",
        "",
        "```python",
        "from bertfamily.pipelines.embedding.embed import SentenceEmbedder",
        "",
        'model = SentenceEmbedder("PATH")',
        'vectors = model.encode(["A sentence.", "Another one."])',
        "```",
        "",
        "```bash",
        "bertfamily embed --model PATH 'A sentence.'",
        "```",
    ]
    front = ["library_name: sentence-transformers", "pipeline_tag: sentence-similarity"]
    base_id = hub_id(card.get("base_model", model.source))
    front += [f"base_model: {base_id}"] if base_id else []
    return card_text(
        front,
        "A sentence-embedding model trained with bertfamily",
        details,
        "\n".join(["```text", *modules, "```"]),
        usage,
        card,
    )


def cross_encoder_card(card: dict[str, Any], *, max_length: int) -> str:
    """The README.md of a reranker directory (a one-output sequence-classification model that
    sentence-transformers' ``CrossEncoder`` and bertfamily's ``Reranker`` load), with the
    sections of `card_text`; ``card`` as for `model_card`."""
    details = {
        "Model type": "Cross Encoder (one relevance logit per (query, passage) pair)",
        "Base model": public_name(card.get("base_model")),
        "Maximum sequence length": f"{max_length} tokens (query and passage together)",
        "Output": "one score; sigmoid activation (sentence-transformers' default for one label)",
    }
    usage = [
        "### sentence-transformers",
        "",
        "```python",
        "from sentence_transformers import CrossEncoder",
        "",
        'model = CrossEncoder("PATH")',
        'ranks = model.rank("A query", ["One passage.", "Another passage."])',
        "```",
        "",
        "### bertfamily",
        "",
        "```python",
        "from bertfamily.pipelines.reranking.rerank import Reranker",
        "",
        'ranks = Reranker("PATH").rank("A query", ["One passage.", "Another passage."])',
        "```",
        "",
        "```bash",
        "bertfamily rerank 'A query' 'One passage.' 'Another passage.' --model PATH",
        "```",
    ]
    front = ["library_name: sentence-transformers", "pipeline_tag: text-ranking"]
    base_id = hub_id(card.get("base_model"))
    front += [f"base_model: {base_id}"] if base_id else []
    architecture = "```text\nTransformer encoder → [CLS] → Linear(hidden, 1) → Sigmoid\n```"
    title = "A cross-encoder reranker trained with bertfamily"
    return card_text(front, title, details, architecture, usage, card)


def card_text(
    front: list[str],
    title: str,
    details: dict[str, Any],
    architecture: str,
    usage: list[str],
    card: dict[str, Any],
) -> str:
    """A model card's Markdown (the sections of sentence-transformers' cards): YAML front
    matter (``front`` lines, then tags), model details, the architecture, usage, evaluation,
    training details and library versions."""
    lines = ["---", *front, "tags:", "- sentence-transformers", "- bertfamily"]
    lines += ["---", "", f"# {title}", "", "## Model Details", "", "### Model Description", ""]
    lines += [f"- **{k}:** {v}" for k, v in details.items() if v is not None]
    lines += ["", "### Full Model Architecture", "", architecture, "", "## Usage", "", *usage]
    metrics = {k: v for k, v in (card.get("metrics") or {}).items() if _number(v)}
    if metrics:
        lines += ["", "## Evaluation", "", "| Metric | Value |", "|:--|--:|"]
        lines += [f"| {k} | {v:.4f} |" for k, v in metrics.items()]
    lines += ["", "## Training Details", ""]
    for label, key in (("Training data", "train_data"), ("Loss", "loss"), ("Steps", "steps")):
        if card.get(key) is not None:
            lines.append(f"- **{label}:** {card[key]}")
    hyper = card.get("hyperparameters") or {}
    if hyper:
        lines += ["", "### Training Hyperparameters", "", "| Name | Value |", "|:--|:--|"]
        lines += [f"| {k} | {v} |" for k, v in hyper.items()]
    lines += ["", "### Framework Versions", ""]
    lines += [f"- {k}: {v}" for k, v in library_versions().items()]
    return "\n".join(lines) + "\n"


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
