"""How close a cheaper run (int8, another runtime, another precision) is to fp32: the accuracy
bar it must keep (`AccuracyBar`), the measurement (`agreement`: row cosines and top-k search
overlap), the real text it is calibrated on (`austen_calibration`), and the accuracy gate of
every int8 path (`gate_texts`, `measure_gate`, `worst`, `gate_failure`): agreement on several
kinds of held-out text, the worst kind deciding."""

from __future__ import annotations

import functools
import hashlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import InputError, QuantizationError

__all__ = [
    "CALIBRATION_VERSION",
    "GATE_KINDS",
    "AccuracyBar",
    "Agreement",
    "agreement",
    "austen_calibration",
    "gate_failure",
    "GATE_SENTENCES",
    "gate_texts",
    "gate_version",
    "measure_gate",
    "require_gate",
    "swapped_agreement",
    "worst",
]


@dataclass(frozen=True)
class AccuracyBar:
    """What a quantised embedder must keep: on every calibration sentence a cosine to the fp32
    vector ≥ ``min_cosine``, and on average ≥ ``min_overlap`` of each query's top-``k``
    nearest sentences (cosine) shared with fp32's."""

    min_cosine: float = 0.99
    min_overlap: float = 0.95
    k: int = 10

    @classmethod
    def from_record(cls, fields: Mapping) -> AccuracyBar:
        """A bar read back from a cache record, its numbers checked.

        Raises:
            ValueError / TypeError: a field missing, unknown, of the wrong type or out of range.
        """
        bar = cls(**fields)
        for name in ("min_cosine", "min_overlap"):
            _check_number(name, getattr(bar, name), -1.0, 1.0)
        _check_count("k", bar.k)
        return bar


def _check_number(name: str, value: object, low: float, high: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} is {value!r}, not a number")
    if not low <= value <= high or not math.isfinite(value):  # range first: 10**400 is no float
        raise ValueError(f"{name} is {value}, outside [{low}, {high}]")


