"""Fill-mask: the most likely tokens at each mask position of a text.

Works for every model directory with an MLM head (``*ForMaskedLM`` / ``*ForPreTraining``) and a
tokenizer. Both spellings of the mask token, ``[MASK]`` and ``<mask>``, are accepted and mapped
to the tokenizer's own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from ...errors import InputError
from ...inference.batches import FEATURE_KEYS, TokenRows, run_batches, tokenize_rows
from ...inference.limits import input_limit
from ...inference.loading import load_into

__all__ = ["FillMask", "Prediction", "MASK_SPELLINGS"]

MASK_SPELLINGS = ("[MASK]", "<mask>")


@dataclass
class Prediction:
    """One candidate: ``token`` (its string), ``token_id``, ``score`` (softmax probability)
    and ``sequence`` (the text with this mask filled in, decoded)."""

    token: str
    token_id: int
    score: float
    sequence: str


class FillMask:
    """``FillMask(model_dir)(text, top_k=5) -> [[Prediction]]``, one list per mask in ``text``.

    Args:
        path: a model directory with an MLM head and a tokenizer.
        device: where it runs ("cpu", "cuda", a `torch.device`).
        dtype: parameter dtype: "auto" (default) is fp32, the faithful choice (transformers'
            numbers); "fp32", "bf16", "fastest" (bf16 where the CPU or GPU has bf16 units,
            else fp32) or a torch dtype (`inference.dtype.resolve_dtype`).

    Raises:
        ValueError: the checkpoint has no MLM head (e.g. all-MiniLM-L6-v2: continue pretraining
            it first, see `bertfamily.recipes.pretrain`).
    """

    def __init__(
        self,
        path: str | Path,
        device: str | torch.device = "cpu",
        dtype: str | torch.dtype | None = "auto",
    ) -> None:
        self.path = load_into(self, path, device=device, dtype=dtype).directory
        if self.model.mlm_head is None:
            raise InputError(
                f"{self.path} has no masked-LM head; fill-mask needs one "
                f"(continue pretraining the model to train one)"
            )

    def _normalise(self, text: str) -> str:
        mine = self.tokenizer.mask_token
        for spelling in MASK_SPELLINGS:
            if spelling != mine:
                text = text.replace(spelling, mine)
        return text

    def tokenize(self, texts: str | Sequence[str]) -> TokenRows:
        """The one tokenization of a call: each text with its mask spellings mapped to the
        tokenizer's own (`MASK_SPELLINGS`), never cut (a text over the model's limit is
        refused: a cut could drop a mask).

        Args:
            texts: one string or N strings.

        Returns:
            `TokenRows` of N rows.

        Raises:
            InputError: a text with no mask token, or longer than the model's limit.
        """
        texts = [self._normalise(t) for t in ([texts] if isinstance(texts, str) else texts)]
        limit = input_limit(self.model.config, self.tokenizer)
        # One token past the limit tells "too long" without tokenising a huge text whole.
        tokens = tokenize_rows(self.tokenizer, texts, max_length=limit + 1)
        where = "the text" if len(texts) == 1 else "text {}"
        mask_id = self.tokenizer.mask_token_id
        for i, ids in enumerate(tokens.rows["input_ids"]):
            if len(ids) > limit:
                raise InputError(
                    f"{where.format(i)} is more than {limit} tokens; the model takes at most "
                    f"{limit}"
                )
            if mask_id not in ids:
                raise InputError(
                    f"no mask token in {where.format(i)}; write {self.tokenizer.mask_token} "
                    f"(or one of {MASK_SPELLINGS}) where a word is missing"
                )
        return tokens

    @torch.inference_mode()
    def run_tokenized(
        self,
        tokens: TokenRows,
        *,
        top_k: int = 5,
        batch_size: int = 32,
        max_batch_tokens: int | None = None,
    ) -> list[list[list[Prediction]]]:
        """Per tokenized text (`tokenize`), in their order, per mask (left to right) its
        ``top_k`` predictions, best first, through the engine's batch loop
        (`inference.batches.run_batches`).

        Raises:
            InputError: ``top_k``, ``batch_size`` or ``max_batch_tokens`` < 1.
        """
        if top_k < 1:
            raise InputError(f"top_k must be >= 1, got {top_k}")
        special = self.tokenizer.all_special_ids
        out: list[list[list[Prediction]]] = [[] for _ in range(len(tokens))]

        def step(batch: dict[str, torch.Tensor]) -> list[tuple[list, list]]:
            ids = batch["input_ids"]
            selected = ids == self.tokenizer.mask_token_id  # (B, T), the masks
            types = batch.get("token_type_ids") if self.model.config.type_vocab_size else None
            logits = self.model(
                ids, batch["attention_mask"], types, masked_positions=selected
            ).logits  # (masks of every row, row by row, V)
            probs = logits.float().softmax(-1)
            probs[:, special] = 0.0  # never propose [CLS], [PAD], ...
            top = probs.topk(min(top_k, probs.shape[-1]))
            counts = selected.sum(-1).tolist()  # masks per row
            # per row: its (masks, k) scores and token ids
            return list(zip(top.values.split(counts), top.indices.split(counts)))

        for idx, rows in run_batches(
            tokens,
            step,
            pad=self.tokenizer.pad_rows,
            batch_size=batch_size,
            max_batch_tokens=max_batch_tokens,
            device=self.device,
            keys=FEATURE_KEYS,
        ):
            for i, (scores, token_ids) in zip(idx, rows):
                out[i] = self._predictions(tokens.rows["input_ids"][i], scores, token_ids)
        return out

    def __call__(self, text: str, top_k: int = 5) -> list[list[Prediction]]:
        """Predictions for each mask of ``text``, best first: `run_tokenized` of `tokenize`.

        Raises:
            ValueError: no mask token in ``text``, ``top_k`` < 1, or the text is too long.
        """
        if top_k < 1:
            raise InputError(f"top_k must be >= 1, got {top_k}")
        return self.run_tokenized(self.tokenize(text), top_k=top_k)[0]

    def _predictions(
        self, ids: list[int], scores: torch.Tensor, token_ids: torch.Tensor
    ) -> list[list[Prediction]]:
        """One text's predictions: ``ids`` its (T,) tokens; ``scores``, ``token_ids`` (M, k),
        M its masks left to right."""
        where = [t for t, x in enumerate(ids) if x == self.tokenizer.mask_token_id]
        results = []
        for pos, row_scores, row_ids in zip(where, scores.tolist(), token_ids.tolist()):
            preds = []
            for score, t in zip(row_scores, row_ids):
                filled = list(ids)
                filled[pos] = t
                preds.append(
                    Prediction(
                        self.tokenizer.convert_ids_to_tokens(t),
                        t,
                        score,
                        self.tokenizer.decode(filled),
                    )
                )
            results.append(preds)
        return results
