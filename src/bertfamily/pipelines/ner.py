"""`EntityTagger`: raw text → entity spans with character offsets, types and scores."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from ..data.batching import sorted_batches
from ..data.tables import repair_bio, tokenizer_words, word_ids_from_offsets, word_predictions
from ..errors import InputError
from .batching import checked_max_length, input_limit, token_lengths
from .loading import load_model_and_tokenizer, to_device


@dataclass
class Entity:
    """``text`` == the input[start:end] (character offsets); ``score``: mean probability of
    the entity's word tags."""

    type: str
    text: str
    start: int
    end: int
    score: float


def bio_spans(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """(type, first word, last word + 1) of each entity of a BIO or BIOES tag sequence
    (S- starts and ends an entity, E- ends one; an I-/E- of another type starts a new one)."""
    spans, cur = [], None
    for i, tag in enumerate(list(tags) + ["O"]):
        kind, typ = tag[:1], tag[2:]
        if cur and (kind in ("O", "B", "S") or typ != cur[0]):
            spans.append((cur[0], cur[1], i))
            cur = None
        if kind in ("B", "S") or (kind in ("I", "E") and cur is None):
            cur = (typ, i)
        if kind in ("E", "S") and cur:
            spans.append((cur[0], cur[1], i + 1))
            cur = None
    return spans


class EntityTagger:
    """A fine-tuned token-classification directory, ready to tag raw text.

    Words are found the way the model's tokenizer splits them (`tasks.data.tokenizer_words`:
    its normaliser and pre-tokeniser with offsets into the input), so every script works:
    with BERT's tokenizer each CJK character is a word of its own, as in Chinese CoNLL data
    (one character per line), and punctuation is split off words. Each word takes the tag of
    its first sub-token; entity offsets are character offsets into the input string.

    Raises:
        ValueError: the directory's model has no "tokens" head, or ``max_length`` is over the
            model's limit (default: `batching.input_limit`).
    """

    def __init__(
        self,
        path: str | Path,
        max_length: int | None = None,
        *,
        device: str | torch.device = "cpu",
        dtype: str | torch.dtype | None = None,
    ) -> None:
        loaded = load_model_and_tokenizer(path, device=device, dtype=dtype)
        self.model, self.tokenizer, self.device = loaded.model, loaded.tokenizer, loaded.device
        if self.model.task != "tokens":
            raise InputError(f"{path} holds a {self.model.task!r} head, not a token classifier")
        self.max_length = checked_max_length(
            max_length, input_limit(self.model.config, self.tokenizer)
        )
        self.labels = self.model.config.label_names

    @torch.no_grad()
    def __call__(self, texts: str | Sequence[str], batch_size: int = 32) -> list[list[Entity]]:
        """Per text, its entities in order of appearance."""
        texts = [texts] if isinstance(texts, str) else list(texts)
        out: list[list[Entity]] = [[] for _ in texts]
        o_id = self.labels.index("O") if "O" in self.labels else 0
        for idx in sorted_batches(
            token_lengths(self.tokenizer, texts, max_length=self.max_length), batch_size
        ):
            chunk = [texts[i] for i in idx]
            enc = self.tokenizer(chunk, max_length=self.max_length, return_offsets=True)
            offsets = enc.pop("offset_mapping").tolist()
            probs = (
                self.model(**to_device(enc, self.device)).logits.float().softmax(-1)
            )  # (B, T, C)
            for row, text, offs, p in zip(idx, chunk, offsets, probs):
                words = tokenizer_words(self.tokenizer, text, end=max(e for _, e in offs))
                if not words:
                    continue
                wids = word_ids_from_offsets([tuple(o) for o in offs], words)
                best = p.argmax(-1).tolist()
                tag_ids = word_predictions(wids, best, len(words), default=o_id)
                first = {}
                for t, w in enumerate(wids):
                    if w is not None and w not in first:
                        first[w] = float(p[t].max())
                tags = repair_bio([self.labels[j] for j in tag_ids])
                ents = []
                for typ, a, b in bio_spans(tags):
                    s, e = words[a][0], words[b - 1][1]
                    score = sum(first.get(w, 0.0) for w in range(a, b)) / (b - a)
                    ents.append(Entity(typ, text[s:e], s, e, score))
                out[row] = ents
        return out
