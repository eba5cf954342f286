"""Knowledge-graph injection (K-BERT, Liu et al. 2020, "K-BERT: Enabling Language
Representation with Knowledge Graph", §3): triple readers, the sentence tree, soft positions and
the visible matrix, as token-level data preparation.

For each input, the triples (head, relation, tail) of a knowledge graph whose head appears in
the sentence are attached to that entity as branches of a *sentence tree* (§3.1, the knowledge
layer). The tree is flattened: each branch's tokens (relation then tail) follow its entity.
*Soft positions* (§3.2) keep the sentence's own positions (a branch continues from the end of
its entity, so the sentence tokens after it keep the numbers they had without knowledge), and
the *visible matrix* M (§3.3, the seeing layer) lets the injected knowledge reach only its
entity: M[i, j] = 1 iff

- i and j are both sentence (trunk) tokens, or
- i and j are in the same branch, or
- one is in a branch and the other in that branch's entity,

as the authors' code builds it (``add_knowledge_with_vm``). The model reads M as a (B, T, T)
``attention_mask`` and the soft positions as ``position_ids``; no model code knows K-BERT.

Triple sources:

- a TSV file, one triple a line: ``head<TAB>relation<TAB>tail`` (UTF-8; blank lines and lines
  starting with ``#`` skipped; heads matched case-insensitively, multi-word heads allowed);
- WordNet 3.0 (`read_wordnet`, the ``wordnet`` fetch resource): for each lemma's most
  frequent sense, ``(lemma, "is a", hypernym)`` and ``(lemma, "synonym", other lemma)``.

Shapes: T tokens of one flattened tree.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import InputError
from .tables import DataError, read_utf8, text_lines

__all__ = [
    "Triple",
    "KnowledgeGraph",
    "SentenceTree",
    "read_triples_tsv",
    "read_wordnet",
    "sentence_tree",
    "load_knowledge",
    "knowledge_row",
]

Triple = tuple[str, str, str]

# Words never matched as entities: function words that WordNet lists as rare nouns ("a" the
# letter, "it" information technology, "in" the state of Indiana, ...).
STOPWORDS = frozenset(
    "a an the is are was were be been am i me my we our you your he him his she her it its "
    "they them their this that these those of in on at to for from by with as or and not no "
    "do does did so if but than then there here what which who whom how when where why all "
    "any can will would should could may might must just also very too up out off over".split()
)
_WORD = re.compile(r"[A-Za-z0-9]+(?:['’][A-Za-z]+)?|[^\sA-Za-z0-9]")


def read_triples_tsv(path: str | Path) -> list[Triple]:
    """Triples of a TSV file: ``head<TAB>relation<TAB>tail`` per line (see the module doc).

    Raises:
        DataError: a line without exactly three non-empty fields (file and line named).
    """
    path = Path(path)
    triples = []
    for n, line in enumerate(text_lines(read_utf8(path)), 1):
        if not line.strip() or line.startswith("#"):
            continue
        parts = [p.strip() for p in line.split("\t")]
        if len(parts) != 3 or not all(parts):
            raise DataError(f"{path}:{n}: expected head<TAB>relation<TAB>tail, got {line!r}")
        triples.append((parts[0], parts[1], parts[2]))
    if not triples:
        raise DataError(f"{path} holds no triples")
    return triples


def _lemma(word: str) -> str:
    """A WordNet word as text: underscores to spaces, adjective markers ("(a)") dropped."""
    return re.sub(r"\([a-z]+\)$", "", word).replace("_", " ").lower()


def read_wordnet(directory: str | Path, senses: int = 1) -> Iterator[Triple]:
    """Triples of WordNet 3.0's database files (``data.*`` and ``index.*``, wndb(5WN)).

    For each lemma of ``index.{noun,verb,adj,adv}`` and its first ``senses`` synsets (the
    index lists them by sense frequency): ``(lemma, "is a", first word of each hypernym)``
    (pointers ``@`` and ``@i``) and ``(lemma, "synonym", each other word of the synset)``.

    Raises:
        DataError: a missing file or a line that is not a synset record.
    """
    directory = Path(directory)
    synsets: dict[tuple[str, str], tuple[list[str], list[tuple[str, str]]]] = {}
    for pos in ("noun", "verb", "adj", "adv"):
        file = directory / f"data.{pos}"
        if not file.is_file():
            raise DataError(f"{directory} has no WordNet file data.{pos}")
        with file.open(encoding="utf-8", errors="replace") as f:
            for n, line in enumerate(f, 1):
                if line.startswith("  "):  # the licence header
                    continue
                fields = line.split(" | ")[0].split()
                try:
                    offset, ss_type, w_cnt = fields[0], fields[2], int(fields[3], 16)
                    words = [_lemma(w) for w in fields[4 : 4 + 2 * w_cnt : 2]]
                    at = 4 + 2 * w_cnt
                    pointers = [
                        (fields[at + 2 + 4 * k], fields[at + 3 + 4 * k])
                        for k in range(int(fields[at]))
                        if fields[at + 1 + 4 * k] in ("@", "@i")
                    ]
                except (IndexError, ValueError) as e:
                    raise DataError(f"{file}:{n}: not a WordNet synset line ({e})") from e
                key = "a" if ss_type == "s" else ss_type
                synsets[(key, offset)] = (words, pointers)
    for pos, key in (("noun", "n"), ("verb", "v"), ("adj", "a"), ("adv", "r")):
        with (directory / f"index.{pos}").open(encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("  "):
                    continue
                fields = line.split()
                lemma, count = _lemma(fields[0]), int(fields[2])
                for offset in fields[len(fields) - count :][:senses]:
                    words, hypernyms = synsets.get((key, offset), ([], []))
                    for target_offset, target_pos in hypernyms:
                        target_key = "a" if target_pos == "s" else target_pos
                        target = synsets.get((target_key, target_offset))
                        if target and target[0]:
                            yield (lemma, "is a", target[0][0])
                    for w in words:
                        if w != lemma:
                            yield (lemma, "synonym", w)


class KnowledgeGraph:
    """Triples indexed by head for matching in text: lower-cased heads of up to
    ``max_head_words`` words → their (relation, tail) branches, at most ``max_branches`` each
    (K-BERT's code keeps 2 per entity), in the order read; duplicates dropped.

    Args:
        triples: (head, relation, tail) strings.
        max_branches: most branches per entity.
        stopwords: heads never matched (default `STOPWORDS`); heads shorter than
            ``min_head_chars`` characters are never matched either.
    """

    def __init__(
        self,
        triples: Iterable[Triple],
        max_branches: int = 2,
        stopwords: Iterable[str] = STOPWORDS,
        min_head_chars: int = 2,
    ) -> None:
        if max_branches < 1:
            raise InputError(f"max_branches must be >= 1, got {max_branches}")
        skip = set(stopwords)
        self.branches: dict[tuple[str, ...], list[tuple[str, str]]] = {}
        for head, relation, tail in triples:
            key = tuple(w.lower() for w in _WORD.findall(head))
            if not key or " ".join(key) in skip or len(" ".join(key)) < min_head_chars:
                continue
            got = self.branches.setdefault(key, [])
            if len(got) < max_branches and (relation, tail) not in got and tail.lower() != head:
                got.append((relation, tail))
        self.max_head_words = max((len(k) for k in self.branches), default=1)

    def __len__(self) -> int:
        return len(self.branches)

    def match(self, words: Sequence[str]) -> list[tuple[int, int, list[tuple[str, str]]]]:
        """Entities in ``words``: (first word, end word (exclusive), branches), left to right,
        the longest head first at each position, never overlapping."""
        low = [w.lower() for w in words]
        out, i = [], 0
        while i < len(low):
            for n in range(min(self.max_head_words, len(low) - i), 0, -1):
                got = self.branches.get(tuple(low[i : i + n]))
                if got:
                    out.append((i, i + n, got))
                    i += n
                    break
            else:
                i += 1
        return out


def load_knowledge(spec: str | Path, max_branches: int = 2) -> KnowledgeGraph:
    """``"wordnet"`` (the fetched resource, `read_wordnet`) or a TSV triple file."""
    if str(spec) == "wordnet":
        from ..resources.cache import fetch

        return KnowledgeGraph(read_wordnet(fetch("wordnet")), max_branches)
    path = Path(spec)
    if not path.is_file():
        raise InputError(f"knowledge {spec!r} is neither 'wordnet' nor a TSV triple file")
    return KnowledgeGraph(read_triples_tsv(path), max_branches)


@dataclass
class SentenceTree:
    """A flattened sentence tree (K-BERT §3.1–3.3).

    Attributes:
        tokens: (T,) the tokens (whatever the caller gave: ids or strings), each branch right
            after its entity.
        soft_positions: (T,) int soft-position indices (§3.2), from 0.
        visible: (T, T) bool visible matrix (§3.3), True = may attend.
        trunk: (T,) bool, True for sentence tokens, False for injected ones.
    """

    tokens: list
    soft_positions: list[int]
    visible: torch.Tensor
    trunk: list[bool]


def sentence_tree(
    segments: Sequence[Sequence[Hashable]], branches: dict[int, Sequence[Sequence[Hashable]]]
) -> SentenceTree:
    """Flatten a sentence tree.

    Args:
        segments: the sentence as consecutive token groups; an entity is one group (its
            tokens), every other token may be a group of its own (special tokens included).
        branches: group index → the branches attached to that entity, each a token list
            (relation tokens then tail tokens).

    Returns:
        The `SentenceTree`: sentence tokens numbered 0, 1, 2, … in order; branch tokens
        numbered on from the entity's last position; the visible matrix as described in the
        module doc.
    """
    tokens, soft, owner = [], [], []  # owner: (segment, branch) with branch -1 for the trunk
    pos = 0
    for s, seg in enumerate(segments):
        for t in seg:
            tokens.append(t)
            soft.append(pos)
            owner.append((s, -1))
            pos += 1
        for b, branch in enumerate(branches.get(s, ())):
            for k, t in enumerate(branch):
                tokens.append(t)
                soft.append(pos + k)  # pos - 1 is the entity's last position
                owner.append((s, b))
    seg_ids = torch.tensor([o[0] for o in owner])
    br_ids = torch.tensor([o[1] for o in owner])
    trunk = br_ids < 0
    same_branch = (seg_ids[:, None] == seg_ids[None, :]) & (br_ids[:, None] == br_ids[None, :])
    entity_and_branch = (seg_ids[:, None] == seg_ids[None, :]) & (trunk[:, None] ^ trunk[None, :])
    visible = (trunk[:, None] & trunk[None, :]) | same_branch | entity_and_branch  # (T, T)
    return SentenceTree(tokens, soft, visible, trunk.tolist())


def knowledge_row(
    tokenizer, text: str, graph: KnowledgeGraph, max_length: int, position_start: int = 0
) -> dict:
    """One K-BERT input row of ``text``: ``input_ids`` (T,), ``position_ids`` (T,) soft
    positions from ``position_start`` (the model's first position: RoBERTa pad_token_id + 1,
    else 0) and ``attention_mask`` (T, T) bool visible matrix.

    The sentence is tokenized (truncated to ``max_length``) as without knowledge; entities are
    the graph heads matched on its words; each branch is ``relation tail`` tokenized without
    special tokens. Branches that would pass ``max_length`` are left out (the last entities'
    first). With no entity, the row is the plain tokenization with an all-ones matrix and
    positions start, start + 1, …
    """
    enc = tokenizer(
        text, max_length=max_length, padding=False, return_offsets=True, return_tensors=None
    )
    ids, offsets = enc["input_ids"], [tuple(o) for o in enc["offset_mapping"]]
    if ids and isinstance(ids[0], list):  # a batch of one
        ids, offsets = ids[0], [tuple(o) for o in offsets[0]]
    spans = [(m.start(), m.end()) for m in _WORD.finditer(text)]
    matches = graph.match([text[a:b] for a, b in spans])
    segments: list[list[int]] = []
    branches: dict[int, list[list[int]]] = {}
    budget = max_length - len(ids)
    entity_of_token = {}
    for e, (first, end, _) in enumerate(matches):
        lo, hi = spans[first][0], spans[end - 1][1]
        for t, (a, b) in enumerate(offsets):
            if b > a and a >= lo and b <= hi:
                entity_of_token[t] = e
    seen = {}
    for t, token in enumerate(ids):
        e = entity_of_token.get(t)
        if e is not None and e in seen:
            segments[seen[e]].append(token)
            continue
        if e is not None:
            seen[e] = len(segments)
        segments.append([token])
    for e, s in seen.items():
        for relation, tail in matches[e][2]:
            piece = tokenizer.encode(f"{relation} {tail}", add_special_tokens=False)
            if len(piece) <= budget:
                branches.setdefault(s, []).append(piece)
                budget -= len(piece)
    tree = sentence_tree(segments, branches)
    return {
        "input_ids": list(tree.tokens),
        "position_ids": [position_start + p for p in tree.soft_positions],
        "attention_mask": tree.visible,
    }
