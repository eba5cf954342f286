"""sentence-transformers' call shapes on `SentenceEmbedder.encode`: its keywords checked, its
output forms (numpy array, one tensor, a list of row tensors, token embeddings) and the
prompts ``encode_query`` / ``encode_document`` pick. The numbers come from the embedder; this
module only shapes them as ``SentenceTransformer.encode`` (6.x) returns them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import torch

from ...errors import InputError

__all__ = ["OUTPUT_VALUES", "check_keywords", "document_prompt_name", "progress_bar", "shape"]

OUTPUT_VALUES = ("sentence_embedding", "token_embeddings")

# sentence-transformers' encode keywords that bertfamily does not take, with the reason.
_NOT_TAKEN = {
    "device": "the device is chosen when the model is loaded (SentenceEmbedder(..., device=))",
    "pool": "multi-process pools are not used; the engine's thread policy runs the batches",
    "chunk_size": "multi-process pools are not used",
    "task": "router modules are not supported",
}


def check_keywords(
    unknown: Mapping[str, object],
    *,
    normalize,
    normalize_embeddings,
    dimensions,
    truncate_dim,
    output_value,
) -> None:
    """Refuse keywords `SentenceEmbedder.encode` does not take and inconsistent pairs.

    Raises:
        InputError: an unknown keyword (listing those taken), ``normalize=False`` with
            ``normalize_embeddings=True``, both ``dimensions`` and ``truncate_dim``, or an
            ``output_value`` other than "sentence_embedding" / "token_embeddings".
    """
    for name in unknown:
        why = _NOT_TAKEN.get(name, "not a keyword of encode")
        raise InputError(
            f"encode() got the keyword {name!r}: {why}. It takes sentence-transformers' "
            "prompt_name, prompt, batch_size, show_progress_bar, output_value, precision, "
            "convert_to_numpy, convert_to_tensor, normalize_embeddings, truncate_dim, and "
            "bertfamily's progress, max_batch_tokens, normalize, dimensions, truncation_side"
        )
    if normalize is False and normalize_embeddings:
        raise InputError("normalize=False contradicts normalize_embeddings=True; give one")
    if dimensions is not None and truncate_dim is not None:
        raise InputError("give dimensions or truncate_dim, not both")
    if output_value not in OUTPUT_VALUES:
        raise InputError(
            f"output_value must be one of {OUTPUT_VALUES}, got {output_value!r} "
            "(None, every module output, is not supported)"
        )


def progress_bar(total: int, show: bool | None) -> tuple[Callable[[int], None] | None, object]:
    """A ``progress`` callback drawing a tqdm bar over ``total`` texts when ``show`` (None:
    when this module's logger is at INFO or DEBUG, as sentence-transformers decides), and the
    bar to close (None when none)."""
    import logging

    if show is None:
        show = logging.getLogger(__name__).getEffectiveLevel() <= logging.INFO
    if not show:
        return None, None
    from tqdm.auto import tqdm

    bar = tqdm(total=total, desc="Batches", unit="text")

    def update(done: int) -> None:
        bar.update(done - bar.n)

    return update, bar


def shape(
    rows: np.ndarray | list[np.ndarray], *, convert_to_numpy: bool, convert_to_tensor: bool
) -> np.ndarray | torch.Tensor | list[torch.Tensor]:
    """sentence-transformers' output form of N rows.

    Args:
        rows: (N, D) array (sentence embeddings), or N (T_i, H) arrays (token embeddings,
            always returned as a list of tensors).
        convert_to_numpy: the (N, D) array itself.
        convert_to_tensor: one (N, D) torch tensor (wins over ``convert_to_numpy``).

    Returns:
        The array, one tensor, or (both False) a list of N 1-D tensors.
    """
    if isinstance(rows, list):
        return [torch.from_numpy(r) for r in rows]
    if convert_to_tensor:
        return torch.from_numpy(rows)
    if convert_to_numpy:
        return rows
    return list(torch.from_numpy(rows))


def document_prompt_name(prompts: Mapping[str, str]) -> str | None:
    """The prompt ``encode_document`` uses when none is given: the first of "document",
    "passage", "corpus" the model has (sentence-transformers' order), else None."""
    return next((n for n in ("document", "passage", "corpus") if n in prompts), None)
