"""Extractive QA (SQuAD 1.1 / 2.0): reading, windowing long contexts, and picking answers.

Pre-processing (Devlin et al. 2019 §4.2, and the original BERT run_squad): the question is cut
to ``max_question_length`` tokens; the context is split into overlapping windows so that each
``[CLS] question [SEP] window [SEP]`` fits ``max_length``; consecutive windows share
``doc_stride`` tokens. Character offsets of every context token are kept.

Post-processing: over all windows, a span (start, end) is a candidate when both are context
tokens, end ≥ start, end - start + 1 ≤ ``max_answer_length``, and the start token has its
*maximum context* in this window (BERT run_squad: of the windows holding a token, the one where
min(tokens left, tokens right) + 0.01·window length is largest). Its score is
start_logit + end_logit; the n best get probabilities by a softmax over their scores. SQuAD 2.0:
the null score is the smallest [CLS] score s(0) + e(0) over the windows, and the answer is
empty when null − best > ``null_threshold``.

Shapes: F windows (features), T tokens per window.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import ArgumentTypeError, InputError
from ..files import parse_json
from .tables import DataError, read_text


@dataclass
class QAExample:
    """One question on one context. ``answers``: (text, character start) pairs; empty for an
    unanswerable (SQuAD 2.0) or unlabelled question."""

    id: str
    question: str
    context: str
    answers: list[tuple[str, int]] = field(default_factory=list)


def read_squad(path: str | Path) -> list[QAExample]:
    """Read a SQuAD-format JSON file (``{"data": [{"paragraphs": [{"context", "qas"}]}]}``).

    Raises:
        DataError: not JSON, not the SQuAD layout, or an answer whose text is not found at its
            ``answer_start`` in the context.
    """
    body = parse_json(read_text(path), source=str(path), what="a SQuAD object", error=DataError)
    data = body.get("data")
    if not isinstance(data, list):
        raise DataError(f"{path} is not SQuAD-format JSON: no list under 'data'")
    out = []
    where = "data"
    try:
        for i, article in enumerate(data):
            for j, para in enumerate(article["paragraphs"]):
                where = f"data[{i}].paragraphs[{j}]"
                ctx = para["context"]
                if not isinstance(ctx, str):
                    raise ArgumentTypeError(f"context is {type(ctx).__name__}, not text")
                for k, qa in enumerate(para["qas"]):
                    where = f"data[{i}].paragraphs[{j}].qas[{k}]"
                    answers = (
                        []
                        if qa.get("is_impossible")
                        else [
                            (str(a["text"]), int(a["answer_start"])) for a in qa.get("answers", [])
                        ]
                    )
                    for text, start in answers:
                        if start < 0 or ctx[start : start + len(text)] != text:
                            raise DataError(
                                f"{path}: question {qa['id']}: answer {text!r} is not at "
                                f"character {start} of its context"
                            )
                    if not isinstance(qa["question"], str):
                        raise ArgumentTypeError(
                            f"question is {type(qa['question']).__name__}, not text"
                        )
                    out.append(QAExample(str(qa["id"]), qa["question"], ctx, answers))
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        if isinstance(e, DataError):
            raise
        missing = f"no {e}" if isinstance(e, KeyError) else str(e)
        raise DataError(f"{path}: {where}: not the SQuAD layout ({missing})") from e
    return out


@dataclass
class QAFeature:
    """One window of one example.

    Attributes:
        example_index: index of the example in the list given to `prepare_windows`.
        input_ids, token_type_ids, attention_mask: (T,) lists.
        offsets: (T,) [start, end) character offsets into the context for context tokens,
            None for question and special tokens.
        token_is_max_context: (T,) True for context tokens whose maximum context is here.
        start_position, end_position: token indices of the first answer in this window, or
            0, 0 ([CLS]) when the window does not hold it (or there is none).
    """

    example_index: int
    input_ids: list[int]
    token_type_ids: list[int] | None
    attention_mask: list[int]
    offsets: list[tuple[int, int] | None]
    token_is_max_context: list[bool]
    start_position: int = 0
    end_position: int = 0


def prepare_windows(
    tokenizer,
    examples: list[QAExample],
    *,
    max_length: int = 384,
    doc_stride: int = 128,
    max_question_length: int = 64,
) -> list[QAFeature]:
    """Split each example into windows (see the module docstring).

    Args:
        tokenizer: a `bertfamily.Tokenizer`.
        max_length: tokens per window, special tokens included.
        doc_stride: tokens shared by consecutive windows.
        max_question_length: the question is cut to this many tokens.

    Raises:
        ValueError: the window leaves no room for context beyond the overlap (the message
            gives the numbers).
    """
    backend = tokenizer.backend
    special = backend.post_processor.num_special_tokens_to_add(True)
    features: list[QAFeature] = []
    with tokenizer._lock:  # the wrapper's truncation state belongs to one call at a time
        previous = backend.truncation
        try:
            for ei, ex in enumerate(examples):
                backend.no_truncation()
                q = backend.encode(ex.question, add_special_tokens=False)
                question = ex.question
                if len(q.ids) > max_question_length:
                    question = ex.question[: q.offsets[max_question_length - 1][1]]
                    q = backend.encode(question, add_special_tokens=False)
                room = max_length - len(q.ids) - special
                if room <= doc_stride:
                    raise InputError(
                        f"max_length={max_length} leaves {room} context tokens per window "
                        f"after a {len(q.ids)}-token question and {special} special tokens; "
                        f"it must exceed doc_stride={doc_stride}"
                    )
                backend.enable_truncation(max_length, stride=doc_stride, strategy="only_second")
                enc = backend.encode(question, ex.context)
                windows = [enc] + list(enc.overflowing)
                features += _features(ei, ex, windows)
        finally:
            if previous is None:
                backend.no_truncation()
            else:
                backend.enable_truncation(**previous)
    _mark_max_context(features)
    return features


def _features(ei: int, ex: QAExample, windows) -> list[QAFeature]:
    out = []
    for w in windows:
        seq = w.sequence_ids
        offsets = [tuple(o) if s == 1 else None for o, s in zip(w.offsets, seq)]
        f = QAFeature(
            ei, list(w.ids), list(w.type_ids), list(w.attention_mask), offsets, [False] * len(w.ids)
        )
        if ex.answers:
            text, a_start = ex.answers[0]
            a_end = a_start + len(text)
            ctx = [i for i, o in enumerate(offsets) if o is not None]
            if ctx and offsets[ctx[0]][0] <= a_start and offsets[ctx[-1]][1] >= a_end:
                f.start_position = next(i for i in ctx if offsets[i][1] > a_start)
                f.end_position = next(i for i in reversed(ctx) if offsets[i][0] < a_end)
        out.append(f)
    return out


def _mark_max_context(features: list[QAFeature]) -> None:
    """BERT run_squad's ``_check_is_max_context``, over character-offset identities."""
    best: dict[tuple[int, tuple[int, int]], tuple[float, int, int]] = {}
    for fi, f in enumerate(features):
        ctx = [i for i, o in enumerate(f.offsets) if o is not None]
        for rank, i in enumerate(ctx):
            score = min(rank, len(ctx) - 1 - rank) + 0.01 * len(ctx)
            key = (f.example_index, f.offsets[i])
            if key not in best or score > best[key][0]:
                best[key] = (score, fi, i)
    for _, fi, i in best.values():
        features[fi].token_is_max_context[i] = True


