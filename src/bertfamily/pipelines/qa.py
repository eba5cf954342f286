"""`QuestionAnswerer`: question + context → answers with character offsets and scores."""

from __future__ import annotations

from pathlib import Path

import torch

from ..data.squad import Answer, QAExample, postprocess, prepare_windows
from ..errors import InputError
from .batching import checked_max_length, input_limit
from .loading import load_model_and_tokenizer, to_device


class QuestionAnswerer:
    """A fine-tuned extractive-QA directory (``*ForQuestionAnswering`` + tokenizer).

    Args:
        path: the model directory.
        max_length: tokens per window; default 384 (transformers' question-answering pipeline)
            or the model's limit (`batching.input_limit`) when that is smaller.
        doc_stride: overlap of consecutive windows; default a third of ``max_length`` (128 of
            384, as the pipeline).
        max_question_length: question tokens kept; default 64, at most half a window.

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
        dtype: str | torch.dtype | None = None,
    ) -> None:
        loaded = load_model_and_tokenizer(path, device=device, dtype=dtype)
        self.model, self.tokenizer, self.device = loaded.model, loaded.tokenizer, loaded.device
        if self.model.task != "qa":
            raise InputError(f"{path} holds a {self.model.task!r} head, not extractive QA")
        limit = input_limit(self.model.config, self.tokenizer)
        max_length = checked_max_length(max_length, limit) if max_length else min(384, limit)
        doc_stride = max_length // 3 if doc_stride is None else doc_stride
        if max_question_length is None:
            max_question_length = min(64, max_length // 2)
        self.max_length = max_length
        self.window = dict(
            max_length=max_length, doc_stride=doc_stride, max_question_length=max_question_length
        )

    @torch.no_grad()
    def __call__(
        self,
        question: str,
        context: str,
        *,
        top_k: int = 1,
        max_answer_length: int = 30,
        null_threshold: float | None = None,
    ) -> list[Answer]:
        """The ``top_k`` answers, best first; ``text == context[start:end]``, ``probability``
        among the n best. With ``null_threshold`` (SQuAD 2.0) the best may be empty."""
        ex = [QAExample("0", question, context)]
        feats = prepare_windows(self.tokenizer, ex, **self.window)
        starts, ends = [], []
        for f in feats:
            ids = torch.tensor([f.input_ids])
            kw = {"attention_mask": torch.tensor([f.attention_mask])}
            if self.tokenizer.has_token_type_ids and f.token_type_ids is not None:
                kw["token_type_ids"] = torch.tensor([f.token_type_ids])
            o = self.model(ids.to(self.device), **to_device(kw, self.device))
            starts.append(o.start_logits[0].float().numpy())
            ends.append(o.end_logits[0].float().numpy())
        pred = postprocess(
            ex,
            feats,
            starts,
            ends,
            n_best=max(top_k, 20),
            max_answer_length=max_answer_length,
            null_threshold=null_threshold,
        )[0]
        if top_k == 1:
            return [pred.answer]
        return pred.n_best[:top_k]
