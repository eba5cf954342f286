"""`TextClassifier`: raw text (or text pairs) → label names with probabilities."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from ..data.batching import sorted_batches
from ..errors import InputError
from .batching import checked_max_length, input_limit, token_lengths
from .loading import load_model_and_tokenizer, to_device

FUNCTIONS = ("default", "softmax", "sigmoid", "none")


def default_function(problem_type: str | None, num_labels: int) -> str:
    """The score function transformers' text-classification pipeline applies by default: none
    (the raw value) for regression, sigmoid for multi-label or a single output, softmax for
    single-label or several outputs."""
    if problem_type == "regression":
        return "none"
    if problem_type == "multi_label_classification" or num_labels == 1:
        return "sigmoid"
    return "softmax"


class TextClassifier:
    """A fine-tuned sequence-classification model directory, ready to label text.

    Scores follow the model's ``problem_type`` (config.json) as in transformers'
    ``pipeline("text-classification")``: softmax probabilities for single-label, independent
    sigmoid scores for multi-label, the raw value for regression (see `default_function`).

    Args:
        path: a directory holding a ``*ForSequenceClassification`` model and its tokenizer.
        max_length: inputs are cut to this many tokens (default: `batching.input_limit`, the
            tokenizer's ``model_max_length`` capped by the model's position table).

    Raises:
        ValueError: the directory's model has no "classify" head, or ``max_length`` is over
            the model's limit.
    """

    def __init__(
        self,
        path: str | Path,
        max_length: int | None = None,
        *,
        device: str | torch.device = "cpu",
        dtype: str | torch.dtype | None = None,
    ) -> None:
        loaded = load_model_and_tokenizer(path, device=device, dtype=dtype)
        self.model, self.tokenizer, self.device = loaded.model, loaded.tokenizer, loaded.device
        self.directory = loaded.directory
        if self.model.task != "classify":
            raise InputError(f"{path} holds a {self.model.task!r} head, not a sequence classifier")
        self.max_length = checked_max_length(
            max_length, input_limit(self.model.config, self.tokenizer)
        )
        self.labels = self.model.config.label_names
        self.problem_type = self.model.config.problem_type

    @torch.no_grad()
    def __call__(
        self,
        texts: str | Sequence[str],
        text_pairs: str | Sequence[str] | None = None,
        *,
        top_k: int | None = 1,
        function_to_apply: str = "default",
        batch_size: int = 32,
    ) -> list[list[dict]]:
        """Per text, labels as ``{"label", "score"}``, best first.

        Args:
            top_k: how many labels per text (the best ``top_k``, or all when ``None`` or larger
                than the number of labels), as in transformers' text-classification pipeline.
            function_to_apply: "default" (by problem type, `default_function`), "softmax",
                "sigmoid" or "none" (raw logits), as transformers defines it.

        Raises:
            ValueError: unknown ``function_to_apply`` or ``top_k`` < 1.
        """
        if function_to_apply not in FUNCTIONS:
            raise InputError(
                f"function_to_apply must be one of {FUNCTIONS}, got {function_to_apply!r}"
            )
        if top_k is not None and top_k < 1:
            raise InputError(f"top_k must be None or at least 1, got {top_k}")
        fn = function_to_apply
        if fn == "default":
            fn = default_function(self.problem_type, len(self.labels))
        k = len(self.labels) if top_k is None else min(top_k, len(self.labels))
        texts = [texts] if isinstance(texts, str) else list(texts)
        pairs = [text_pairs] if isinstance(text_pairs, str) else text_pairs
        out: list[list[dict]] = [[] for _ in texts]
        for idx in sorted_batches(
            token_lengths(self.tokenizer, texts, pairs, self.max_length), batch_size
        ):
            enc = self.tokenizer(
                [texts[i] for i in idx],
                [pairs[i] for i in idx] if pairs is not None else None,
                max_length=self.max_length,
            )
            logits, extra = self._logits(to_device(enc, self.device))  # (B, C)
            if fn == "softmax":
                scores = logits.softmax(-1)
            elif fn == "sigmoid":
                scores = logits.sigmoid()
            else:
                scores = logits
            top = scores.topk(k, dim=-1)
            for r, (i, ps, js) in enumerate(zip(idx, top.values, top.indices)):
                out[i] = [
                    {"label": self.labels[j], "score": float(p), **(extra[r] if extra else {})}
                    for p, j in zip(ps.tolist(), js.tolist())
                ]
        return out

    def _logits(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, list[dict] | None]:
        """A tokenized batch on the device → ((B, C) float logits on the CPU, per row a dict
        of extra fields for its labels, or None). Subclasses change how the model runs."""
        return self.model(**batch).logits.float().cpu(), None
