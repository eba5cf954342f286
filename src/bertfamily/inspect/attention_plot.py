"""Attention-weight heatmaps with token labels (matplotlib, written as PNG)."""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from ..errors import InputError

log = logging.getLogger(__name__)

DPI = 100


def figure_inches(num_tokens: int) -> float:
    """Side of the square figure in inches for ``num_tokens`` tokens (4 to 20 inches)."""
    return float(min(20.0, max(4.0, 2.0 + 0.4 * num_tokens)))


def figure_pixels(num_tokens: int) -> tuple[int, int]:
    """(width, height) in pixels of the PNG for ``num_tokens`` tokens."""
    side = round(figure_inches(num_tokens) * DPI)
    return side, side


def attention_weights(
    text: str, model: str | Path | None = None, *, layer: int = -1, head: int = 0
) -> tuple[list[str], torch.Tensor]:
    """Tokens and one head's attention probabilities for ``text``.

    Args:
        text: the input text.
        model: model directory or resource name (default: the real all-MiniLM-L6-v2).
        layer: layer step, 0-based; negative counts from the end.
        head: head index in [0, N).

    Returns:
        (tokens (T,), probabilities (T, S) float32; S = T for full attention, the band width
        2W+1 for windowed attention (Longformer, no global tokens), whose column j is the key
        at offset j − W).

    Raises:
        ValueError: empty text, layer or head out of range (the message names the limits).
    """
    tokens, probs, _ = _attention(text, model, layer, head)
    return tokens, probs


def _attention(
    text: str, model: str | Path | None, layer: int, head: int
) -> tuple[list[str], torch.Tensor, bool]:
    """`attention_weights` plus whether the probabilities are a band (windowed attention)."""
    from ..pretrained import from_pretrained
    from ..resources.resolve import resolve_model
    from ..tokenization.tokenizer import load_tokenizer

    if not text.strip():
        raise InputError("text is empty")
    path = resolve_model(None if model is None else str(model))
    net = from_pretrained(path)
    tok = load_tokenizer(path)
    batch = tok([text])
    with torch.no_grad():
        out = net(**batch, output_attentions=True)
    ids = batch["input_ids"][0].tolist()
    tokens = [str(t) for t in tok.convert_ids_to_tokens(ids)]
    band = net.config.attention_kind == "windowed"
    return tokens, pick_head(out.attentions, layer, head)[0], band


def pick_head(attentions: tuple[torch.Tensor, ...], layer: int, head: int) -> torch.Tensor:
    """(B, T, S) float32 probabilities of one layer and head from L tensors (B, N, T, S).

    Raises:
        ValueError: layer outside [-L, L) or head outside [0, N).
    """
    L = len(attentions)
    if not -L <= layer < L:
        raise InputError(
            f"layer {layer} is out of range: the model has {L} layers "
            f"(0..{L - 1}, or negative from the end)"
        )
    probs = attentions[layer]  # (B, N, T, S)
    N = probs.shape[1]
    if not 0 <= head < N:
        raise InputError(f"head {head} is out of range: the model has {N} heads (0..{N - 1})")
    return probs[:, head].float()


def plot_attention(
    tokens: list[str],
    probs: torch.Tensor,
    output: str | Path,
    *,
    title: str = "",
    band: bool | None = None,
) -> Path:
    """Write a heatmap of ``probs`` (T, S) with token labels to ``output`` (PNG, atomically).
    The image is `figure_pixels(T)` in size. ``band``: the columns are the 2W + 1 key offsets
    −W..W of windowed attention (default: when S ≠ T).

    Raises:
        ValueError: ``output`` does not end in .png, or probs does not have T rows.
        MissingDependency: matplotlib is not installed (the ``plots`` extra).
    """
    from ..files import atomic_write
    from ..runtime import require

    require("matplotlib", "plots", "attention heatmaps").use("Agg")
    plt = require("matplotlib.pyplot", "plots", "attention heatmaps")

    output = Path(output)
    if output.suffix.lower() != ".png":
        raise InputError(f"output must be a .png file, got {output.name}")
    T, S = probs.shape
    if T != len(tokens):
        raise InputError(f"probs has {T} rows for {len(tokens)} tokens")
    side = figure_inches(T)
    fig, ax = plt.subplots(figsize=(side, side), dpi=DPI)
    image = ax.imshow(probs.numpy(), cmap="viridis", vmin=0.0, aspect="auto")
    ax.set_yticks(range(T), tokens, fontsize=8)
    if band is None:
        band = S != T
    if band and S % 2 == 0:
        raise InputError(f"a band of windowed attention has an odd width 2W+1, got {S} columns")
    if not band:
        if S != T:
            raise InputError(f"probs has {S} columns for {T} tokens (full attention: T × T)")
        ax.set_xticks(range(T), tokens, rotation=90, fontsize=8)
        ax.set_xlabel("key token")
    else:  # band of windowed attention: column j is the key at offset j - W
        W = (S - 1) // 2
        ticks = sorted({0, W, S - 1})
        ax.set_xticks(ticks, [str(j - W) for j in ticks])
        ax.set_xlabel("key offset from the query token (band)")
    ax.set_ylabel("query token")
    ax.set_title(title, fontsize=10)
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    fig.subplots_adjust(left=0.2, bottom=0.2, right=0.92, top=0.93)
    try:
        atomic_write(output, lambda tmp: fig.savefig(tmp, format="png", dpi=DPI))
    finally:
        plt.close(fig)
    return output


def attention_heatmap(
    text: str,
    output: str | Path,
    model: str | Path | None = None,
    *,
    layer: int = -1,
    head: int = 0,
) -> Path:
    """`attention_weights` then `plot_attention`; returns the PNG path.

    Raises:
        MissingDependency: matplotlib is not installed (the ``plots`` extra), before the model
            loads.
    """
    from ..runtime import require

    require("matplotlib", "plots", "attention heatmaps")
    tokens, probs, band = _attention(text, model, layer, head)
    name = Path(str(model)).name if model else "all-MiniLM-L6-v2"
    kind = f", band of {probs.shape[1]} keys" if band else ""
    return plot_attention(
        tokens, probs, output, title=f"{name}: layer {layer}, head {head}{kind}", band=band
    )
