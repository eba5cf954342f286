"""Fill-mask: the most likely tokens at each mask position of a text.

Works for every model directory with an MLM head (``*ForMaskedLM`` / ``*ForPreTraining``) and a
tokenizer. Both spellings of the mask token, ``[MASK]`` and ``<mask>``, are accepted and mapped
to the tokenizer's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import InputError
from .batching import input_limit

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
        device: torch device; dtype: parameter dtype (None: float32).

    Raises:
        ValueError: the checkpoint has no MLM head (e.g. all-MiniLM-L6-v2: continue pretraining
            it first, see `bertfamily.recipes.pretrain`).
    """

    def __init__(
        self,
        path: str | Path,
        device: str | torch.device = "cpu",
        dtype: str | torch.dtype | None = None,
    ) -> None:
        from .loading import load_model_and_tokenizer

        loaded = load_model_and_tokenizer(path, device=device, dtype=dtype)
        self.path, self.model, self.tokenizer = loaded.directory, loaded.model, loaded.tokenizer
        if self.model.mlm_head is None:
            raise InputError(
                f"{self.path} has no masked-LM head; fill-mask needs one "
                f"(continue pretraining the model to train one)"
            )
        self.device = device

    def _normalise(self, text: str) -> str:
        mine = self.tokenizer.mask_token
        for spelling in MASK_SPELLINGS:
            if spelling != mine:
                text = text.replace(spelling, mine)
        return text

    @torch.no_grad()
    def __call__(self, text: str, top_k: int = 5) -> list[list[Prediction]]:
        """Predictions for each mask of ``text``, best first.

        Raises:
            ValueError: no mask token in ``text``, ``top_k`` < 1, or the text is too long.
        """
        if top_k < 1:
            raise InputError(f"top_k must be >= 1, got {top_k}")
        text = self._normalise(text)
        limit = input_limit(self.model.config, self.tokenizer)
        # One token past the limit tells "too long" without tokenising a huge text whole.
        enc = self.tokenizer([text], return_tensors="pt", max_length=limit + 1)
        ids = enc["input_ids"].to(self.device)
        if ids.shape[1] > limit:
            raise InputError(
                f"the text is more than {limit} tokens; the model takes at most {limit}"
            )
        mask_id = self.tokenizer.mask_token_id
        where = (ids[0] == mask_id).nonzero().flatten()
        if len(where) == 0:
            raise InputError(
                f"no mask token in the text; write {self.tokenizer.mask_token} "
                f"(or one of {MASK_SPELLINGS}) where a word is missing"
            )
        selected = torch.zeros_like(ids, dtype=torch.bool)
        selected[0, where] = True
        out = self.model(
            ids,
            enc["attention_mask"].to(self.device),
            enc.get("token_type_ids").to(self.device)
            if "token_type_ids" in enc and self.model.config.type_vocab_size
            else None,
            masked_positions=selected,
        )
        probs = out.logits.float().softmax(-1)  # (masks, V)
        special = torch.tensor(self.tokenizer.all_special_ids, device=probs.device)
        probs[:, special] = 0.0  # never propose [CLS], [PAD], ...
        results = []
        for m, pos in enumerate(where.tolist()):
            scores, token_ids = probs[m].topk(min(top_k, probs.shape[-1]))
            preds = []
            for s, t in zip(scores.tolist(), token_ids.tolist()):
                filled = ids[0].clone()
                filled[pos] = t
                preds.append(
                    Prediction(
                        self.tokenizer.convert_ids_to_tokens(t),
                        t,
                        s,
                        self.tokenizer.decode(filled.tolist()),
                    )
                )
            results.append(preds)
        return results
