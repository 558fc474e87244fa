"""kbtool's command line. Each command lives in its own module and calls one library function.

Nothing heavy (torch, chromadb, unstructured) is imported here: `kbtool --help` stays instant.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import typer

from .. import __version__

app = typer.Typer(
    name="kbtool",
    help="Build and evaluate retrieval knowledge bases: ingest documents into one local store "
    "(catalog + Chroma + BM25) and query it with dense, BM25 or hybrid retrieval.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)


def _version(value: bool):
    if value:
        typer.echo(f"kbtool {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    store: Optional[Path] = typer.Option(None, "--store", help="Store directory for the command that follows [default: ./.kb; env KBTOOL_STORE]."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version."),
):
    """Build and evaluate retrieval knowledge bases."""
    if store is not None:
        # Subcommands read KBTOOL_STORE for their own --store default, so both spellings work.
        os.environ["KBTOOL_STORE"] = str(store)


from . import calibrate, chunk, contract, doctor, eval, index, ingest, query, status  # noqa: E402,F401  (registers the commands)


def main() -> None:
    app()
