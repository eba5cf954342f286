"""TinyBERT's data augmentation for task distillation (Jiao et al. 2020 §3.2 and Algorithm 1).

For every word w_i of a text (whitespace words): if w_i is a single word piece, its candidates
are the K most probable whole-word pieces a masked LM predicts at w_i's position with w_i
replaced by [MASK] (the rest of the text intact); otherwise (several pieces) its candidates are
the K whole words nearest to it in an embedding space (the paper uses GloVe). Then N_a times:
copy the text and replace each word, with probability p_t, by a random candidate. The paper's
values: p_t = 0.4, N_a = 20, K = 15 (`AugmentConfig` defaults).

Our embedding space is the model's own token-embedding table (GloVe is not available
offline): a word's vector is the mean of its pieces' rows, its neighbours are the
single-piece whole words (no ``##`` continuation, no special token) of highest cosine
similarity. A model without an MLM head has no predictions: then every word takes embedding
neighbours, and `AugmentStats.mlm_words` says so (0).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch.nn import functional as F

__all__ = ["AugmentConfig", "AugmentStats", "Augmenter"]


@dataclass(frozen=True)
class AugmentConfig:
    """TinyBERT augmentation settings (Jiao et al. 2020 §4.2: p_t = 0.4, N_a = 20, K = 15).

    Attributes:
        replace_prob: p_t, the probability of replacing each word in a sample.
        samples: N_a, augmented samples per example (the original is kept besides them).
        candidates: K, candidates per word (masked-LM top-K or embedding neighbours).
        mlm: use masked-LM predictions for single-piece words (needs a model with an MLM
            head); False: embedding neighbours for every word.
    """

    replace_prob: float = 0.4
    samples: int = 20
    candidates: int = 15
    mlm: bool = True

    def __post_init__(self) -> None:
        if not 0.0 <= self.replace_prob <= 1.0:
            raise ValueError(f"replace_prob must lie in [0, 1], got {self.replace_prob}")
        if self.samples < 1 or self.candidates < 1:
            raise ValueError(
                f"samples and candidates must be >= 1, got {self.samples}, {self.candidates}"
            )


@dataclass
class AugmentStats:
    """Counts over one `Augmenter.augment` call: ``examples`` in, ``samples`` out (without the
    originals), ``words`` seen in the samples, ``replaced`` of them, and the words whose
    candidates came from the masked LM (``mlm_words``) or from embedding neighbours
    (``embedding_words``), counted once per example word."""

    examples: int = 0
    samples: int = 0
    words: int = 0
    replaced: int = 0
    mlm_words: int = 0
    embedding_words: int = 0

    @property
    def replace_rate(self) -> float:
        """Replaced words ÷ words in the samples (≈ ``replace_prob``)."""
        return self.replaced / max(self.words, 1)


class Augmenter:
    """Candidate words from a model and its tokenizer; `augment` makes the samples.

    Args:
        model: a `bertfamily.model.Model` (its token-embedding table gives the neighbours; its
            MLM head, if any, the predictions). Run in eval mode, without gradients.
        tokenizer: the model's `bertfamily.tokenization.Tokenizer` (needs a mask token for
            the masked-LM candidates).
        config: `AugmentConfig`.

    Raises:
        ValueError: ``config.mlm`` with a model without an MLM head or a tokenizer without a
            mask token.
    """

    def __init__(self, model, tokenizer, config: AugmentConfig = AugmentConfig()) -> None:
        if config.mlm and (model.mlm_head is None or tokenizer.mask_token_id is None):
            raise ValueError(
                "masked-LM candidates need a model with an MLM head and a tokenizer with a "
                "mask token; use AugmentConfig(mlm=False) for embedding neighbours only"
            )
        self.model, self.tok, self.config = model, tokenizer, config
        vocab = tokenizer.backend.get_vocab()
        special = set(tokenizer.all_special_ids)
        # whole-word pieces: candidates of both kinds are drawn from these
        word_ids = sorted(
            i
            for t, i in vocab.items()
            if i not in special and not t.startswith("##") and any(c.isalpha() for c in t)
        )
        self.word_ids = torch.tensor(word_ids)
        self._id_to_token = {i: t for t, i in vocab.items()}
        table = model.encoder.embeddings.token.weight.detach().float()  # (V, E)
        self._table = table
        self._words = F.normalize(table[self.word_ids], dim=-1)  # (W, E)
        self._is_word = torch.zeros(table.shape[0], dtype=torch.bool)
        self._is_word[self.word_ids] = True

    def _pieces(self, word: str) -> list[int]:
        return self.tok.backend.encode(word, add_special_tokens=False).ids

    def neighbours(self, pieces: Sequence[int]) -> list[str]:
        """The K whole words nearest (cosine) to the mean embedding of ``pieces``, the
        word's own single piece excluded."""
        v = F.normalize(self._table[list(pieces)].mean(0), dim=-1)  # (E,)
        sims = self._words @ v  # (W,)
        if len(pieces) == 1:
            sims[self.word_ids == pieces[0]] = -2.0
        top = sims.topk(min(self.config.candidates, len(sims))).indices
        return [self._id_to_token[int(self.word_ids[i])] for i in top]

    @torch.no_grad()
    def _mlm_candidates(self, pieces: list[list[int]], positions: list[int]) -> list[list[str]]:
        """For each word index in ``positions`` (single-piece words): the K most probable
        whole-word pieces at its position with it masked, in one batch."""
        if not positions:
            return []
        tok = self.tok
        flat = [tok.cls_token_id] + [p for ps in pieces for p in ps] + [tok.sep_token_id]
        where, k = [], 1
        for ps in pieces:
            where.append(k)
            k += len(ps)
        ids = torch.tensor(flat).repeat(len(positions), 1)  # (M, T)
        rows = torch.arange(len(positions))
        cols = torch.tensor([where[p] for p in positions])
        ids[rows, cols] = tok.mask_token_id
        logits = self.model(ids, torch.ones_like(ids)).logits[rows, cols]  # (M, V)
        logits[:, ~self._is_word[: logits.shape[1]]] = float("-inf")
        logits[rows, torch.tensor([pieces[p][0] for p in positions])] = float("-inf")
        top = logits.topk(self.config.candidates, dim=-1).indices  # (M, K)
        return [[self._id_to_token[int(i)] for i in row] for row in top]

    def candidates(self, words: Sequence[str]) -> tuple[list[list[str]], list[str]]:
        """(candidates of each word, the source of each: "mlm" or "embedding"); a word that
        encodes to no piece gets no candidates (source "")."""
        pieces = [self._pieces(w) for w in words]
        single = [i for i, ps in enumerate(pieces) if len(ps) == 1] if self.config.mlm else []
        out: list[list[str]] = [[] for _ in words]
        source = [""] * len(words)
        for i, c in zip(single, self._mlm_candidates(pieces, single)):
            out[i], source[i] = c, "mlm"
        for i, ps in enumerate(pieces):
            if ps and not source[i]:
                out[i], source[i] = self.neighbours(ps), "embedding"
        return out, source

    def augment(
        self, texts: Sequence[str], rng: np.random.Generator
    ) -> tuple[list[list[str]], AugmentStats]:
        """``samples`` augmented copies of every text (Algorithm 1): each word replaced with
        probability ``replace_prob`` by a uniformly chosen candidate.

        Returns:
            (one list of N_a texts per input text, `AugmentStats`).
        """
        self.model.eval()
        stats = AugmentStats(examples=len(texts))
        out = []
        for text in texts:
            words = text.split()
            cands, source = self.candidates(words)
            stats.mlm_words += source.count("mlm")
            stats.embedding_words += source.count("embedding")
            samples = []
            for _ in range(self.config.samples):
                new = list(words)
                for i, c in enumerate(cands):
                    if c and rng.random() < self.config.replace_prob:
                        new[i] = c[int(rng.integers(len(c)))]
                        stats.replaced += 1
                stats.words += len(words)
                samples.append(" ".join(new))
            stats.samples += len(samples)
            out.append(samples)
        return out, stats
