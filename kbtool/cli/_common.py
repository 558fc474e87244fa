"""Shared CLI plumbing: options, error translation, progress and consoles."""

from __future__ import annotations

import functools
import json
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, List, Optional

import typer

from ..errors import EXIT_INTERRUPTED, KbtoolError


def _console(stderr: bool = False):
    """On a terminal, Rich sizes output to it. Piped or redirected (CI logs, `| cat`, `> out.txt`),
    Rich would assume 80 columns and cut numbers and names: give it the width tables need instead
    ($COLUMNS still wins)."""
    import os

    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    tty = hasattr(stream, "isatty") and stream.isatty()
    width = None if tty or os.environ.get("COLUMNS") else 1000
    return Console(stderr=stderr, soft_wrap=True, width=width)


class _LazyConsole:
    """The Rich console of stdout or stderr, made on first use: importing Rich costs ~60 ms a
    command printing JSON (or nothing) never needs. ``real()`` is the console itself (for Rich's
    own classes, e.g. a progress display)."""

    def __init__(self, stderr: bool):
        self._stderr, self._made = stderr, None

    def real(self):
        if self._made is None:
            self._made = _console(self._stderr)
        return self._made

    def __getattr__(self, name):
        return getattr(self.real(), name)


out = _LazyConsole(stderr=False)
err = _LazyConsole(stderr=True)

StoreOpt = Annotated[
    Optional[Path],
    typer.Option("--store", metavar="DIR", envvar="KBTOOL_STORE", help="Store directory [default: ./.kb; env KBTOOL_STORE]."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Write the result as JSON on stdout.")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars or chatter on stderr.")]
ModelOpt = Annotated[
    Optional[str],
    typer.Option("--model", metavar="MODEL", help="Embedding model: a sentence-transformers name or local folder, use-m (the bundled "
                 "multilingual Universal Sentence Encoder), or an OpenAI-compatible endpoint "
                 "openai:http://HOST:PORT/v1#NAME [default: the store's, or all-MiniLM-L6-v2]."),
]
QueryPrefixOpt = Annotated[Optional[str], typer.Option("--query-prefix", metavar="TEXT", help="Text put before every question embedded (E5 models: 'query: ', the default for names containing e5).")]
PassagePrefixOpt = Annotated[Optional[str], typer.Option("--passage-prefix", metavar="TEXT", help="Text put before every chunk embedded (E5 models: 'passage: ').")]
MaxTokensOpt = Annotated[Optional[int], typer.Option("--max-tokens", metavar="N", help="Endpoint models: the model's input limit in tokens, to size chunks [default: 512].")]
InputTypeOpt = Annotated[bool, typer.Option("--input-type", help="Endpoint models: send input_type query|passage with each request, for servers that add the model's prefixes themselves (prefixes then default to none).")]
TokenizerOpt = Annotated[Optional[str], typer.Option("--tokenizer", metavar="FILE", help="Endpoint models: a tokenizer.json (or folder) to count tokens exactly [default: a conservative estimate].")]


AddModelOpt = Annotated[
    Optional[List[str]],
    typer.Option("--add-model", metavar="[NAME=]MODEL",
                 help="Add a further embedding model as retriever dense:NAME (repeatable): use-m (the bundled "
                      "multilingual model), a model folder or openai:URL#name; its vectors are made now."),
]


# Set by a command that only reads (``query``): once its output is written, the process ends
# without Python's teardown of every module and buffer (~0.13 s of a 1 s cold query).
QUICK_EXIT = {"on": False}


def quick_exit() -> None:
    """Mark this process's command as one whose exit may skip Python's teardown (``kbtool.cli.main``
    flushes the output first). Only for commands that write nothing but their output."""
    QUICK_EXIT["on"] = True


def split_add_model(arg: str) -> tuple[str | None, str]:
    """(NAME or None, MODEL) of an --add-model ``[NAME=]MODEL``."""
    import re

    m = re.match(r"^([^=/\\:]*)=(.+)$", arg)  # NAME=MODEL; a path or URL holds '/' or ':' before any '='
    return (m.group(1), m.group(2)) if m else (None, arg)


def add_models(kb, models: list[str] | None) -> list[str]:
    """Record each ``[NAME=]MODEL`` of --add-model in the store (``Store.add_model`` checks it); the
    retriever names."""
    return [kb.add_model(model, name) for name, model in map(split_add_model, models or [])]


# Library errors name the parameter they are about ("folds 1: must be at least 2"); the CLI shows
# a message that starts with one of these names with the flag instead ("--folds 1: ...").
FLAGS = {"model name": "--add-model NAME", "contracts": "--contract", "baseline": "--baseline", "out_dir": "--out",
         "fail_under_recorded": "--fail-under-recorded", "id prefix": "--id-prefix", "ks": "--k", "level": "--level", "thresholds": "--threshold", "gate": "--fail-under",
         "recorded gate": "--fail-under-recorded", "qrels": "--qrels", "objective": "--objective",
         "folds": "--folds", "max_false_answer": "--max-false-answer", "max_false_refusal": "--max-false-refusal"}


