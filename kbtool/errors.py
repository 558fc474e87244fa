"""Domain exceptions and the CLI's exit codes, in one place. The CLI turns each exception into a
one-line message and its ``exit_code``:

    0    EXIT_OK           success
    1    EXIT_ERROR        an expected failure (KbtoolError: store, model, parse, input)
    2    EXIT_USAGE        an invalid option value (UsageError), as for a command-line usage error
    3    EXIT_GATE         `kbtool eval`: a quality gate (or --fail-on-regression) failed (GateFailed)
    130  EXIT_INTERRUPTED  interrupted (Ctrl-C)
"""

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_GATE = 3
EXIT_INTERRUPTED = 130


class KbtoolError(Exception):
    """Base class: an expected failure with a message that says how to fix it."""

    exit_code = EXIT_ERROR


class InputError(KbtoolError):
    """Bad user input: a path, an option value, a question set."""


class UsageError(InputError):
    """An option value is invalid (exit 2, like a command-line usage error)."""

    exit_code = EXIT_USAGE


class StoreError(KbtoolError):
    """The store is missing, from another version, or inconsistent."""


class StoreFullError(StoreError):
    """The file system holding the store has no space left: nothing was lost; free space, re-run."""


class StoreReadOnlyError(StoreError):
    """The store cannot be written (a read-only file system, or no write permission): reads work."""


class ModelMismatchError(StoreError):
    """The store was built with a different embedding model than the one asked for."""


class ModelError(KbtoolError):
    """The embedding model cannot be found or loaded (offline, wrong path)."""


class NoDocumentsError(InputError):
    """The folders or files named to ingest hold no file of a supported type (an empty folder, only
    images and stylesheets...): nothing is ingested and the store is left as it was."""


class ParseError(KbtoolError):
    """One file could not be parsed; ingest reports it and goes on."""


class EmptyDocumentError(ParseError):
    """A file or record with nothing to index (no bytes but whitespace, a BEIR record with neither
    title nor text): ingest skips it — nothing is lost, so it fails nothing."""


class ParseTimeoutError(ParseError):
    """A file's parsing ran past the per-file time budget: ingest reports it and goes on."""


class ContractError(InputError):
    """The retrieval contract is malformed or asks for something the store cannot give."""


class AccessError(InputError):
    """A query names an unknown principal, or none where the contract requires one."""


class GateFailed(KbtoolError):
    """An evaluation gate (or a significant regression) failed: exit 3, apart from errors."""

    exit_code = EXIT_GATE


def did_you_mean(word: str, choices, cutoff: float = 0.6) -> str:
    """" (did you mean 'lang'?)" when one of ``choices`` is close to ``word`` (difflib, as `kbtool
    qurey` gets 'query'), else "": for a message naming an unknown key, mode or option."""
    import difflib

    close = difflib.get_close_matches(word, [str(c) for c in choices], n=1, cutoff=cutoff)
    return f" (did you mean {close[0]!r}?)" if close else ""
