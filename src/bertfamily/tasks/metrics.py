"""Task metrics: accuracy, macro-F1, Matthews correlation (scikit-learn); entity-level
precision/recall/F1 (seqeval); SQuAD exact match and F1 with the official normalisation."""

from __future__ import annotations

import collections
import re
import string
from collections.abc import Sequence

import numpy as np


def classification_metrics(
    y_true: Sequence, y_pred: Sequence, labels: Sequence | None = None
) -> dict[str, float]:
    """Accuracy, macro-averaged F1 (unweighted mean over classes) and Matthews correlation
    coefficient (Matthews 1975; multi-class form of Gorodkin 2004).

    Raises:
        ValueError: empty or unequal-length inputs.
    """
    from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

    if len(y_true) != len(y_pred) or not len(y_true):
        raise ValueError(
            f"need equal, non-zero numbers of labels and predictions, got "
            f"{len(y_true)} and {len(y_pred)}"
        )
    return {
        "accuracy": float(accuracy_score(y_true, y_pred)),
        "macro_f1": float(
            f1_score(y_true, y_pred, labels=labels, average="macro", zero_division=0)
        ),
        "mcc": float(matthews_corrcoef(y_true, y_pred)),
    }


def regression_metrics(y_true: Sequence[float], y_pred: Sequence[float]) -> dict[str, float]:
    """Mean squared error and Pearson correlation."""
    t, p = np.asarray(y_true, float), np.asarray(y_pred, float)
    r = float(np.corrcoef(t, p)[0, 1]) if len(t) > 1 and t.std() and p.std() else 0.0
    return {"mse": float(((t - p) ** 2).mean()), "pearson": r}


def entity_metrics(
    y_true: list[list[str]], y_pred: list[list[str]], scheme: str = "BIO"
) -> dict[str, float]:
    """Entity-level micro precision, recall and F1 with seqeval: an entity counts only when
    its type and both boundaries are right. BIO uses conlleval's rules; BIOES uses strict mode.

    Raises:
        ValueError: unknown scheme.
    """
    from seqeval.metrics import f1_score, precision_score, recall_score

    if scheme == "BIO":
        kw: dict = {}
    elif scheme == "BIOES":
        from seqeval.scheme import IOBES

        kw = {"mode": "strict", "scheme": IOBES}
    else:
        raise ValueError(f"scheme must be 'BIO' or 'BIOES', got {scheme!r}")
    return {
        "precision": float(precision_score(y_true, y_pred, zero_division=0, **kw)),
        "recall": float(recall_score(y_true, y_pred, zero_division=0, **kw)),
        "f1": float(f1_score(y_true, y_pred, zero_division=0, **kw)),
    }


# --- SQuAD (Rajpurkar et al. 2016; official evaluate-v2.0 normalisation) ---------------------
def normalize_answer(s: str) -> str:
    """Lower-case, drop punctuation, drop the articles a/an/the, collapse whitespace."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def exact_match(prediction: str, truth: str) -> float:
    """1.0 when the answers are equal after `normalize_answer`, else 0.0."""
    return float(normalize_answer(prediction) == normalize_answer(truth))


def token_f1(prediction: str, truth: str) -> float:
    """F1 over the bags of normalised tokens; two empty answers (no-answer) score 1."""
    p, t = normalize_answer(prediction).split(), normalize_answer(truth).split()
    if not p or not t:
        return float(p == t)
    common = collections.Counter(p) & collections.Counter(t)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p), same / len(t)
    return 2 * precision * recall / (precision + recall)


def squad_metrics(predictions: dict[str, str], answers: dict[str, list[str]]) -> dict[str, float]:
    """SQuAD exact match and F1 in percent: per question the best score over its gold answers
    (an unanswerable question has gold [""]), averaged over the questions of ``answers``.

    Raises:
        ValueError: a question without a prediction.
    """
    missing = set(answers) - set(predictions)
    if missing:
        raise ValueError(f"no prediction for {len(missing)} questions, e.g. {sorted(missing)[:3]}")
    em = f1 = 0.0
    for qid, golds in answers.items():
        golds = golds or [""]
        em += max(exact_match(predictions[qid], g) for g in golds)
        f1 += max(token_f1(predictions[qid], g) for g in golds)
    n = max(len(answers), 1)
    return {"exact_match": 100 * em / n, "f1": 100 * f1 / n}
