"""`bertfamily fill-mask`: the masked-language-model head's top predictions."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from ..errors import InputError
from .common import (
    DEVICE_HELP,
    THREADS_HELP,
    App,
    compute_threads,
    console,
    fmt_score,
    handle_errors,
    model_path,
    read_lines,
    shorten,
    torch_device,
)

commands = App()


@commands.command("fill-mask")
@handle_errors
def fill_mask(
    text: list[str] | None = typer.Argument(
        None, metavar="TEXT", help="Texts with [MASK] or <mask>.", show_default=False
    ),
    input: Path | None = typer.Option(
        None,
        "--input",
        "-i",
        metavar="FILE",
        help="Also read texts from a UTF-8 file, one a line (- for standard input).",
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

    texts = list(text or []) + (read_lines(input) if input is not None else [])
    if not texts:
        raise InputError("give texts as arguments or --input FILE (- for standard input)")
    pipe = FillMask(model_path(model), device=device)
    for t in texts:
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
