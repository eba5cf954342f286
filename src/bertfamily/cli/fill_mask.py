"""`bertfamily fill-mask`: the masked-language-model head's top predictions."""

from __future__ import annotations

import typer
from rich.markup import escape
from rich.table import Table

from .common import (
    DEVICE_HELP,
    THREADS_HELP,
    App,
    compute_threads,
    console,
    fmt_score,
    handle_errors,
    model_path,
    shorten,
    torch_device,
)

commands = App()


@commands.command("fill-mask")
@handle_errors
def fill_mask(
    text: list[str] = typer.Argument(
        ..., metavar="TEXT", help="Texts with [MASK] or <mask>.", show_default=False
    ),
    model: str = typer.Option(
        ...,
        metavar="DIR|NAME",
        help="Model directory, resource name, or org/name in the local Hugging Face cache; "
        "the model needs a masked-LM head.",
    ),
    top_k: int = typer.Option(5, "--top-k", "-k", min=1, help="Predictions per mask."),
    threads: int = typer.Option(0, min=0, help=THREADS_HELP),
    device: str = typer.Option("auto", help=DEVICE_HELP),
):
    """The most likely tokens at each mask."""
    compute_threads(threads)
    device = torch_device(device)
    from ..pipelines.tasks.fill_mask import FillMask

    pipe = FillMask(model_path(model), device=device)
    for t in text:
        for m, preds in enumerate(pipe(t, top_k=top_k)):
            table = Table(
                "rank",
                "token",
                "score",
                "sequence",
                title=escape(f"{shorten(t)}" + (f" (mask {m + 1})" if m else "")),
            )
            for r, p in enumerate(preds, 1):
                table.add_row(str(r), escape(p.token), fmt_score(p.score, 4), escape(p.sequence))
            console.print(table)
