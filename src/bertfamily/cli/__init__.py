"""The `bertfamily` command line: one typer app assembled from one module per area.

Each module is named after the command(s) it defines (`fetch`, `data` (data split), `embed`
(embed and search), `rerank`, `fill_mask`, `serve`, `index`, `tokenizer`, `pretrain`, `distill`,
`finetune` (finetune and predict; --task embedding / rerank), `evaluate`, `mine` (mine-negatives),
`params` (params and dataflow), `models`, `explore` (explore and attention), `convert` (export,
to-longformer)) on its own `commands` Typer; this module merges them into `app`. Command
modules import only `common` and `options`, never this module, and no torch at module level.
"""

from __future__ import annotations

import logging

import typer

from .. import notices, runtime
from . import (
    common,
    convert,
    data,
    distill,
    embed,
    evaluate,
    explore,
    fetch,
    fill_mask,
    finetune,
    index,
    mine,
    models,
    params,
    pretrain,
    rerank,
    serve,
    tokenizer,
)

app = typer.Typer(
    help="The BERT family of encoders from one code path.",
    rich_markup_mode=None,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    """``--version``: print ``bertfamily X.Y.Z`` and exit (before any command runs)."""
    if value:
        from .. import __version__

        typer.echo(f"bertfamily {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    verbose: bool = typer.Option(
        False, "--verbose", "-v", help="Log at INFO level; show the traceback of every error."
    ),
    version: bool = typer.Option(
        False,
        "--version",
        is_eager=True,
        callback=_print_version,
        help="Print the version (bertfamily X.Y.Z) and exit.",
    ),
):
    common.VERBOSE = verbose
    notices.show_progress()  # long waits say so on stderr (library code only logs them)
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    # before any command imports torch: libgomp and MKL read these once, when torch loads
    runtime.sanitize_thread_environment()


for _area in (
    fetch,
    data,
    embed,
    rerank,
    fill_mask,
    serve,
    index,
    tokenizer,
    pretrain,
    distill,
    finetune,
    evaluate,
    mine,
    params,
    models,
    explore,
    convert,
):
    app.add_typer(_area.commands)


def main() -> None:
    """Run the command line (`python -m bertfamily`, `python -m bertfamily.cli`)."""
    app(prog_name="bertfamily")
