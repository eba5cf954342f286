"""Task metrics: accuracy, macro-F1, Matthews correlation (scikit-learn); multi-label micro/macro
F1 and subset accuracy; regression MSE, Pearson and Spearman; entity-level
precision/recall/F1 (seqeval); SQuAD exact match and F1 with the official normalisation."""

from __future__ import annotations

import collections
import re
import string
import warnings
from collections.abc import Sequence

import numpy as np

from ..errors import InputError
from ..runtime import require


def classification_metrics(
    y_true: Sequence, y_pred: Sequence, labels: Sequence | None = None
) -> dict[str, float]:
    """Accuracy, macro-averaged F1 (unweighted mean over classes) and Matthews correlation
    coefficient (Matthews 1975; multi-class form of Gorodkin 2004). With one class present
    (gold and predicted all alike) the MCC is undefined and reported as 0.0.

    Raises:
        ValueError: empty or unequal-length inputs.
        MissingDependency: scikit-learn is not installed (the ``train`` extra).
    """
    sk = require("sklearn.metrics", "train", "classification metrics (scikit-learn)")

    _check_sizes(len(y_true), len(y_pred))
    with warnings.catch_warnings():  # one class present: MCC is undefined, reported as 0.0
        warnings.simplefilter("ignore")
        mcc = float(sk.matthews_corrcoef(y_true, y_pred))
    return {
        "accuracy": float(sk.accuracy_score(y_true, y_pred)),
        "macro_f1": float(
            sk.f1_score(y_true, y_pred, labels=labels, average="macro", zero_division=0)
        ),
        "mcc": _finite(mcc),
    }


def regression_metrics(y_true: Sequence[float], y_pred: Sequence[float]) -> dict[str, float]:
    """Mean squared error, Pearson and Spearman correlations. A correlation is 0.0 when it is
    undefined (fewer than two values, or either side constant), so every value is finite.

    Raises:
        ValueError: empty or unequal-length inputs, or a value that is not finite.
    """
    t, p = np.asarray(y_true, float).reshape(-1), np.asarray(y_pred, float).reshape(-1)
    _check_sizes(len(t), len(p))
    if not (np.isfinite(t).all() and np.isfinite(p).all()):
        raise InputError("regression targets and predictions must be finite numbers")
    return {
        "mse": float(((t - p) ** 2).mean()),
        "pearson": _correlation(t, p),
        "spearman": _correlation(_ranks(t), _ranks(p)),
    }


def multilabel_metrics(
    y_true: Sequence[Sequence[int]], y_pred: Sequence[Sequence[int]]
) -> dict[str, float]:
    """Multi-label scores over (N, C) 0/1 indicator rows: micro F1 (over all N·C decisions),
    macro F1 (unweighted mean over the C labels; a label never gold nor predicted scores 0, as
    scikit-learn's ``zero_division=0``), and subset accuracy (the share of rows whose whole
    label set is right).

    Raises:
        ValueError: empty inputs, unequal numbers of rows, or rows of unequal widths.
    """
    t, p = np.asarray(y_true, dtype=bool), np.asarray(y_pred, dtype=bool)
    _check_sizes(len(t), len(p))
    if t.ndim != 2 or t.shape != p.shape:
        raise InputError(
            f"multi-label metrics take (N, C) 0/1 rows of equal shape, got {t.shape} and {p.shape}"
        )
    tp, fp, fn = (t & p).sum(0), (~t & p).sum(0), (t & ~p).sum(0)
    micro_den = 2 * tp.sum() + fp.sum() + fn.sum()
    per_den = 2 * tp + fp + fn
    per_f1 = np.where(per_den > 0, 2 * tp / np.maximum(per_den, 1), 0.0)
    return {
        "micro_f1": float(2 * tp.sum() / micro_den) if micro_den else 0.0,
        "macro_f1": float(per_f1.mean()),
        "subset_accuracy": float((t == p).all(1).mean()),
    }


def _check_sizes(n_true: int, n_pred: int) -> None:
    if n_true != n_pred or not n_true:
        raise InputError(
            f"need equal, non-zero numbers of labels and predictions, got {n_true} and {n_pred}"
        )


def _finite(x: float) -> float:
    return x if np.isfinite(x) else 0.0


def _correlation(a: np.ndarray, b: np.ndarray) -> float:
    if len(a) < 2 or not a.std() or not b.std():
        return 0.0
    return float(np.clip(np.corrcoef(a, b)[0, 1], -1.0, 1.0))


def _ranks(x: np.ndarray) -> np.ndarray:
    """Average ranks (ties share the mean of their ranks), as Spearman's rho uses them."""
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x), float)
    ranks[order] = np.arange(len(x), dtype=float)
    _, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
    sums = np.bincount(inverse, weights=ranks)
    return sums[inverse] / counts[inverse]


def entity_metrics(
    y_true: list[list[str]], y_pred: list[list[str]], scheme: str = "BIO"
) -> dict[str, float]:
    """Entity-level micro precision, recall and F1 with seqeval: an entity counts only when
    its type and both boundaries are right. BIO uses conlleval's rules; BIOES uses strict mode.

    Raises:
        ValueError: unknown scheme.
        MissingDependency: seqeval is not installed (the ``train`` extra).
    """
    feature = "entity-level NER metrics (seqeval)"
    sq = require("seqeval.metrics", "train", feature)
    f1_score, precision_score, recall_score = sq.f1_score, sq.precision_score, sq.recall_score

    if scheme == "BIO":
        kw: dict = {}
    elif scheme == "BIOES":
        kw = {"mode": "strict", "scheme": require("seqeval.scheme", "train", feature).IOBES}
    else:
        raise InputError(f"scheme must be 'BIO' or 'BIOES', got {scheme!r}")
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
        raise InputError(f"no prediction for {len(missing)} questions, e.g. {sorted(missing)[:3]}")
    em = f1 = 0.0
    for qid, golds in answers.items():
        golds = golds or [""]
        em += max(exact_match(predictions[qid], g) for g in golds)
        f1 += max(token_f1(predictions[qid], g) for g in golds)
    n = max(len(answers), 1)
    return {"exact_match": 100 * em / n, "f1": 100 * f1 / n}


