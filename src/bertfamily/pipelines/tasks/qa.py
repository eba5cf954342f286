"""`QuestionAnswerer`: question + context → answers with character offsets and scores."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from ...data.squad import Answer, QAExample, postprocess, prepare_windows
from ...errors import InputError
from ...inference.batches import FEATURE_KEYS, TokenRows, run_batches
from ...inference.limits import checked_max_length, input_limit
from ...inference.loading import load_into


class QuestionAnswerer:
    """A fine-tuned extractive-QA directory (``*ForQuestionAnswering`` + tokenizer).

    Args:
        path: the model directory.
        max_length: tokens per window; default 384 (transformers' question-answering pipeline)
            or the model's limit (`batching.input_limit`) when that is smaller.
        doc_stride: overlap of consecutive windows; default a third of ``max_length`` (128 of
            384, as the pipeline).
        max_question_length: question tokens kept; default 64, at most half a window.
        device: where it runs ("cpu", "cuda", a `torch.device`).
        dtype: parameter dtype: "auto" (default) is fp32, the faithful choice (transformers'
            numbers); "fp32", "bf16", "fastest" (bf16 where the CPU or GPU has bf16 units,
            else fp32) or a torch dtype (`inference.dtype.resolve_dtype`).

    Raises:
        ValueError: the directory's model has no "qa" head, or ``max_length`` is over the
            model's limit.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        max_length: int | None = None,
        doc_stride: int | None = None,
        max_question_length: int | None = None,
        device: str | torch.device = "cpu",
        dtype: str | torch.dtype | None = "auto",
    ) -> None:
        load_into(self, path, device=device, dtype=dtype, head=("qa", "extractive QA"))
        limit = input_limit(self.model.config, self.tokenizer)
        max_length = checked_max_length(max_length, limit) if max_length else min(384, limit)
        doc_stride = max_length // 3 if doc_stride is None else doc_stride
        if max_question_length is None:
            max_question_length = min(64, max_length // 2)
        self.max_length = max_length
        self.window = dict(
            max_length=max_length, doc_stride=doc_stride, max_question_length=max_question_length
        )

    def tokenize(self, question: str | Sequence[str], context: str | Sequence[str]) -> TokenRows:
        """The one tokenization of a call: each (question, context) split into overlapping
        windows (`data.squad.prepare_windows`), one row per window; the windows' `QAFeature`
        and `QAExample` ride along in ``extra["features"]`` and ``extra["examples"]``.

        Args:
            question: one string, or N strings.
            context: one string, or N strings (one per question).

        Returns:
            `TokenRows` of one row per window (F ≥ N rows).

        Raises:
            InputError: a question or context that is not a string, lists of different
                lengths, or windows with no room for context (`prepare_windows`).
        """
        questions = [question] if isinstance(question, str) else list(question)
        contexts = [context] if isinstance(context, str) else list(context)
        if len(questions) != len(contexts):
            raise InputError(f"got {len(questions)} questions but {len(contexts)} contexts")
        for i, (q, c) in enumerate(zip(questions, contexts)):
            if not (isinstance(q, str) and isinstance(c, str)):
                raise InputError(f"question and context {i} must be strings")
        examples = [QAExample(str(i), q, c) for i, (q, c) in enumerate(zip(questions, contexts))]
        feats = prepare_windows(self.tokenizer, examples, **self.window) if examples else []
        rows = {
            "input_ids": [f.input_ids for f in feats],
            "attention_mask": [f.attention_mask for f in feats],
        }
        if self.tokenizer.has_token_type_ids and all(f.token_type_ids for f in feats):
            rows["token_type_ids"] = [f.token_type_ids for f in feats]
        extra = {"features": feats, "examples": [examples[f.example_index] for f in feats]}
        return TokenRows(rows, [False] * len(feats), extra=extra)

    @torch.inference_mode()
    def run_tokenized(
        self,
        tokens: TokenRows,
        *,
        top_k: int = 1,
        max_answer_length: int = 30,
        null_threshold: float | None = None,
        batch_size: int = 32,
        max_batch_tokens: int | None = None,
    ) -> list[list[Answer]]:
        """Per question of `tokenize`, in their order, its ``top_k`` answers, best first
        (options as `__call__`): the windows run through the engine's batch loop
        (`inference.batches.run_batches`), then `data.squad.postprocess` over each question's
        windows.

        Raises:
            InputError: ``top_k``, ``batch_size`` or ``max_batch_tokens`` < 1.
        """
        if top_k < 1:
            raise InputError(f"top_k must be >= 1, got {top_k}")
        feats = tokens.extra["features"]
        examples = dict(zip((f.example_index for f in feats), tokens.extra["examples"]))
        starts: list = [None] * len(feats)
        ends: list = [None] * len(feats)

        def step(batch: dict[str, torch.Tensor]) -> tuple[np.ndarray, np.ndarray]:
            out = self.model(**batch)
            return out.start_logits.float().cpu().numpy(), out.end_logits.float().cpu().numpy()

        for idx, (s, e) in run_batches(
            tokens,
            step,
            pad=self.tokenizer.pad_rows,
            batch_size=batch_size,
            max_batch_tokens=max_batch_tokens,
            device=self.device,
            keys=FEATURE_KEYS,
        ):
            for r, i in enumerate(idx):
                n = len(feats[i].input_ids)  # (T,) of this window, without the batch's padding
                starts[i], ends[i] = s[r, :n], e[r, :n]
        preds = postprocess(
            [examples[i] for i in range(len(examples))],
            feats,
            starts,
            ends,
            n_best=max(top_k, 20),
            max_answer_length=max_answer_length,
            null_threshold=null_threshold,
        )
        return [[p.answer] if top_k == 1 else p.n_best[:top_k] for p in preds]

    def __call__(
        self,
        question: str,
        context: str,
        *,
        top_k: int = 1,
        max_answer_length: int = 30,
        null_threshold: float | None = None,
        batch_size: int = 32,
    ) -> list[Answer]:
        """The ``top_k`` answers, best first; ``text == context[start:end]``, ``probability``
        among the n best. With ``null_threshold`` (SQuAD 2.0) the best may be empty. The
        context's windows are tokenized once (`tokenize`) and run ``batch_size`` at a time
        (`run_tokenized`).

        Raises:
            InputError: ``top_k`` < 1, or as `tokenize`.
        """
        if top_k < 1:
            raise InputError(f"top_k must be >= 1, got {top_k}")
        return self.run_tokenized(
            self.tokenize(question, context),
            top_k=top_k,
            max_answer_length=max_answer_length,
            null_threshold=null_threshold,
            batch_size=batch_size,
        )[0]
