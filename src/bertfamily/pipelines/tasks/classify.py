"""`TextClassifier`: raw text (or text pairs) → label names with probabilities."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from ...errors import InputError
from ...inference.batches import FEATURE_KEYS, TokenRows, run_batches, text_list, tokenize_rows
from ...inference.limits import checked_max_length, input_limit
from ...inference.loading import load_into

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
        max_length: inputs are cut to this many tokens (default: `inference.limits.input_limit`,
            the tokenizer's ``model_max_length`` capped by the model's position table).
        device: where it runs ("cpu", "cuda", a `torch.device`).
        dtype: parameter dtype: "auto" (default) is fp32, the faithful choice (transformers'
            numbers); "fp32", "bf16", "fastest" (bf16 where the CPU or GPU has bf16 units,
            else fp32) or a torch dtype (`inference.dtype.resolve_dtype`).

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
        dtype: str | torch.dtype | None = "auto",
    ) -> None:
        loaded = load_into(
            self, path, device=device, dtype=dtype, head=("classify", "a sequence classifier")
        )
        self.directory = loaded.directory
        self.max_length = checked_max_length(
            max_length, input_limit(self.model.config, self.tokenizer)
        )
        self.labels = self.model.config.label_names
        self.problem_type = self.model.config.problem_type

    def tokenize(
        self,
        texts: str | Sequence[str],
        text_pairs: str | Sequence[str] | None = None,
        *,
        truncation_side: str = "right",
    ) -> TokenRows:
        """The one tokenization of a call (the server calls it once per request and hands the
        rows to `run_tokenized`): each text (or pair) cut to ``max_length`` tokens.

        Args:
            texts: one string or N strings; text_pairs: as many second segments, or None.
            truncation_side: "right" or "left".

        Returns:
            `TokenRows` of N rows.

        Raises:
            InputError: ``texts`` and ``text_pairs`` of different lengths, or an unknown
                ``truncation_side``.
        """
        texts = text_list(texts)
        pairs = [text_pairs] if isinstance(text_pairs, str) else text_pairs
        return tokenize_rows(
            self.tokenizer,
            texts,
            pairs,
            max_length=self.max_length,
            truncation_side=truncation_side,
        )

    def run_tokenized(
        self,
        tokens: TokenRows,
        *,
        top_k: int | None = 1,
        function_to_apply: str = "default",
        batch_size: int = 32,
        max_batch_tokens: int | None = None,
    ) -> list[list[dict]]:
        """Per tokenized text (`tokenize`), in their order, labels as ``{"label", "score"}``,
        best first (options as `__call__`), through the engine's batch loop
        (`inference.batches.run_batches`).

        Raises:
            InputError: unknown ``function_to_apply``; ``top_k``, ``batch_size`` or
                ``max_batch_tokens`` < 1.
        """
        return self._labelled(
            tokens, self._logits, top_k, function_to_apply, batch_size, max_batch_tokens
        )

    def __call__(
        self,
        texts: str | Sequence[str],
        text_pairs: str | Sequence[str] | None = None,
        *,
        top_k: int | None = 1,
        function_to_apply: str = "default",
        batch_size: int = 32,
        max_batch_tokens: int | None = None,
        truncation_side: str = "right",
    ) -> list[list[dict]]:
        """Per text, labels as ``{"label", "score"}``, best first: `run_tokenized` of
        `tokenize` (each text tokenized once).

        Args:
            top_k: how many labels per text (the best ``top_k``, or all when ``None`` or larger
                than the number of labels), as in transformers' text-classification pipeline.
            function_to_apply: "default" (by problem type, `default_function`), "softmax",
                "sigmoid" or "none" (raw logits), as transformers defines it.
            batch_size: texts per forward pass (length-sorted batches).
            max_batch_tokens: also cap each batch's padded size at this many tokens.
            truncation_side: "right" or "left".

        Raises:
            InputError: unknown ``function_to_apply`` or ``top_k`` < 1 (before any
                tokenization), or as `tokenize` and `run_tokenized`.
        """
        self._score_options(top_k, function_to_apply)
        tokens = self.tokenize(texts, text_pairs, truncation_side=truncation_side)
        return self.run_tokenized(
            tokens,
            top_k=top_k,
            function_to_apply=function_to_apply,
            batch_size=batch_size,
            max_batch_tokens=max_batch_tokens,
        )

    def _score_options(self, top_k: int | None, function_to_apply: str) -> tuple[str, int]:
        """(the score function, labels per text) of a call's options.

        Raises:
            InputError: unknown ``function_to_apply`` or ``top_k`` < 1.
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
        return fn, len(self.labels) if top_k is None else min(top_k, len(self.labels))

    @torch.inference_mode()
    def _labelled(
        self,
        tokens: TokenRows,
        logits_of: Callable[[dict[str, torch.Tensor]], tuple[torch.Tensor, list[dict] | None]],
        top_k: int | None,
        function_to_apply: str,
        batch_size: int,
        max_batch_tokens: int | None,
    ) -> list[list[dict]]:
        """`run_tokenized` with ``logits_of`` (a padded batch → ((B, C) float logits on the
        CPU, per row a dict of extra fields or None)) as the model call."""
        fn, k = self._score_options(top_k, function_to_apply)
        out: list[list[dict]] = [[] for _ in range(len(tokens))]
        for idx, (logits, extra) in run_batches(
            tokens,
            logits_of,
            pad=self.tokenizer.pad_rows,
            batch_size=batch_size,
            max_batch_tokens=max_batch_tokens,
            device=self.device,
            keys=FEATURE_KEYS,
        ):
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
