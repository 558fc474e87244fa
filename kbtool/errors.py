"""Domain exceptions. The CLI turns each into a one-line message and an exit code."""


class KbtoolError(Exception):
    """Base class: an expected failure with a message that says how to fix it."""

    exit_code = 1


class InputError(KbtoolError):
    """Bad user input: a path, an option value, a question set."""


class UsageError(InputError):
    """An option value is invalid (exit 2, like a command-line usage error)."""

    exit_code = 2


class StoreError(KbtoolError):
    """The store is missing, from another version, or inconsistent."""


class ModelMismatchError(StoreError):
    """The store was built with a different embedding model than the one asked for."""


class ModelError(KbtoolError):
    """The embedding model cannot be found or loaded (offline, wrong path)."""


class ParseError(KbtoolError):
    """One file could not be parsed; ingest reports it and goes on."""


class ContractError(InputError):
    """The retrieval contract is malformed or asks for something the store cannot give."""


class AccessError(InputError):
    """A query names an unknown principal, or none where the contract requires one."""