@dataclass
class Answer:
    """A predicted answer: ``text`` = context[start:end] (character offsets); ``score`` =
    start + end logit; ``probability`` among the n best. Empty text, start = end = 0: no
    answer."""

    text: str
    start: int
    end: int
    score: float
    probability: float = 0.0


@dataclass
class QAPrediction:
    """Best answer, the n best, and the SQuAD 2.0 null score."""

    answer: Answer
    n_best: list[Answer]
    null_score: float


def postprocess(
    examples: list[QAExample],
    features: list[QAFeature],
    start_logits: list,
    end_logits: list,
    *,
    n_best: int = 20,
    max_answer_length: int = 30,
    null_threshold: float | None = None,
) -> list[QAPrediction]:
    """Pick each example's answer from its windows' logits (see the module docstring).

    Args:
        examples: as given to `prepare_windows`.
        features: as returned by `prepare_windows`.
        start_logits: one (T,) array per feature.
        end_logits: one (T,) array per feature.
        n_best: answers kept per example (and candidate starts/ends per window).
        max_answer_length: longest answer in tokens.
        null_threshold: None = SQuAD 1.1 (always answer); else answer "" when
            null_score − best_score > null_threshold.

    Raises:
        ValueError: the numbers of features and logits differ.
    """
    if not (len(features) == len(start_logits) == len(end_logits)):
        raise InputError(
            f"{len(features)} features but {len(start_logits)} start and "
            f"{len(end_logits)} end logit rows"
        )
    by_example: dict[int, list[int]] = {}
    for fi, f in enumerate(features):
        by_example.setdefault(f.example_index, []).append(fi)
    out = []
    for ei, ex in enumerate(examples):
        candidates: dict[tuple[int, int], Answer] = {}
        null = math.inf
        for fi in by_example.get(ei, []):
            f = features[fi]
            s = np.asarray(start_logits[fi], dtype=np.float64)[: len(f.offsets)]
            e = np.asarray(end_logits[fi], dtype=np.float64)[: len(f.offsets)]
            null = min(null, float(s[0] + e[0]))
            for i in np.argsort(-s)[:n_best]:
                for j in np.argsort(-e)[:n_best]:
                    if (
                        f.offsets[i] is None
                        or f.offsets[j] is None
                        or j < i
                        or j - i + 1 > max_answer_length
                        or not f.token_is_max_context[i]
                    ):
                        continue
                    span = (f.offsets[i][0], f.offsets[j][1])
                    score = float(s[i] + e[j])
                    if span not in candidates or score > candidates[span].score:
                        candidates[span] = Answer(ex.context[span[0] : span[1]], *span, score)
        ranked = sorted(candidates.values(), key=lambda a: -a.score)[:n_best]
        empty = Answer("", 0, 0, null if null < math.inf else 0.0)
        if null_threshold is not None:
            ranked = sorted(ranked + [empty], key=lambda a: -a.score)[:n_best]
        if ranked:
            z = np.array([a.score for a in ranked])
            p = np.exp(z - z.max())
            for a, prob in zip(ranked, p / p.sum()):
                a.probability = float(prob)
        best = next((a for a in ranked if a.text), empty)
        if null_threshold is not None and (not best.text or null - best.score > null_threshold):
            best = empty
        out.append(QAPrediction(best, ranked, empty.score))
    return out