def _check_count(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise TypeError(f"{name} is {value!r}, not a count ≥ 1")


@dataclass(frozen=True)
class Agreement:
    """How close vectors are to reference ones: max |difference|, min/mean row cosine, mean
    top-k search overlap (queries against the sentences)."""

    max_abs_diff: float
    min_cosine: float
    mean_cosine: float
    top_k_overlap: float
    k: int

    def meets(self, bar: AccuracyBar) -> bool:
        """Whether this agreement satisfies ``bar``."""
        return self.min_cosine >= bar.min_cosine and self.top_k_overlap >= bar.min_overlap

    @classmethod
    def from_record(cls, fields: Mapping) -> Agreement:
        """An agreement read back from a cache record, its numbers checked (finite; cosines
        in [-1, 1], min ≤ mean; overlap in [0, 1]; a difference ≥ 0; k ≥ 1).

        Raises:
            ValueError / TypeError: a field missing, unknown, of the wrong type or out of range
                (the cache builds the entry again).
        """
        got = cls(**fields)
        _check_number("max_abs_diff", got.max_abs_diff, 0.0, math.inf)
        for name in ("min_cosine", "mean_cosine"):
            _check_number(name, getattr(got, name), -1.0, 1.0 + 1e-6)
        _check_number("top_k_overlap", got.top_k_overlap, 0.0, 1.0)
        if got.min_cosine > got.mean_cosine:
            raise ValueError(f"min cosine {got.min_cosine} above the mean {got.mean_cosine}")
        _check_count("k", got.k)
        return got


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.clip(np.linalg.norm(x, axis=1, keepdims=True), 1e-12, None)


def agreement(
    ref: np.ndarray, new: np.ndarray, ref_queries: np.ndarray, new_queries: np.ndarray, k: int = 10
) -> Agreement:
    """Compare embeddings with reference ones.

    Args:
        ref: (N, D) reference sentence vectors.
        new: (N, D) candidate sentence vectors.
        ref_queries: (Q, D) reference query vectors; each side searches its own sentences.
        new_queries: (Q, D) candidate query vectors.
        k: neighbours compared per query (capped at N).

    Returns:
        `Agreement`; top-k overlap = mean over queries of |top_k(ref) ∩ top_k(new)| / k.

    Raises:
        InputError (a ValueError): shapes that differ, or no rows.
    """
    if ref.shape != new.shape or ref_queries.shape != new_queries.shape or not len(ref):
        raise InputError(
            f"shapes differ or are empty: {ref.shape} vs {new.shape}, "
            f"{ref_queries.shape} vs {new_queries.shape}"
        )
    cos = (_unit(ref) * _unit(new)).sum(1)
    k = min(k, len(ref))

    def top(q: np.ndarray, s: np.ndarray) -> np.ndarray:
        return np.argsort(-(_unit(q) @ _unit(s).T), axis=1, kind="stable")[:, :k]

    a, b = top(ref_queries, ref), top(new_queries, new)
    overlap = float(np.mean([len(set(x) & set(y)) / k for x, y in zip(a, b)])) if len(a) else 1.0
    return Agreement(
        max_abs_diff=float(np.abs(ref - new).max()),
        min_cosine=float(cos.min()),
        mean_cosine=float(cos.mean()),
        top_k_overlap=overlap,
        k=k,
    )


def swapped_agreement(
    embedder, model, texts: Sequence[str], queries: Sequence[str], k: int = 10
) -> Agreement:
    """How ``model``, standing in for ``embedder.model`` (an exported graph's runtime), agrees
    with it: both embed ``texts`` and ``queries`` through ``embedder``'s own tokenisation and
    pooling (`agreement`). ``embedder.model`` is restored, also on an error."""
    own = embedder.model
    ref, ref_q = embedder.encode(list(texts)), embedder.encode(list(queries))
    embedder.model = model
    try:
        new, new_q = embedder.encode(list(texts)), embedder.encode(list(queries))
        return agreement(ref, new, ref_q, new_q, k)
    finally:
        embedder.model = own


CALIBRATION_VERSION = "austen-64x32-v1"  # names `austen_calibration`'s output in cache keys


def austen_calibration(
    sentences: int = 64, queries: int = 32, *, held_out: bool = False
) -> tuple[list[str], list[str]]:
    """Real calibration text: every k-th line of Jane Austen's novels (fetched resource
    ``janeausten``) of 3–64 words, and short lines (4–10 words) as queries; deterministic.
    ``held_out``: other lines (offsets 11 / 13), disjoint from the default ones, for checking
    what was calibrated on them.

    Returns:
        (sentences, queries): lists of ``sentences`` and ``queries`` strings.

    Raises:
        FetchError: the resource cannot be fetched.
    """
    from ..resources.cache import fetch

    lines = (fetch("janeausten") / "austen.txt").read_text(encoding="utf-8").splitlines()
    lines = [x.strip() for x in lines if 3 <= len(x.split()) <= 64 and not x.isupper()]
    short = [x for x in lines if 4 <= len(x.split()) <= 10]
    # offset 3 / 5: disjoint from the benchmark's slices (offset 0); 11 / 13 held out
    first, second = (11, 13) if held_out else (3, 5)
    return (
        lines[first :: len(lines) // sentences][:sentences],
        short[second :: len(short) // queries][:queries],
    )


# ---------------------------------------------------------------- the accuracy gate

#: The kinds of held-out text every int8 path is checked on (`gate_texts`); the worst decides.
GATE_KINDS = ("long prose", "short queries", "STS-B", "code-mixed")
_GATE_FORMAT = "gate-v2"  # names `gate_texts`' selection rules in `gate_version`


def _spread(items: Sequence[str], n: int, offset: int) -> list[str]:
    """``n`` items spread evenly over ``items`` from ``offset`` (deterministic)."""
    step = max(1, len(items) // n)
    return list(items[offset::step][:n])


def _code_mixed_lines() -> list[str]:
    """Lines that mix prose and code from Python's standard library (the running Python's,
    on every machine): comments, docstring lines and code lines of 4–40 words from a fixed
    list of modules, in file order; duplicates dropped."""
    import importlib.util

    lines: dict[str, None] = {}  # ordered, once each
    for name in ("argparse", "json.decoder", "textwrap", "difflib", "inspect", "pathlib"):
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.origin or not spec.origin.endswith(".py"):
            continue
        with open(spec.origin, encoding="utf-8") as fh:
            lines.update((x, None) for x in map(str.strip, fh) if 4 <= len(x.split()) <= 40)
    return list(lines)


# Sentences per kind: a minimum is a tail statistic, so the sample must be near the size a user
# checks on. With 48 a kind, OpenVINO int8 of MiniLM passed at 0.9901 and then measured 0.9836
# on 1,000 STS-B test sentences (benchmarks/results/embed_xeon_spr.json).
GATE_SENTENCES = 500


@functools.lru_cache(maxsize=4)
def gate_texts(
    sentences: int = GATE_SENTENCES, queries: int = 32
) -> dict[str, tuple[list[str], list[str]]]:
    """The held-out text of the accuracy gate, by kind (`GATE_KINDS`), each ``(sentences,
    queries)`` with the queries searched among the sentences; deterministic, and disjoint from
    the calibration text (`austen_calibration`, default and ``held_out``):

    - ``long prose``: Austen lines of 16–64 words; queries: Austen lines of 4–10 words;
    - ``short queries``: Austen lines of 4–10 words, for sentences and queries (other lines);
    - ``STS-B``: sentences of the STS Benchmark's train split (fetched resource ``stsb``; its
      test split stays for reporting), queries from its dev split;
    - ``code-mixed``: comment, docstring and code lines of Python standard-library modules.

    Returns:
        kind → (sentences, queries), ``sentences`` and ``queries`` strings each.

    Raises:
        FetchError: ``janeausten`` or ``stsb`` cannot be fetched.
    """
    from ..data.pairs import read_sts
    from ..resources.cache import fetch

    used = {t for held in (False, True) for part in austen_calibration(held_out=held) for t in part}
    lines = (fetch("janeausten") / "austen.txt").read_text(encoding="utf-8").splitlines()
    lines = [x.strip() for x in lines if not x.isupper()]
    lines = [x for x in dict.fromkeys(lines) if x not in used]
    long = [x for x in lines if 16 <= len(x.split()) <= 64]
    short = [x for x in lines if 4 <= len(x.split()) <= 10]
    stsb = fetch("stsb")

    def sts(split: str) -> list[str]:
        pairs = read_sts(stsb / f"sts-{split}.csv")
        texts = [t.strip() for p in pairs for t in (p.sentence1, p.sentence2)]
        return list(dict.fromkeys(t for t in texts if t))

    code = _code_mixed_lines()
    return {
        "long prose": (_spread(long, sentences, 7), _spread(short, queries, 17)),
        "short queries": (_spread(short, sentences, 19), _spread(short, queries, 23)),
        "STS-B": (_spread(sts("train"), sentences, 1), _spread(sts("dev"), queries, 1)),
        "code-mixed": (_spread(code, sentences, 0), _spread(code, queries, 1)),
    }


def gate_version(texts: Mapping | None = None) -> str:
    """Names the gate's text (``texts``, default `gate_texts`) in cache keys: a digest of it
    (the code-mixed lines follow the running Python's standard library), so a plan or graph
    checked on other text, or on Austen lines alone, is not used again."""
    texts = gate_texts() if texts is None else texts
    text = json.dumps([_GATE_FORMAT, texts], sort_keys=True).encode()
    return f"{_GATE_FORMAT}-{hashlib.sha256(text).hexdigest()[:16]}"


def measure_gate(
    embedder,
    model,
    k: int = 10,
    texts: Mapping[str, tuple[Sequence[str], Sequence[str]]] | None = None,
    step: Callable[[], None] | None = None,
) -> dict[str, Agreement]:
    """``model``'s agreement with ``embedder``'s own model on each kind of held-out text
    (`swapped_agreement`).

    Args:
        embedder: a `SentenceEmbedder` (its model left in place).
        model: what stands in for its model (an int8 copy, a compiled graph).
        k: neighbours of the top-k overlap.
        texts: kind → (sentences, queries); default `gate_texts`.
        step: called after each kind (a progress bar's ``advance``).

    Returns:
        kind → `Agreement`, in the order of ``texts``.
    """
    out = {}
    for kind, (sentences, queries) in (gate_texts() if texts is None else texts).items():
        out[kind] = swapped_agreement(embedder, model, sentences, queries, k)
        if step is not None:
            step()
    return out


def worst(per_kind: Mapping[str, Agreement]) -> Agreement:
    """The worst of each figure over the kinds (max difference, min cosines, min overlap):
    it meets a bar exactly when every kind does.

    Raises:
        InputError: no kinds.
    """
    if not per_kind:
        raise InputError("no agreement to take the worst of")
    got = list(per_kind.values())
    return Agreement(
        max_abs_diff=max(a.max_abs_diff for a in got),
        min_cosine=min(a.min_cosine for a in got),
        mean_cosine=min(a.mean_cosine for a in got),
        top_k_overlap=min(a.top_k_overlap for a in got),
        k=min(a.k for a in got),
    )


def gate_failure(per_kind: Mapping[str, Agreement], bar: AccuracyBar) -> str | None:
    """None when every kind meets ``bar``; else which kinds miss it and their numbers, the
    furthest under the bar first: ``"on STS-B: min cosine 0.9835, top-10 overlap 0.962"``."""
    missed = [(kind, a) for kind, a in per_kind.items() if not a.meets(bar)]
    if not missed:
        return None

    def shortfall(item: tuple[str, Agreement]) -> float:
        a = item[1]
        return max(bar.min_cosine - a.min_cosine, bar.min_overlap - a.top_k_overlap)

    missed.sort(key=shortfall, reverse=True)
    return "; ".join(
        f"on {kind}: min cosine {a.min_cosine:.4f}, top-{a.k} overlap {a.top_k_overlap:.3f}"
        for kind, a in missed
    )


def require_gate(
    what: str, per_kind: Mapping[str, Agreement], bar: AccuracyBar, advice: str
) -> Agreement:
    """The accuracy gate's decision, the one for every int8 path: the worst of ``per_kind``
    (`worst`) when every kind meets ``bar``.

    Args:
        what: the model checked, for the message ("the int8 plan").
        per_kind: kind → `Agreement` (`measure_gate`).
        bar: the accuracy to keep.
        advice: what to do instead ("run it in fp32").

    Raises:
        QuantizationError: a kind misses ``bar``; the message names each such kind and its
            numbers (`gate_failure`).
    """
    failed = gate_failure(per_kind, bar)
    if failed is not None:
        raise QuantizationError(
            f"{what} misses the accuracy bar (min cosine {bar.min_cosine}, top-{bar.k} overlap "
            f"{bar.min_overlap}) on held-out text {failed}; {advice}"
        )
    return worst(per_kind)
