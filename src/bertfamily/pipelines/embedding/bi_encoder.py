"""Deprecated: `BiEncoder`, the former trainable embedding class, is a name of
`embed.SentenceEmbedder` now (the one embedding class, which trains too); its directory
writer is `saving.save_directory`."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...inference.batches import FEATURE_KEYS
from .embed import SentenceEmbedder
from .saving import model_card, save_directory

__all__ = ["BiEncoder", "FEATURE_KEYS", "model_card", "save_directory"]


class BiEncoder(SentenceEmbedder):
    """Deprecated name of `SentenceEmbedder`, the one embedding class (it trains too: `forward`
    with gradients, `save`); ``BiEncoder.from_directory(path, max_seq_length)`` is
    `SentenceEmbedder.for_training`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        warnings.warn(
            "BiEncoder is SentenceEmbedder now (one embedding class); use "
            "SentenceEmbedder.for_training(path, max_seq_length)",
            DeprecationWarning,
            stacklevel=2,
        )
        super().__init__(*args, **kwargs)

    @classmethod
    def from_directory(
        cls, path: str | Path, max_seq_length: int | None = None
    ) -> SentenceEmbedder:
        """`SentenceEmbedder.for_training` (deprecated name)."""
        warnings.warn(
            "BiEncoder.from_directory is SentenceEmbedder.for_training now",
            DeprecationWarning,
            stacklevel=2,
        )
        with warnings.catch_warnings():  # warned once, above
            warnings.simplefilter("ignore", DeprecationWarning)
            return cls.for_training(path, max_seq_length)

    def tokenize(self, texts: Sequence[str], **options: Any):  # type: ignore[override]
        """`SentenceEmbedder.features` (the old meaning of this name) when called with texts
        alone; with keyword options, `SentenceEmbedder.tokenize`."""
        return super().tokenize(texts, **options) if options else self.features(texts)
