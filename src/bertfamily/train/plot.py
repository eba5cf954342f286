"""The loss curve of a run as a PNG (matplotlib, optional)."""

from __future__ import annotations

import logging
from pathlib import Path

from ..files import atomic_write
from .rundir import read_metrics

__all__ = ["plot_metrics"]

logger = logging.getLogger(__name__)


def plot_metrics(metrics_path: str | Path, png_path: str | Path) -> Path | None:
    """Plot train ``loss`` (and ``eval_loss`` when logged) against ``step`` from a
    ``metrics.jsonl`` (a torn line is skipped); written atomically. Returns the path, or None
    when matplotlib is not installed or there is nothing to plot."""
    from ..runtime import require

    try:
        require("matplotlib", "train", "the loss curve (loss.png)").use("Agg")
        plt = require("matplotlib.pyplot", "train", "the loss curve (loss.png)")
    except ImportError as e:  # MissingDependency names the extra
        logger.info("no loss curve: %s", e)
        return None

    records = read_metrics(metrics_path)
    train = [(r["step"], r["loss"]) for r in records if r.get("split") == "train" and "loss" in r]
    evals = [
        (r["step"], r["eval_loss"])
        for r in records
        if r.get("split") == "eval" and "eval_loss" in r
    ]
    if not train:
        logger.warning("no logged train loss in %s; %s not written", metrics_path, png_path)
        return None
    fig, ax = plt.subplots(figsize=(7, 4))
    # a marker per logged point: a run with one or two log lines still shows its points
    ax.plot(*zip(*train), "o-", markersize=3, label="train loss (all objectives)")
    mlm = [
        (r["step"], r["mlm_loss"]) for r in records if r.get("split") == "train" and "mlm_loss" in r
    ]
    if mlm and any("pair_loss" in r or "sbo_loss" in r for r in records):
        ax.plot(*zip(*mlm), "o-", markersize=3, label="train MLM loss")
    if evals:
        ax.plot(*zip(*evals), "o-", label="held-out eval_loss")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    png_path = Path(png_path)
    atomic_write(png_path, lambda tmp: fig.savefig(tmp, format="png", dpi=100))
    plt.close(fig)
    return png_path
