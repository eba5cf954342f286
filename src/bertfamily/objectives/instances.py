"""Training instances from tokenised documents: NSP pairs, SOP pairs, RoBERTa full-sentence packs.

A document is a list of *segments* (usually sentences), each a `Segment`: token ids and
word-start flags. An `Instance` holds one example before masking: ``[CLS] A [SEP] (B [SEP])``.

- `nsp_instances` (Devlin et al. 2019 §3.1 Task #2 and the original ``create_pretraining_data``):
  segments are accumulated up to a target length (``max_length`` minus the 3 specials, or with
  probability ``short_seq_prob`` a random shorter length); a random cut makes A and B; 50% of
  the time B is replaced by segments of another document (label 1 = random, 0 = is next).
- `sop_instances` (Lan et al. 2020 §4.2): A and B two consecutive parts of one document,
  swapped 50% of the time (label 1 = swapped, 0 = original order).
- `packed_instances` (Liu et al. 2019 §4.2 FULL-SENTENCES): whole sentences packed up to the
  length limit, crossing document boundaries with an extra separator, no pair label; with
  ``cross_documents=False`` it is DOC-SENTENCES (§4.2): an instance never crosses a document
  boundary, so the last one of a document may be short; `token_matched_batch_size` gives the
  larger batch that keeps the tokens per batch of FULL-SENTENCES ("we dynamically increase the
  batch size in these cases to achieve a similar number of total tokens as FULL-SENTENCES").

Pairs that are too long are truncated longest-first (one token from the longer of A and B at a
time; A loses its beginning and B its end, so the A|B boundary stays as built) until they fit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..errors import InputError

__all__ = [
    "Segment",
    "Instance",
    "SpecialIds",
    "nsp_instances",
    "sop_instances",
    "packed_instances",
    "PACKINGS",
    "token_matched_batch_size",
    "truncate_longest_first",
]


@dataclass
class Segment:
    """ids (n,) int32 token ids; starts (n,) bool word-start flags; entities: (start, end)
    token ranges (end exclusive) of phrases/entities supplied with the corpus."""

    ids: np.ndarray
    starts: np.ndarray
    entities: list[tuple[int, int]] = field(default_factory=list)

    def slice(self, lo: int, hi: int) -> Segment:
        """Tokens lo..hi-1, keeping the entities that lie wholly inside."""
        return Segment(
            self.ids[lo:hi],
            self.starts[lo:hi],
            [(s - lo, e - lo) for s, e in self.entities if lo <= s and e <= hi],
        )


@dataclass(frozen=True)
class SpecialIds:
    """The ids of the [CLS] and [SEP] tokens an instance is assembled with."""

    cls: int
    sep: int


@dataclass
class Instance:
    """input_ids (T,) int64; token_type_ids (T,) int64 (0 = A, 1 = B); special (T,) bool;
    starts (T,) bool word starts; pair_label: 0/1 or -1 (none)."""

    input_ids: np.ndarray
    token_type_ids: np.ndarray
    special: np.ndarray
    starts: np.ndarray
    pair_label: int = -1
    entities: list[tuple[int, int]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.input_ids)


def truncate_longest_first(
    a: list[Segment], b: list[Segment], max_tokens: int
) -> tuple[Segment, Segment]:
    """Concatenate each side and drop one token at a time from the longer side until
    ``len(A) + len(B) <= max_tokens``: from the front of A and the end of B, so that the
    A|B boundary the pair objectives judge stays intact."""
    A, B = _cat(a), _cat(b)
    la, lb = len(A.ids), len(B.ids)
    while la + lb > max_tokens:
        if la >= lb:
            la -= 1
        else:
            lb -= 1
    return A.slice(len(A.ids) - la, len(A.ids)), B.slice(0, lb)


def _cat(segments: Sequence[Segment]) -> Segment:
    if not segments:
        return Segment(np.zeros(0, np.int32), np.zeros(0, bool))
    entities, offset = [], 0
    for seg in segments:
        entities += [(s + offset, e + offset) for s, e in seg.entities]
        offset += len(seg.ids)
    return Segment(
        np.concatenate([s.ids for s in segments]),
        np.concatenate([s.starts for s in segments]),
        entities,
    )


def _assemble(a: Segment, b: Segment | None, sp: SpecialIds, label: int = -1) -> Instance:
    parts_ids = [[sp.cls], a.ids, [sp.sep]]
    types = [0] * (len(a.ids) + 2)
    special = [True] + [False] * len(a.ids) + [True]
    starts = [True] + list(a.starts) + [True]
    if b is not None:
        parts_ids += [b.ids, [sp.sep]]
        types += [1] * (len(b.ids) + 1)
        special += [False] * len(b.ids) + [True]
        starts += list(b.starts) + [True]
    entities = [(s + 1, e + 1) for s, e in a.entities]  # after [CLS]
    if b is not None:
        entities += [(s + len(a.ids) + 2, e + len(a.ids) + 2) for s, e in b.entities]
    return Instance(
        np.concatenate(parts_ids).astype(np.int64),
        np.asarray(types, np.int64),
        np.asarray(special, bool),
        np.asarray(starts, bool),
        label,
        entities,
    )


def _chunks(doc: list[Segment], max_tokens: int, short_seq_prob: float, rng: np.random.Generator):
    """Groups of consecutive segments, each up to a (sometimes short) target length."""
    target = max_tokens if rng.random() >= short_seq_prob else int(rng.integers(2, max_tokens + 1))
    chunk, length = [], 0
    for i, seg in enumerate(doc):
        chunk.append(seg)
        length += len(seg.ids)
        if i == len(doc) - 1 or length >= target:
            yield chunk
            chunk, length = [], 0
            target = (
                max_tokens
                if rng.random() >= short_seq_prob
                else int(rng.integers(2, max_tokens + 1))
            )


def nsp_instances(
    docs: list[list[Segment]],
    max_length: int,
    special: SpecialIds,
    rng: np.random.Generator,
    short_seq_prob: float = 0.1,
) -> list[Instance]:
    """NSP pairs from every document (see module docstring). Needs >= 2 documents.

    Raises:
        ValueError: fewer than two documents or ``max_length`` < 5.
    """
    if len(docs) < 2:
        raise InputError(f"NSP needs at least 2 documents, got {len(docs)}")
    if max_length < 5:
        raise InputError(f"max_length must be >= 5, got {max_length}")
    budget, out = max_length - 3, []
    for d, doc in enumerate(docs):
        for chunk in _chunks(doc, budget, short_seq_prob, rng):
            cut = int(rng.integers(1, len(chunk))) if len(chunk) >= 2 else 1
            a = chunk[:cut]
            if len(chunk) == 1 or rng.random() < 0.5:
                label = 1
                other = int(rng.integers(len(docs) - 1))
                other += other >= d
                start = int(rng.integers(len(docs[other])))
                b = docs[other][start : start + max(1, len(chunk) - cut)]
            else:
                label, b = 0, chunk[cut:]
            A, B = truncate_longest_first(a, b, budget)
            if len(A.ids) and len(B.ids):
                out.append(_assemble(A, B, special, label))
    return out


def sop_instances(
    docs: list[list[Segment]],
    max_length: int,
    special: SpecialIds,
    rng: np.random.Generator,
    short_seq_prob: float = 0.1,
) -> list[Instance]:
    """SOP pairs: two consecutive parts of one document, swapped 50% of the time (label 1)."""
    if max_length < 5:
        raise InputError(f"max_length must be >= 5, got {max_length}")
    budget, out = max_length - 3, []
    for doc in docs:
        for chunk in _chunks(doc, budget, short_seq_prob, rng):
            if len(chunk) < 2:
                continue
            cut = int(rng.integers(1, len(chunk)))
            A, B = truncate_longest_first(chunk[:cut], chunk[cut:], budget)
            if not (len(A.ids) and len(B.ids)):
                continue
            label = int(rng.random() < 0.5)
            out.append(_assemble(B, A, special, 1) if label else _assemble(A, B, special, 0))
    return out


# RoBERTa's two single-segment packings (Liu et al. 2019 §4.2, Table 2)
PACKINGS = ("full_sentences", "doc_sentences")


def packed_instances(
    docs: list[list[Segment]],
    max_length: int,
    special: SpecialIds,
    *,
    cross_documents: bool = True,
) -> list[Instance]:
    """Sentences packed in order up to ``max_length - 2`` tokens (a longer sentence is cut).

    ``cross_documents=True``: RoBERTa FULL-SENTENCES, an instance continues into the next
    document after an extra [SEP]. ``False``: DOC-SENTENCES, every instance holds sentences of
    one document only (Liu et al. 2019 §4.2), so a document's last instance may be short.

    Raises:
        ValueError: ``max_length`` < 3 (no room for one token between [CLS] and [SEP]).
    """
    if max_length < 3:
        raise InputError(f"max_length must be >= 3, got {max_length}")
    budget, out, current = max_length - 2, [], []
    sep = Segment(np.asarray([special.sep], np.int32), np.asarray([True]))
    length = 0
    for d, doc in enumerate(docs):
        for seg in doc:
            seg = seg.slice(0, budget)
            if length + len(seg.ids) > budget and current:
                out.append(_assemble(_cat(current), None, special))
                current, length = [], 0
            current.append(seg)
            length += len(seg.ids)
        if not cross_documents:
            if current:
                out.append(_assemble(_cat(current), None, special))
            current, length = [], 0
        elif d < len(docs) - 1 and current and length + 1 <= budget:
            current.append(sep)
            length += 1
    if current:
        out.append(_assemble(_cat(current), None, special))
    for inst in out:  # the document separators are special tokens: never masked
        inst.special |= inst.input_ids == special.sep
    return out


def token_matched_batch_size(
    batch_size: int, reference: Sequence[Instance], instances: Sequence[Instance]
) -> int:
    """The batch size that gives ``instances`` as many tokens per batch, on average, as
    ``batch_size`` instances of ``reference`` (RoBERTa §4.2: DOC-SENTENCES instances are
    shorter, so the batch grows to match FULL-SENTENCES): round(B · mean|ref| / mean|inst|),
    never below ``batch_size``.

    Raises:
        ValueError: ``batch_size`` < 1 or an empty instance list.
    """
    if batch_size < 1:
        raise InputError(f"batch_size must be >= 1, got {batch_size}")
    if not reference or not instances:
        raise InputError("both instance lists must be non-empty")
    ref = float(np.mean([len(i) for i in reference]))
    own = float(np.mean([len(i) for i in instances]))
    return max(batch_size, int(round(batch_size * ref / own)))
