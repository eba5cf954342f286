"""From documents to masked batches, and the pretraining losses.

Pipeline: `tokenize_documents` (text → `Segment`s with word-start flags) → `build_instances`
(NSP / SOP pairs or full-sentence packs) → optionally `static_maskings` (several fixed maskings
per instance, BERT's ``dupe_factor``) → `MLMCollator` (pads, masks dynamically unless masked
already, adds SBO targets) → `PretrainingModel` (model + heads → loss and its parts).

Batch fields (B batch, T longest sequence in the batch): ``input_ids``, ``attention_mask``,
``token_type_ids``, ``labels`` (B, T) int64 (-100 = not predicted), ``pair_labels`` (B,) int64
(when the instances have pair labels), and for SBO ``sbo_left``/``sbo_right``/``sbo_rel`` (B, T)
int64: the boundary positions and the offset inside the span of each predicted token.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file
from torch import nn
from torch.nn import functional as F

from ..data.batching import IGNORE_INDEX
from ..errors import InputError
from ..files import atomic_write
from .instances import Instance, Segment, SpecialIds, nsp_instances, packed_instances, sop_instances
from .masking import MaskingConfig, chinese_word_ids, mask_tokens, word_ids_from_starts, word_starts
from .units import step_denominators

__all__ = [
    "OBJECTIVES",
    "tokenize_documents",
    "build_instances",
    "static_maskings",
    "MLMCollator",
    "PretrainingModel",
    "reduce_term",
    "evaluate_mlm",
    "unigram_log_probs",
]

OBJECTIVES = ("mlm", "nsp", "sop", "sbo")


def tokenize_documents(
    docs: Sequence[Sequence[str]], tokenizer, *, chinese_words: bool = False
) -> list[list[Segment]]:
    """Tokenise each sentence without special tokens; word starts from the token strings
    (WordPiece ``##``, BPE ``Ġ``, Unigram ``▁``), from the gold word spans of sentences that
    carry ``.words`` (`bertfamily.corpora.Sentence`), or, with ``chinese_words``, from jieba
    words over the character offsets. Sentences that carry ``.entities`` (character spans, see
    `bertfamily.corpora.Sentence`) get them as token ranges for entity masking."""
    backend, scheme = tokenizer.backend, tokenizer.scheme
    flat = [s for d in docs for s in d]
    encodings = backend.encode_batch(flat, add_special_tokens=False)
    segments, i = [], 0
    for d in docs:
        doc = []
        for text in d:
            enc = encodings[i]
            i += 1
            if not enc.ids:
                continue
            gold = getattr(text, "words", ())
            if gold or chinese_words:
                wid = chinese_word_ids(
                    text, enc.offsets, np.zeros(len(enc.ids), bool), words=gold or None
                )
                starts = np.concatenate([[True], wid[1:] != wid[:-1]])
            else:
                starts = word_starts(enc.tokens, scheme)
            doc.append(
                Segment(
                    np.asarray(enc.ids, np.int32),
                    starts,
                    _token_spans(getattr(text, "entities", ()), enc.offsets),
                )
            )
        if doc:
            segments.append(doc)
    return segments


def _token_spans(char_spans, offsets) -> list[tuple[int, int]]:
    """Character spans → token ranges (end exclusive): the tokens whose characters lie inside
    the span; spans covering no token are dropped."""
    out = []
    for cs, ce in char_spans:
        inside = [i for i, (s, e) in enumerate(offsets) if e > s and s >= cs and e <= ce]
        if inside:
            out.append((inside[0], inside[-1] + 1))
    return out


def build_instances(
    docs: list[list[Segment]],
    kind: str,
    max_length: int,
    special: SpecialIds,
    seed: int = 0,
    short_seq_prob: float = 0.1,
) -> list[Instance]:
    """``kind``: "nsp" | "sop" | "packed" (FULL-SENTENCES) | "doc_packed" (DOC-SENTENCES);
    see `bertfamily.objectives.instances`.

    Raises:
        ValueError: unknown kind.
    """
    rng = np.random.default_rng(seed)
    if kind == "nsp":
        return nsp_instances(docs, max_length, special, rng, short_seq_prob)
    if kind == "sop":
        return sop_instances(docs, max_length, special, rng, short_seq_prob)
    if kind == "packed":
        return packed_instances(docs, max_length, special)
    if kind == "doc_packed":
        return packed_instances(docs, max_length, special, cross_documents=False)
    raise InputError(f"instance kind must be 'nsp', 'sop', 'packed' or 'doc_packed', got {kind!r}")


@dataclass
class MaskedInstance:
    """An `Instance` with a fixed masking: input_ids corrupted, labels (T,) -100 or target."""

    instance: Instance
    input_ids: np.ndarray
    labels: np.ndarray


def _mask(inst: Instance, masking: MaskingConfig, rng, vocab_size, mask_id, special_ids):
    wid = word_ids_from_starts(inst.starts, inst.special)
    return mask_tokens(
        inst.input_ids,
        inst.special,
        masking,
        rng,
        vocab_size=vocab_size,
        mask_token_id=mask_id,
        word_ids=wid,
        entities=inst.entities,
        special_ids=special_ids,
    )


def static_maskings(
    instances: Sequence[Instance],
    masking: MaskingConfig,
    copies: int,
    *,
    vocab_size: int,
    mask_token_id: int,
    special_ids: Sequence[int],
    seed: int = 0,
) -> list[MaskedInstance]:
    """Static masking: ``copies`` independently masked copies of every instance, fixed once
    (BERT's ``dupe_factor``; RoBERTa §4.1 compares it with dynamic masking)."""
    rng = np.random.default_rng((seed, 7))
    out = []
    for _ in range(copies):
        for inst in instances:
            r = _mask(inst, masking, rng, vocab_size, mask_token_id, special_ids)
            out.append(MaskedInstance(inst, r.input_ids, r.labels))
    return out


def _spans_of(chosen: np.ndarray) -> list[tuple[int, int]]:
    """Maximal runs of True as (start, end exclusive)."""
    edges = np.diff(np.concatenate([[0], chosen.astype(np.int8), [0]]))
    return list(zip(np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)))


class MLMCollator:
    """``(examples, rng) -> batch`` for `bertfamily.train.IndexedBatches`.

    Examples are `Instance`s (masked here, dynamically: a new masking every time, from
    ``rng``) or `MaskedInstance`s (static masking kept). Sequences are right-padded with
    ``pad_token_id``.

    Args:
        masking: `MaskingConfig`; vocab_size: V; mask_token_id / pad_token_id: ids;
        special_ids: never used as random replacements.
        sbo: add the SBO fields (spans = maximal runs of predicted tokens).
    """

    def __init__(
        self,
        masking: MaskingConfig,
        *,
        vocab_size: int,
        mask_token_id: int,
        pad_token_id: int,
        special_ids: Sequence[int],
        sbo: bool = False,
    ) -> None:
        self.masking, self.vocab_size = masking, vocab_size
        self.mask_token_id, self.pad_token_id = mask_token_id, pad_token_id
        self.special_ids, self.sbo = list(special_ids), sbo

    def __call__(self, examples: list, rng: np.random.Generator) -> dict[str, torch.Tensor]:
        """Examples → batch: input_ids, attention_mask, token_type_ids, labels (B, T) int64
        (labels -100 where nothing is predicted); pair_labels (B,) int64 when every example has
        one; the SBO fields when ``sbo``."""
        rows = []
        for ex in examples:
            if isinstance(ex, MaskedInstance):
                rows.append((ex.instance, ex.input_ids, ex.labels))
            else:
                r = _mask(
                    ex, self.masking, rng, self.vocab_size, self.mask_token_id, self.special_ids
                )
                rows.append((ex, r.input_ids, r.labels))
        B, T = len(rows), max(len(r[0]) for r in rows)
        ids = np.full((B, T), self.pad_token_id, np.int64)
        attn = np.zeros((B, T), np.int64)
        types = np.zeros((B, T), np.int64)
        labels = np.full((B, T), IGNORE_INDEX, np.int64)
        for b, (inst, x, y) in enumerate(rows):
            n = len(x)
            ids[b, :n], attn[b, :n], types[b, :n], labels[b, :n] = x, 1, inst.token_type_ids, y
        batch = {
            "input_ids": ids,
            "attention_mask": attn,
            "token_type_ids": types,
            "labels": labels,
        }
        pair = [inst.pair_label for inst, _, _ in rows]
        if all(p >= 0 for p in pair):
            batch["pair_labels"] = np.asarray(pair, np.int64)
        batch = {k: torch.from_numpy(v) for k, v in batch.items()}
        if self.sbo:
            batch.update(self._sbo_fields(labels))
        return batch

    @staticmethod
    def _sbo_fields(labels: np.ndarray) -> dict[str, torch.Tensor]:
        """SBO targets from (B, T) labels: for each predicted token of a maximal run s..e-1,
        the left boundary s-1, the right boundary e and its offset i - s."""
        B, T = labels.shape
        left, right, rel = (np.zeros((B, T), np.int64) for _ in range(3))
        for b in range(B):
            for s, e in _spans_of(labels[b] != IGNORE_INDEX):
                left[b, s:e], right[b, s:e] = s - 1, e
                rel[b, s:e] = np.arange(e - s)
        return {
            "sbo_left": torch.from_numpy(left),
            "sbo_right": torch.from_numpy(right),
            "sbo_rel": torch.from_numpy(rel),
        }


def reduce_term(
    values: torch.Tensor,
    term: str,
    denominators: dict[str, float] | None,
    empty: torch.Tensor | None = None,
) -> torch.Tensor:
    """One loss term from its per-unit values (U,): their mean, or with ``denominators`` their
    sum divided by ``denominators[term]`` (the units of the whole optimizer step, so that an
    accumulated step equals one merged batch). No units: 0, still connected to ``empty``
    (default ``values``; pass the logits so every parameter stays in the graph)."""
    if not len(values):
        return (values if empty is None else empty).sum() * 0.0
    if denominators is None:
        return values.mean()
    return values.sum() / denominators[term]


class PretrainingModel(nn.Module):
    """A `Model` (with an MLM head, optionally a pair head) plus an optional SBO head; its
    ``forward(batch)`` returns ``(loss, parts)``, the sum of the objectives' mean
    cross-entropies and each of them (``mlm_loss``, ``mlm_accuracy``, ``pair_loss``,
    ``pair_accuracy``, ``sbo_loss``) as detached 0-d tensors.

    The MLM head runs only at the predicted positions (``masked_positions``), as the original
    BERT gathered them before the vocabulary projection.

    Gradient accumulation: `counts` gives the units of each term in a batch (``mlm``: predicted
    tokens, ``pair``: sequences with a pair label, ``sbo``: span tokens); pass it to the
    `Trainer` as ``count_fn`` and call ``forward(batch, denominators)``: each term (and its
    accuracy) is then summed over its units and divided by ``denominators[term]``, so the
    accumulated step equals one merged batch (see `bertfamily.train.loop`).
    """

    def __init__(
        self, model: nn.Module, sbo_head: nn.Module | None = None, pair_objective: bool = True
    ) -> None:
        super().__init__()
        self.model, self.sbo_head = model, sbo_head
        self.pair_objective = pair_objective and model.pair_head is not None

    @property
    def config(self):
        """The wrapped model's config."""
        return self.model.config

    def counts(self, batch: dict[str, torch.Tensor]) -> dict[str, int]:
        """The units of each loss term in ``batch`` (the `Trainer`'s ``count_fn``): ``mlm``
        predicted tokens, ``pair`` sequences with a pair label (0 without the pair objective),
        ``sbo`` span tokens (0 without SBO)."""
        masked = int((batch["labels"] != IGNORE_INDEX).sum())
        pairs = len(batch["pair_labels"]) if self.pair_objective and "pair_labels" in batch else 0
        return {"mlm": masked, "pair": pairs, "sbo": masked if self.sbo_head is not None else 0}

    def forward(self, batch: dict[str, torch.Tensor], denominators: dict[str, float] | None = None):
        """Batch from `MLMCollator` → (loss, parts), as described in the class docstring; with
        ``denominators`` (keys of `counts`) each term's sum over its units divided by its
        denominator instead of its mean."""
        denominators = step_denominators(denominators)  # a Trainer step's
        labels = batch["labels"]
        selected = labels != IGNORE_INDEX  # (B, T)
        out = self.model(
            batch["input_ids"],
            batch["attention_mask"],
            batch.get("token_type_ids") if self.model.config.type_vocab_size else None,
            masked_positions=selected,
        )
        targets = labels[selected]  # (M,), same row-major order as the gathered logits

        def reduce(values: torch.Tensor, term: str, empty: torch.Tensor) -> torch.Tensor:
            return reduce_term(values, term, denominators, empty)

        token_ce = F.cross_entropy(out.logits.float(), targets, reduction="none")
        mlm = reduce(token_ce, "mlm", out.logits)
        parts = {
            "mlm_loss": mlm.detach(),
            "mlm_accuracy": reduce(
                (out.logits.argmax(-1) == targets).float().detach(), "mlm", out.logits
            ).detach(),
        }
        loss = mlm
        if self.pair_objective and "pair_labels" in batch:
            pair_labels = batch["pair_labels"]
            pair_ce = F.cross_entropy(out.pair_logits.float(), pair_labels, reduction="none")
            pair = reduce(pair_ce, "pair", out.pair_logits)
            parts["pair_loss"] = pair.detach()
            parts["pair_accuracy"] = reduce(
                (out.pair_logits.argmax(-1) == pair_labels).float().detach(),
                "pair",
                out.pair_logits,
            ).detach()
            loss = loss + pair
        if self.sbo_head is not None:
            rows = selected.nonzero()[:, 0]
            sbo_logits = self.sbo_head(
                out.last_hidden_state,
                rows,
                batch["sbo_left"][selected],
                batch["sbo_right"][selected],
                batch["sbo_rel"][selected],
            )
            sbo_ce = F.cross_entropy(sbo_logits.float(), targets, reduction="none")
            sbo = reduce(sbo_ce, "sbo", sbo_logits)
            parts["sbo_loss"] = sbo.detach()
            loss = loss + sbo
        return loss, parts

    def save_pretrained(self, path) -> None:
        """The `Model` in the Hugging Face layout (+ ``sbo_head.safetensors`` with SBO)."""
        self.model.save_pretrained(path)
        if self.sbo_head is not None:
            state = {
                k: v.detach().cpu().contiguous() for k, v in self.sbo_head.state_dict().items()
            }
            atomic_write(
                Path(path) / "sbo_head.safetensors", lambda tmp: save_file(state, str(tmp))
            )


def unigram_log_probs(
    instances: Sequence[Instance], vocab_size: int, special_ids: Sequence[int]
) -> torch.Tensor:
    """(V,) float64 log-frequency of each token over the maskable positions of the instances
    (add-one smoothing): the unigram baseline predictor.

    Only ids that can never be a prediction target get -inf: special ids that occur in the
    instances at special positions only ([CLS], [SEP], padding). Every other id keeps a finite
    log-probability, so held-out targets the training data never showed — [UNK] included, a
    special token that masking can choose — give a finite baseline loss and perplexity."""
    counts = np.ones(vocab_size, np.float64)
    structural = np.zeros(vocab_size, bool)
    maskable = np.zeros(vocab_size, bool)
    for inst in instances:
        np.add.at(counts, inst.input_ids[~inst.special], 1)
        structural[inst.input_ids[inst.special]] = True
        maskable[inst.input_ids[~inst.special]] = True
    never_target = np.zeros(vocab_size, bool)
    never_target[list(special_ids)] = True
    counts[never_target & structural & ~maskable] = 0
    with np.errstate(divide="ignore"):
        return torch.from_numpy(np.log(counts / counts.sum()))


@torch.no_grad()
def evaluate_mlm(
    pmodel: PretrainingModel, batches, unigram: torch.Tensor | None = None
) -> dict[str, float]:
    """Held-out metrics over fixed batches: ``loss`` (MLM cross-entropy per predicted token),
    ``perplexity`` = exp(loss), ``accuracy`` (top-1 at predicted tokens), ``pair_accuracy``;
    with ``unigram`` (V,) log-probs, the same for the unigram-frequency baseline on the same
    positions (``baseline_loss``, ``baseline_perplexity``, ``baseline_accuracy``)."""
    device = next(pmodel.parameters()).device
    total = correct = pair_total = pair_correct = 0
    nll = base_nll = base_correct = 0.0
    best = int(unigram.argmax()) if unigram is not None else None
    for batch in batches:
        batch = {k: v.to(device) for k, v in batch.items()}
        sel = batch["labels"] != IGNORE_INDEX
        out = pmodel.model(
            batch["input_ids"],
            batch["attention_mask"],
            batch.get("token_type_ids") if pmodel.model.config.type_vocab_size else None,
            masked_positions=sel,
        )
        y = batch["labels"][sel]
        nll += F.cross_entropy(out.logits.float(), y, reduction="sum").item()
        correct += (out.logits.argmax(-1) == y).sum().item()
        total += len(y)
        if unigram is not None:
            base_nll -= unigram.to(device)[y].sum().item()
            base_correct += (y == best).sum().item()
        if out.pair_logits is not None and "pair_labels" in batch:
            pair_correct += (out.pair_logits.argmax(-1) == batch["pair_labels"]).sum().item()
            pair_total += len(batch["pair_labels"])
    if total == 0:
        raise InputError("the evaluation batches hold no predicted token")
    result = {
        "loss": nll / total,
        "perplexity": math.exp(nll / total),
        "accuracy": correct / total,
        "tokens": float(total),
    }
    if unigram is not None:
        result.update(
            baseline_loss=base_nll / total,
            baseline_perplexity=math.exp(base_nll / total),
            baseline_accuracy=base_correct / total,
        )
    if pair_total:
        result["pair_accuracy"] = pair_correct / pair_total
    return result
