"""`EntityTagger`: raw text → entity spans with character offsets, types and scores."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from ...data.tables import repair_bio, tokenizer_words, word_ids_from_offsets, word_predictions
from ...inference.batches import FEATURE_KEYS, TokenRows, run_batches, text_list, tokenize_rows
from ...inference.limits import checked_max_length, input_limit
from ...inference.loading import load_into


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

    Args:
        path: a directory holding a ``*ForTokenClassification`` model and its tokenizer.
        max_length: texts are cut to this many tokens (default: `inference.limits.input_limit`).
        device: where it runs ("cpu", "cuda", a `torch.device`).
        dtype: parameter dtype: "auto" (default) is fp32, the faithful choice (transformers'
            numbers); "fp32", "bf16", "fastest" (bf16 where the CPU or GPU has bf16 units,
            else fp32) or a torch dtype (`inference.dtype.resolve_dtype`).

    Raises:
        ValueError: the directory's model has no "tokens" head, or ``max_length`` is over the
            model's limit.
    """

    def __init__(
        self,
        path: str | Path,
        max_length: int | None = None,
        *,
        device: str | torch.device = "cpu",
        dtype: str | torch.dtype | None = "auto",
    ) -> None:
        load_into(self, path, device=device, dtype=dtype, head=("tokens", "a token classifier"))
        self.max_length = checked_max_length(
            max_length, input_limit(self.model.config, self.tokenizer)
        )
        self.labels = self.model.config.label_names

    def tokenize(self, texts: str | Sequence[str], *, truncation_side: str = "right") -> TokenRows:
        """The one tokenization of a call (the server calls it once per request and hands the
        rows to `run_tokenized`): each text cut to ``max_length`` tokens, with its tokens'
        character offsets (``rows["offset_mapping"]``) and the text itself
        (``extra["texts"]``), which `run_tokenized` maps the tags back onto.

        Args:
            texts: one string or N strings.
            truncation_side: "right" or "left".

        Returns:
            `TokenRows` of N rows.

        Raises:
            InputError: an unknown ``truncation_side``.
        """
        texts = text_list(texts)
        tokens = tokenize_rows(
            self.tokenizer,
            texts,
            max_length=self.max_length,
            truncation_side=truncation_side,
            keys=(*FEATURE_KEYS, "offset_mapping"),
            return_offsets_mapping=True,
        )
        tokens.rows.setdefault("offset_mapping", [])
        tokens.extra["texts"] = texts
        return tokens

    @torch.inference_mode()
    def run_tokenized(
        self, tokens: TokenRows, *, batch_size: int = 32, max_batch_tokens: int | None = None
    ) -> list[list[Entity]]:
        """Per tokenized text (`tokenize`), in their order, its entities in order of
        appearance, through the engine's batch loop (`inference.batches.run_batches`).

        Raises:
            InputError: ``batch_size`` or ``max_batch_tokens`` < 1.
        """
        out: list[list[Entity]] = [[] for _ in range(len(tokens))]
        texts, offsets = tokens.extra["texts"], tokens.rows["offset_mapping"]
        for idx, probs in run_batches(
            tokens,
            lambda batch: self.model(**batch).logits.float().softmax(-1),  # (B, T, C)
            pad=self.tokenizer.pad_rows,
            batch_size=batch_size,
            max_batch_tokens=max_batch_tokens,
            device=self.device,
            keys=FEATURE_KEYS,
        ):
            for i, p in zip(idx, probs):
                out[i] = self._entities(texts[i], offsets[i], p)
        return out

    def __call__(
        self,
        texts: str | Sequence[str],
        batch_size: int = 32,
        *,
        max_batch_tokens: int | None = None,
        truncation_side: str = "right",
    ) -> list[list[Entity]]:
        """Per text, its entities in order of appearance: `run_tokenized` of `tokenize` (each
        text tokenized once).

        Raises:
            InputError: as `tokenize` and `run_tokenized`.
        """
        tokens = self.tokenize(texts, truncation_side=truncation_side)
        return self.run_tokenized(tokens, batch_size=batch_size, max_batch_tokens=max_batch_tokens)

    def _entities(self, text: str, offsets: list[list[int]], probs: torch.Tensor) -> list[Entity]:
        """The entities of one text from its tokens' character offsets (T_i pairs) and tag
        probabilities ((T, C), T ≥ T_i: the batch's padding rows are ignored)."""
        words = tokenizer_words(self.tokenizer, text, end=max((e for _, e in offsets), default=0))
        if not words:
            return []
        o_id = self.labels.index("O") if "O" in self.labels else 0
        wids = word_ids_from_offsets([tuple(o) for o in offsets], words)
        best = probs.argmax(-1).tolist()
        tag_ids = word_predictions(wids, best, len(words), default=o_id)
        first = {}
        for t, w in enumerate(wids):
            if w is not None and w not in first:
                first[w] = float(probs[t].max())
        tags = repair_bio([self.labels[j] for j in tag_ids])
        ents = []
        for typ, a, b in bio_spans(tags):
            s, e = words[a][0], words[b - 1][1]
            score = sum(first.get(w, 0.0) for w in range(a, b)) / (b - a)
            ents.append(Entity(typ, text[s:e], s, e, score))
        return ents