def cli_wording(message: str) -> str:
    """A library message as the CLI shows it: a leading parameter name becomes its flag, and a
    snake_case parameter name (unambiguous) becomes its flag wherever it stands."""
    for name, flag in FLAGS.items():
        if message.startswith((name + " ", name + ":")):
            message = flag + message[len(name):]
            break
    for name, flag in FLAGS.items():
        if "_" in name:
            message = message.replace(name, flag)
    return message


def handle_errors(fn):
    """Expected failures become one line on stderr and an exit code, never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        _opened.clear()  # a command's own stores (CliRunner runs many commands in one process)
        try:
            return fn(*args, **kwargs)
        except KbtoolError as exc:
            from rich.markup import escape

            err.print(f"[bold red]Error:[/] {escape(cli_wording(str(exc)))}", highlight=False)
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            err.print("Interrupted.")
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except (typer.Exit, typer.Abort, SystemExit):
            raise
        except Exception as exc:
            import os

            known = _storage_error(exc)
            if known is not None:  # a full or read-only disk met outside the store's own writes
                from rich.markup import escape

                err.print(f"[bold red]Error:[/] {escape(str(known))}", highlight=False)
                raise typer.Exit(known.exit_code) from None

            # Typer's own usage errors (BadParameter and friends) keep their exit code 2.
            if os.environ.get("KBTOOL_DEBUG") or type(exc).__module__.split(".")[0] in ("click", "typer"):
                raise
            from rich.markup import escape

            # An unexpected failure is a bug: one line, and the way to the traceback.
            err.print(f"[bold red]Internal error:[/] {escape(type(exc).__name__)}: {escape(str(exc)[:300])} "
                      "(run again with KBTOOL_DEBUG=1 for the traceback, and report it)", highlight=False)
            raise typer.Exit(1) from None

    return wrapper


def _storage_error(exc: Exception):
    """A full file system, a read-only one or no permission, said as such (never 'Internal error')."""
    import errno
    import sqlite3

    from ..store.files import storage_error

    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        where = Path(exc.filename or ".").absolute()
        return storage_error(exc, where if where.is_dir() else where.parent)
    if isinstance(exc, OSError) and exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        from ..errors import KbtoolError  # not the store's own files (Store.writing says those): one line

        return KbtoolError(f"{exc.strerror}: {exc.filename or '(no file name given)'}")
    if isinstance(exc, sqlite3.OperationalError) or type(exc).__module__.startswith("chromadb"):
        # the store this command opened is what SQLite and Chroma were writing, not the working directory
        known = storage_error(exc, _opened[-1] if _opened else Path.cwd())
        return known if known and "no space" in str(known) else None
    return None


def open_store(path: Optional[Path], create: bool = False, model: Optional[str] = None, vectors: Optional[dict] = None):
    """The store at ``path``; with ``create``, a new one if none is there (its model and, given
    ``vectors`` (see ``chroma_options``), its Chroma server). ``vectors`` given for an existing store
    must be what it records: UsageError (exit 2) naming the recorded one otherwise."""
    from ..store import Store

    store = Store.open(path, create=create, model=model, vectors=vectors)
    _opened.append(store.path)
    return store


_opened: list[Path] = []  # the stores this process opened (a failure's file system is the last one's)


ChromaUrlOpt = Annotated[
    Optional[str],
    typer.Option("--chroma-url", metavar="URL", help="A new store keeps its vectors on this Chroma server (`chroma run`), "
                 "e.g. http://127.0.0.1:8000, instead of Chroma embedded in the store folder; recorded in the store "
                 "(credentials: $KBTOOL_CHROMA_TOKEN). Catalog and BM25 stay local."),
]
ChromaTenantOpt = Annotated[Optional[str], typer.Option("--chroma-tenant", metavar="NAME", help="With --chroma-url: the Chroma tenant [default: default_tenant].")]
ChromaDatabaseOpt = Annotated[Optional[str], typer.Option("--chroma-database", metavar="NAME", help="With --chroma-url: the Chroma database [default: default_database].")]
ChromaCollectionOpt = Annotated[Optional[str], typer.Option("--chroma-collection", metavar="PREFIX", help="With --chroma-url: the prefix of the store's collections (PREFIX-chunks) [default: one unique to the store].")]


def chroma_options(url, tenant, database, collection) -> Optional[dict]:
    """What --chroma-url/--chroma-tenant/--chroma-database/--chroma-collection ask for (None: nothing);
    a malformed value is a UsageError before anything is written."""
    from ..errors import UsageError
    from ..store.chroma_server import _name, parse_url

    given = {"tenant": tenant, "database": database, "collection": collection}
    if url is None:
        if any(v is not None for v in given.values()):
            flag = next(f"--chroma-{k}" for k, v in given.items() if v is not None)
            raise UsageError(f"{flag} needs --chroma-url (the Chroma server the store keeps its vectors on)")
        return None
    try:
        parse_url(url)
        for what, value in given.items():
            if value is not None:
                _name(value, what)
    except UsageError as exc:
        raise UsageError("--chroma-" + str(exc).removeprefix("chroma ")) from None  # the flag's name
    return {"url": url, **{k: v for k, v in given.items() if v is not None}}


def print_json(data) -> None:
    sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n")


@contextmanager
def progress_bars(quiet: bool):
    """Yields a progress(stage, advance, total) callback: Rich bars on a terminal; on a pipe or file
    (CI logs) a plain line per stage every few seconds with counts, rate and ETA; None if quiet.
    A call with advance 0 (re)starts a stage: each folder of a run counts anew."""
    if quiet:
        yield None
        return
    if not err.is_terminal:
        yield _progress_lines()
        return
    tasks: dict[str, int] = {}
    with rich_progress() as bars:
        # An indeterminate bar until the first stage reports: imports and model loading take seconds.
        starting = bars.add_task("starting", total=None)

        def update(stage: str, advance: int, total: int) -> None:
            if starting in bars.task_ids:
                bars.remove_task(starting)
            if stage not in tasks:
                tasks[stage] = bars.add_task(stage, total=total)
            elif advance == 0:  # the stage starts again (another folder): its count and clock too
                bars.reset(tasks[stage], total=total)
            bars.update(tasks[stage], advance=advance, total=total)

        yield update


def rich_progress(get_time=None):
    """Rich bars on stderr: stage, bar, done/total, the stage's mean rate and the time left from
    it (not Rich's speed columns: a rate over the first milliseconds reads billions per second)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn
    from rich.text import Text

    class RateColumn(ProgressColumn):
        def render(self, task) -> Text:
            return Text(stage_rate(task.description, task.completed, task.elapsed) or "", style="progress.data.speed")

    class EtaColumn(ProgressColumn):
        def render(self, task) -> Text:
            left = None
            if task.total and stage_rate(task.description, task.completed, task.elapsed):
                left = max(0.0, task.total - task.completed) * task.elapsed / task.completed
            text = "-:--:--" if left is None else f"{int(left) // 3600}:{int(left) % 3600 // 60:02d}:{int(left) % 60:02d}"
            return Text(text, style="progress.remaining")

    return Progress(TextColumn("{task.description:<10}"), BarColumn(), MofNCompleteColumn(), RateColumn(),
                    EtaColumn(), console=err.real(), transient=False, get_time=get_time)


from ..progress import PROGRESS_EVERY, RATE_AFTER, STAGE_UNITS, stage_rate  # noqa: E402,F401 (shared with the library)


def _progress_lines():
    from ..progress import progress_lines

    return progress_lines(lambda line: err.print(line, highlight=False, markup=False))


def parse_pairs(items: list[str] | None, option: str) -> dict[str, str]:
    out_: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"{item!r}: write key=value", param_hint=option)
        out_[key.strip()] = value.strip()
    return out_


