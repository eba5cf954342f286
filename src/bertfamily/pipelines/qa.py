"""`QuestionAnswerer`: question + context → answers with character offsets and scores."""

from __future__ import annotations

from pathlib import Path

import torch

from ..data.squad import Answer, QAExample, postprocess, prepare_windows
from ..errors import InputError
from .loading import load_model_and_tokenizer, to_device


class QuestionAnswerer:
    """A fine-tuned extractive-QA directory (``*ForQuestionAnswering`` + tokenizer).

    Args:
        path: the model directory.
        max_length: tokens per window (windowing: see `bertfamily.tasks.qa`).
        doc_stride: tokens shared by consecutive windows.
        max_question_length: longest question in tokens.

    Raises:
        ValueError: the directory's model has no "qa" head.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        max_length: int = 384,
        doc_stride: int = 128,
        max_question_length: int = 64,
        device: str | torch.device = "cpu",
        dtype: str | torch.dtype | None = None,
    ) -> None:
        loaded = load_model_and_tokenizer(path, device=device, dtype=dtype)
        self.model, self.tokenizer, self.device = loaded.model, loaded.tokenizer, loaded.device
        if self.model.task != "qa":
            raise InputError(f"{path} holds a {self.model.task!r} head, not extractive QA")
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
