"""kbtool's command line. Each command lives in its own module and calls one library function.

Nothing heavy (torch, chromadb, unstructured) is imported here: `kbtool --help` stays instant.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import typer

from .. import __version__

class _Group(typer.core.TyperGroup):
    """kbtool's command group: --help names an argument by its metavar alone (``TEXT  The question``),
    not followed by typer's Python type (``TEXT <str>``, ``[PATH]... <list[Path]>``); options name
    their values by their own metavars (``--filter SPEC``, ``--top-k N``), given where each is declared."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _plain_arguments(self)


def _plain_arguments(group) -> None:
    for command in group.commands.values():
        if hasattr(command, "commands"):  # a sub-group (contract)
            _plain_arguments(command)
        for param in command.params:
            if isinstance(param, typer.core.TyperArgument) and param.metavar:
                param.display_type_rich = lambda ctx: None  # this argument's help shows its metavar only


app = typer.Typer(
    cls=_Group,
    name="kbtool",
    help="Build and evaluate retrieval knowledge bases: ingest documents into one local store "
    "(catalog + Chroma + BM25) and query it with dense, BM25 or hybrid retrieval.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _version(value: bool):
    if value:
        typer.echo(f"kbtool {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    store: Optional[Path] = typer.Option(None, "--store", metavar="DIR", help="Store directory for the command that follows [default: ./.kb; env KBTOOL_STORE]."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version."),
):
    """Build and evaluate retrieval knowledge bases."""
    if store is not None:
        # Subcommands read KBTOOL_STORE for their own --store default, so both spellings work.
        os.environ["KBTOOL_STORE"] = str(store)


from . import calibrate, chunk, chunks, contract, doctor, eval, index, ingest, query, serve, status  # noqa: E402,F401  (registers the commands)


class _ClosedPipeSafe:
    """stdout for a process whose reader may go away (`kbtool query ... | head -1`): once a write
    meets a closed pipe, the rest of the output goes to /dev/null and the command runs on, so it
    exits with its own code (0, or a gate's 3) instead of a BrokenPipeError's traceback and 1."""

    def __init__(self, stream):
        self._stream, self.closed_pipe = stream, False

    def write(self, text):
        if not self.closed_pipe:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._to_devnull()
        return len(text)

    def flush(self):
        if not self.closed_pipe:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._to_devnull()

    def _to_devnull(self):
        self.closed_pipe = True
        try:  # what is still buffered (and Python's flush at exit) lands nowhere, without an error
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        except (OSError, ValueError):
            pass

    def __getattr__(self, name):
        return getattr(self._stream, name)


def main() -> None:
    import sys

    sys.stdout = _ClosedPipeSafe(sys.stdout)
    try:
        app()
    except SystemExit as exc:
        from ._common import QUICK_EXIT

        if QUICK_EXIT["on"]:
            _exit_now(exc.code)
        raise


def _exit_now(code) -> None:
    """End a read-only command's process at once: logs and output flushed, then ``os._exit`` with
    the code ``sys.exit`` was given (Python's teardown of the model, the indexes and every module
    would take ~0.13 s more, and writes nothing)."""
    import logging
    import sys

    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code or 0)