ContractOpt = Annotated[
    Optional[Path],
    typer.Option("--contract", metavar="FILE", help="Retrieval contract file [default: $KBTOOL_CONTRACT, else ./kbtool.yaml if present, else the built-in one]."),
]
SetOpt = Annotated[
    Optional[List[str]],
    typer.Option("--set", metavar="PATH=VALUE", help="Override a contract value: path=value, e.g. retrieve.top_k=8 (repeatable)."),
]


def load_contract_opt(path: Optional[Path], sets: Optional[List[str]]):
    from ..contract import load_contract

    return load_contract(path, sets or [])


def contract_source(path: Optional[Path], contract=None) -> dict:
    """Which contract is in force: {"path": the file (None: the built-in one), "version":
    contract_version, "calibrated": the date `kbtool calibrate --write` recorded, or None}.
    ``contract`` is the loaded contract when the caller has it (else the file is read again)."""
    from ..contract import contract_source as source_of, find_contract, load_contract

    return source_of(find_contract(path), contract if contract is not None else load_contract(path))


def contract_line(source: dict, overridden: bool = False) -> str:
    """'contract: kbtool.yaml (version 3)' or 'contract: built-in (version 1)', for a console."""
    extra = (f", calibrated {source['calibrated']}" if source.get("calibrated") else "") + (", with --set overrides" if overridden else "")
    return f"contract: {source['path'] or 'built-in'} (version {source['version']}{extra})"


StemmerOpt = Annotated[
    Optional[str],
    typer.Option("--stemmer", metavar="NAME", help="BM25 stemmer for Latin words: english (Snowball; any PyStemmer language) or none [default: the store's; new stores: none]. A change rebuilds BM25 only."),
]


WaitOpt = Annotated[
    float,
    typer.Option("--wait", metavar="SECONDS", min=0, help="Seconds to wait for another kbtool process writing to the store before giving up."),
]


def writer_settings(kb, wait: float, quiet: bool = False) -> None:
    """How this command waits for another writer: up to ``wait`` seconds, saying so on stderr."""
    kb.lock_wait = wait

    def tell(holder: dict) -> None:
        if not quiet:
            who = f"pid {holder.get('pid')}" if holder else "another process"
            err.print(f"waiting up to {wait:g} s for {who}, which is writing to {kb.path}", highlight=False, markup=False)

    kb.on_wait = tell


_CONTROL = __import__("re").compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def visible(text: str) -> str:
    """Control characters (an ESC sequence in a document could clear the screen) shown as \\xNN."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)