def similarity_metrics(
    embeddings1: np.ndarray, embeddings2: np.ndarray, gold: Sequence[float]
) -> dict[str, float]:
    """STS evaluation (sentence-transformers' EmbeddingSimilarityEvaluator, cosine): the
    Spearman and Pearson correlations (×1, not ×100) between cos(u_i, v_i) and the gold scores.

    Raises:
        ValueError: different numbers of rows, or no rows.
    """
    a = np.asarray(embeddings1, np.float64)
    b = np.asarray(embeddings2, np.float64)
    if a.shape != b.shape:
        raise InputError(f"embedding shapes differ: {a.shape} and {b.shape}")
    _check_sizes(len(gold), len(a))
    a = a / np.clip(np.linalg.norm(a, axis=1, keepdims=True), 1e-12, None)
    b = b / np.clip(np.linalg.norm(b, axis=1, keepdims=True), 1e-12, None)
    cos = (a * b).sum(1)
    m = regression_metrics(gold, cos)
    return {"spearman": m["spearman"], "pearson": m["pearson"]}


def evaluate_sts(
    embed, sentences1: Sequence[str], sentences2: Sequence[str], gold: Sequence[float]
) -> dict[str, float]:
    """`similarity_metrics` of ``embed(texts) -> (N, D) array`` (any model) on STS pairs; each
    distinct sentence is embedded once."""
    unique = list(dict.fromkeys([*sentences1, *sentences2]))
    vectors = np.asarray(embed(unique))
    row = {t: i for i, t in enumerate(unique)}
    return similarity_metrics(
        vectors[[row[t] for t in sentences1]], vectors[[row[t] for t in sentences2]], gold
    )


def retrieval_metrics(
    ranked: dict[str, Sequence[str]],
    qrels: dict[str, dict[str, float]],
    ks: Sequence[int] = (1, 3, 5, 10),
) -> dict[str, float]:
    """Information-retrieval metrics of ranked result lists, as sentence-transformers'
    InformationRetrievalEvaluator defines them (binary relevance: a document is relevant when
    its qrels value is > 0), averaged over the queries that have a relevant document:

    - ``ndcg@10``: DCG of the top 10 (gain 1 / log2(rank + 1)) ÷ the ideal DCG;
    - ``mrr@10``: 1 / the rank of the first relevant document in the top 10 (0 if none);
    - ``recall@k`` for each k in ``ks``: relevant documents in the top k ÷ relevant documents;
    - ``map@100``: Σ over relevant hits in the top 100 of precision at that rank ÷
      min(100, relevant documents).

    Args:
        ranked: query id → document ids, best first.
        qrels: query id → {document id: relevance}.

    Raises:
        ValueError: no query with a relevant document has a ranking.
    """
    sums = {"ndcg@10": 0.0, "mrr@10": 0.0, "map@100": 0.0, **{f"recall@{k}": 0.0 for k in ks}}
    n = 0
    for qid, docs in ranked.items():
        relevant = {d for d, r in qrels.get(qid, {}).items() if r > 0}
        if not relevant:
            continue
        n += 1
        hits = [d in relevant for d in docs]
        sums["mrr@10"] += next((1.0 / (i + 1) for i, h in enumerate(hits[:10]) if h), 0.0)
        dcg = sum(1.0 / np.log2(i + 2) for i, h in enumerate(hits[:10]) if h)
        ideal = sum(1.0 / np.log2(i + 2) for i in range(min(len(relevant), 10)))
        sums["ndcg@10"] += dcg / ideal
        for k in ks:
            sums[f"recall@{k}"] += sum(hits[:k]) / len(relevant)
        found, precision_sum = 0, 0.0
        for i, h in enumerate(hits[:100]):
            if h:
                found += 1
                precision_sum += found / (i + 1)
        sums["map@100"] += precision_sum / min(100, len(relevant))
    if not n:
        raise InputError("no query with a relevant document was ranked")
    return {k: v / n for k, v in sums.items()}


def evaluate_retrieval(
    embed_queries,
    embed_corpus,
    queries: dict[str, str],
    corpus: dict[str, str],
    qrels: dict[str, dict[str, float]],
    top_k: int = 100,
) -> dict[str, float]:
    """`retrieval_metrics` of exact cosine search: ``embed_queries(texts)`` and
    ``embed_corpus(texts)`` (any model; (N, D) arrays), every query against the whole corpus,
    the ``top_k`` best kept (ties: corpus order)."""
    doc_ids, qids = list(corpus), [q for q in queries if q in qrels]
    docs = np.asarray(embed_corpus([corpus[d] for d in doc_ids]), np.float32)
    docs = docs / np.clip(np.linalg.norm(docs, axis=1, keepdims=True), 1e-12, None)
    qs = np.asarray(embed_queries([queries[q] for q in qids]), np.float32)
    qs = qs / np.clip(np.linalg.norm(qs, axis=1, keepdims=True), 1e-12, None)
    ranked = {}
    for start in range(0, len(qids), 256):
        sims = qs[start : start + 256] @ docs.T
        for qid, row in zip(qids[start : start + 256], sims):
            best = np.argsort(-row, kind="stable")[:top_k]
            ranked[qid] = [doc_ids[i] for i in best]
    return retrieval_metrics(ranked, qrels)
