"""ELECTRA replaced-token detection (Clark et al. 2020, "ELECTRA: Pre-training Text Encoders as
Discriminators Rather Than Generators").

A small masked-LM generator G fills the masked positions of a batch with tokens sampled from its
softmax; the discriminator D (the model that is kept) tells, at every real token, whether the
token is the original or a replacement. Both train together on (§2, eq. 1)

    L = L_MLM(x, θ_G) + λ · L_Disc(x, θ_D),   λ = 50,

with no gradient from the discriminator's loss into the generator (the sampling is not
differentiated). A sampled token equal to the original counts as original (§2). The generator
shares the discriminator's token, position and segment embeddings and their LayerNorm (§3.1,
"weight sharing"), and its size is a fraction of the discriminator's (§3.2, "smaller
generators": 1/4–1/2 of the hidden size works best).

Batches are `objectives.pretraining.MLMCollator` batches: the masked ``input_ids`` and ``labels``
(B, T) with the original token at each masked position (-100 elsewhere). The saved model is the
discriminator alone, in the layout of transformers' ``ElectraForPreTraining``.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from ..config import EncoderConfig, as_config
from ..data.batching import IGNORE_INDEX
from ..errors import InputError
from .pretraining import reduce_term
from .units import step_denominators

__all__ = ["RTD_WEIGHT", "generator_config", "ReplacedTokenDetection", "evaluate_rtd"]

RTD_WEIGHT = 50.0  # λ of Clark et al. 2020 §2 (and their released configs)


def generator_config(config: EncoderConfig, size: float) -> EncoderConfig:
    """The generator's config for a discriminator ``config``: the same layers and embedding
    size E (the embeddings are shared); hidden size H_G = round(``size`` · H), FFN
    round(``size`` · FFN), and round(``size`` · A) attention heads (at least one, lowered until
    they divide H_G) — ELECTRA §3.2 and its released code, which scale hidden size, heads and
    FFN together (ELECTRA-Small's 1/4 generator: H_G = 64, one head).

    Raises:
        ValueError: ``size`` not in (0, 1].
    """
    config = as_config(config)  # a preset name too
    if not 0.0 < size <= 1.0:
        raise InputError(
            f"the generator size is a fraction of the discriminator's, in (0, 1]: {size}"
        )
    hidden = max(1, round(config.hidden_size * size))
    heads = max(1, round(config.num_attention_heads * size))
    while hidden % heads:
        heads -= 1
    return config.replace(
        hidden_size=hidden,
        num_attention_heads=heads,
        intermediate_size=max(1, round(config.intermediate_size * size)),
        embedding_size=config.embedding_size,
        use_pooler=False,
        pair_head=None,
    )


def _share_embeddings(generator: nn.Module, discriminator: nn.Module) -> None:
    """Point the generator's token/position/segment tables, embedding norm and tied MLM decoder
    at the discriminator's (ELECTRA §3.1); the E→H projection stays each model's own."""
    g, d = generator.encoder.embeddings, discriminator.encoder.embeddings
    for name in ("token", "position", "segment", "norm"):
        setattr(g, name, getattr(d, name))
    generator.mlm_head._embedding[0] = d.token


class ReplacedTokenDetection(nn.Module):
    """Generator + discriminator; ``forward(batch)`` → ``(loss, parts)`` for the `Trainer`.

    Args:
        discriminator: a `Model` with the "rtd" head (the kept model).
        generator: a `Model` with the "mlm" head and the same embedding size; its embeddings
            are replaced by the discriminator's (shared).
        rtd_weight: λ.

    ``parts`` (detached 0-d): ``mlm_loss`` / ``mlm_accuracy`` (the generator at masked
    positions), ``rtd_loss`` / ``rtd_accuracy`` (the discriminator at real tokens) and
    ``replaced`` (share of real tokens that the generator changed).

    Gradient accumulation: `counts` gives ``mlm`` (masked tokens) and ``rtd`` (real tokens);
    with ``denominators`` each term is its sum divided by the denominator (see
    `bertfamily.train.loop`).

    Raises:
        ValueError: a discriminator without the rtd head, a generator without the MLM head, or
            embedding sizes that differ.
    """

    def __init__(
        self, discriminator: nn.Module, generator: nn.Module, rtd_weight: float = RTD_WEIGHT
    ) -> None:
        super().__init__()
        if discriminator.rtd_head is None:
            raise InputError("the discriminator needs the 'rtd' head")
        if generator.mlm_head is None:
            raise InputError("the generator needs the 'mlm' head")
        if generator.config.embedding_size != discriminator.config.embedding_size:
            raise InputError(
                f"shared embeddings need one size: generator E={generator.config.embedding_size}"
                f", discriminator E={discriminator.config.embedding_size}"
            )
        _share_embeddings(generator, discriminator)
        self.discriminator, self.generator, self.rtd_weight = discriminator, generator, rtd_weight

    @property
    def config(self) -> EncoderConfig:
        """The discriminator's config."""
        return self.discriminator.config

    @property
    def model(self) -> nn.Module:
        """The kept model: the discriminator."""
        return self.discriminator

    @staticmethod
    def counts(batch: dict[str, torch.Tensor]) -> dict[str, int]:
        """Units per term (the `Trainer`'s ``count_fn``): ``mlm`` masked tokens, ``rtd`` real
        tokens."""
        return {
            "mlm": int((batch["labels"] != IGNORE_INDEX).sum()),
            "rtd": int(batch["attention_mask"].sum()),
        }

    def _inputs(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> dict:
        types = batch.get("token_type_ids") if model.config.type_vocab_size else None
        return {"attention_mask": batch["attention_mask"], "token_type_ids": types}

    def corrupt(
        self, batch: dict[str, torch.Tensor], generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Run the generator and sample the replacements.

        Args:
            batch: ``input_ids``, ``attention_mask``, ``labels`` (B, T) int64 [,
                ``token_type_ids``].
            generator: the random generator of the sampling (None: torch's global one).

        Returns:
            ``(gen_logits (M, V) float at the M masked positions, corrupted input_ids (B, T)
            int64, rtd labels (B, T) int64 — 1 where the corrupted token differs from the
            original, originals (M,) int64)``.

        Raises:
            ValueError: a masked position outside the real tokens.
        """
        input_ids, labels, mask = batch["input_ids"], batch["labels"], batch["attention_mask"]
        selected = labels != IGNORE_INDEX  # (B, T)
        if bool((selected & (mask == 0)).any()):
            raise InputError("a masked position lies on padding (attention_mask 0)")
        out = self.generator(
            input_ids, **self._inputs(self.generator, batch), masked_positions=selected
        )
        logits = out.logits  # (M, V)
        originals = labels[selected]  # (M,)
        with torch.no_grad():  # §2: no back-propagation through the sampling
            probs = torch.softmax(logits.detach().float(), dim=-1)
            sampled = torch.multinomial(probs, 1, generator=generator).squeeze(-1)  # (M,)
            original_ids = torch.where(selected, labels, input_ids)  # (B, T)
            corrupted = original_ids.clone()
            corrupted[selected] = sampled
            rtd_labels = ((corrupted != original_ids) & (mask == 1)).long()
        return logits, corrupted, rtd_labels, originals

    def forward(self, batch: dict[str, torch.Tensor], denominators: dict[str, float] | None = None):
        """Batch → ``(loss, parts)``: L_MLM + λ · L_Disc (ELECTRA §2, eq. 1), each a mean over its
        units (or, with ``denominators``, its sum divided by ``denominators[term]``)."""
        denominators = step_denominators(denominators)  # a Trainer step's
        gen_logits, corrupted, rtd_labels, originals = self.corrupt(batch)
        real = batch["attention_mask"] == 1
        disc = self.discriminator(corrupted, **self._inputs(self.discriminator, batch))
        bce = F.binary_cross_entropy_with_logits(
            disc.logits[real].float(), rtd_labels[real].float(), reduction="none"
        )  # (R,)
        ce = F.cross_entropy(gen_logits.float(), originals, reduction="none")  # (M,)

        def reduce(values: torch.Tensor, term: str) -> torch.Tensor:
            return reduce_term(values, term, denominators)

        mlm, rtd = reduce(ce, "mlm"), reduce(bce, "rtd")
        hits = ((disc.logits[real] > 0).long() == rtd_labels[real]).float()
        parts = {
            "mlm_loss": mlm.detach(),
            "mlm_accuracy": reduce((gen_logits.argmax(-1) == originals).float(), "mlm").detach(),
            "rtd_loss": rtd.detach(),
            "rtd_accuracy": reduce(hits, "rtd").detach(),
            "replaced": reduce(rtd_labels[real].float(), "rtd").detach(),
        }
        return mlm + self.rtd_weight * rtd, parts

    def save_pretrained(self, path) -> None:
        """The discriminator, in the Hugging Face ``ElectraForPreTraining`` layout."""
        self.discriminator.save_pretrained(path)


@torch.no_grad()
def evaluate_rtd(rtd: ReplacedTokenDetection, batches, seed: int = 0) -> dict[str, float]:
    """Held-out metrics over fixed batches, the sampling from a generator seeded with ``seed``
    (the training RNG is not touched): ``loss`` = mlm_loss + λ·rtd_loss (eq. 1), ``mlm_loss``,
    ``mlm_accuracy`` (generator, per masked token), ``rtd_loss``, ``accuracy`` (discriminator,
    per real token), ``replaced_recall`` / ``original_recall`` (its accuracy on replaced and on
    original tokens) and ``replaced`` (share of tokens replaced).

    Raises:
        ValueError: the batches hold no masked token.
    """
    was_training = rtd.training
    rtd.eval()
    device = next(rtd.parameters()).device
    rng = torch.Generator(device=device).manual_seed(seed)
    nll = bce = 0.0
    masked = real = gen_hits = hits = replaced = replaced_hits = 0
    for batch in batches:
        batch = {k: v.to(device) for k, v in batch.items()}
        gen_logits, corrupted, rtd_labels, originals = rtd.corrupt(batch, rng)
        disc = rtd.discriminator(corrupted, **rtd._inputs(rtd.discriminator, batch))
        keep = batch["attention_mask"] == 1
        logits, y = disc.logits[keep].float(), rtd_labels[keep]
        nll += F.cross_entropy(gen_logits.float(), originals, reduction="sum").item()
        bce += F.binary_cross_entropy_with_logits(logits, y.float(), reduction="sum").item()
        masked += len(originals)
        real += len(y)
        gen_hits += (gen_logits.argmax(-1) == originals).sum().item()
        right = (logits > 0).long() == y
        hits += right.sum().item()
        replaced += y.sum().item()
        replaced_hits += (right & (y == 1)).sum().item()
    rtd.train(was_training)
    if masked == 0:
        raise InputError("the evaluation batches hold no masked token")
    originals_n = real - replaced
    return {
        "loss": nll / masked + rtd.rtd_weight * bce / real,
        "mlm_loss": nll / masked,
        "mlm_perplexity": math.exp(nll / masked),
        "mlm_accuracy": gen_hits / masked,
        "rtd_loss": bce / real,
        "accuracy": hits / real,
        "replaced_recall": replaced_hits / replaced if replaced else float("nan"),
        "original_recall": (hits - replaced_hits) / originals_n if originals_n else float("nan"),
        "replaced": replaced / real,
    }
