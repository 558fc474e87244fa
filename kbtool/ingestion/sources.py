"""Sources: the folders a store is ingested from, each with the options it is ingested with.

A store remembers its sources (``manifest.sources``: root -> options), so ``kbtool ingest`` run
again without flags keeps them; options given that differ from the record are refused unless the
record is to change (``update_sources``). A contract may declare them instead (``data.sources``,
roots relative to the contract's folder): then ``kbtool ingest`` with no path ingests exactly those,
and a checkout in another folder (a CI cache restored elsewhere) finds its documents again.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from ..errors import UsageError

# The options that belong to a source (recorded, compared); the rest of IngestOptions is per run.
SOURCE_OPTIONS = ("include", "exclude", "format", "metadata", "meta_from_path", "include_root", "id_prefix",
                  "base_url", "encoding", "markup_off", "max_file_size")
DEFAULTS = {"include": [], "exclude": [], "format": "auto", "metadata": {}, "meta_from_path": [],
            "include_root": None, "id_prefix": "", "base_url": None, "encoding": None, "markup_off": [],
            "max_file_size": None}
# How the CLI spells each option, for messages.
FLAGS = {"include": "--include", "exclude": "--exclude", "format": "--format", "metadata": "--meta",
         "meta_from_path": "--meta-from-path", "include_root": "--include-root", "id_prefix": "--id-prefix",
         "base_url": "--base-url", "encoding": "--encoding", "markup_off": "--markup-off",
         "max_file_size": "--max-file-size"}


@dataclass
class Job:
    """One path to ingest now: under ``root`` (the source it belongs to), with the source's options."""

    path: Path  # the folder or file to walk (resolved)
    root: str  # the source's root: an absolute folder, or beir:FOLDER
    options: object  # IngestOptions, every source option filled in
    declared: str | None = None  # the root as the contract wrote it
    moved_from: list[str] = field(default_factory=list)  # old roots whose documents now come from here


def record(options, declared: str | None = None, paths: list[str] | None = None) -> dict:
    """The manifest record of a source: its options (include_root relative to the root)."""
    rec = {k: getattr(options, k) for k in SOURCE_OPTIONS}
    if declared is not None:
        rec["declared"] = declared
    rec["paths"] = sorted(set(paths or ["."]))
    return rec


def filled(options, recorded: dict | None, where: str, update: bool):
    """``options`` with every source option not given (None) taken from the record, else the
    default. A given option that differs from the record is a UsageError unless ``update``."""
    recorded = recorded or {}
    differ = []
    values = {}
    for k in SOURCE_OPTIONS:
        given = getattr(options, k)
        old = recorded.get(k, DEFAULTS[k]) if recorded else DEFAULTS[k]
        if given is None:
            values[k] = old
        else:
            if recorded and _norm(given) != _norm(old) and not update:
                differ.append((k, given, old))
            values[k] = given
    if differ:
        k, given, old = differ[0]
        more = f" (and {', '.join(FLAGS[d[0]] for d in differ[1:])})" if differ[1:] else ""
        raise UsageError(f"{where}: {FLAGS[k]} {_show(given, k)} differs from what the store recorded for this "
                         f"source ({_show(old, k)}){more}: leave it out to keep the recorded value, or pass "
                         f"--update-sources to change the record (documents are re-parsed as needed)")
    from ..contract import normalise_id_prefix

    try:
        values["id_prefix"] = normalise_id_prefix(values["id_prefix"])
    except ValueError as exc:
        raise UsageError(f"{where}: {exc}") from None
    url = values["base_url"]
    if url and not url.startswith(("http://", "https://")):
        raise UsageError(f"{where}: base URL {url!r} must start with http:// or https://")
    return replace(options, **values)


def _norm(v):
    if isinstance(v, list):
        return sorted(v)
    return v


def _show(v, key: str = "") -> str:
    if key == "max_file_size" and isinstance(v, int):
        return f"{v / 2**20:g}"  # the flag is in MB
    if v in (None, "", [], {}):
        return "none"
    if isinstance(v, dict):
        return ",".join(f"{k}={x}" for k, x in sorted(v.items()))
    if isinstance(v, list):
        return ",".join(map(str, v))
    return str(v)


def from_record(rec: dict, options_type):
    """IngestOptions of a recorded source (per-run options at their defaults)."""
    known = {f.name for f in fields(options_type)}
    return options_type(**{k: rec.get(k, DEFAULTS[k]) for k in SOURCE_OPTIONS if k in known})


def declared_sources(contract, contract_path: Path | None, options_type) -> list[tuple[Path, object, str]]:
    """(root resolved against the contract's folder, IngestOptions, root as written) per declared source."""
    base = contract_path.resolve().parent if contract_path is not None else Path.cwd()
    out = []
    for i, s in enumerate(contract.data.sources):
        root = Path(s.root).expanduser()
        root = (root if root.is_absolute() else base / root).resolve()
        if not root.exists():
            raise UsageError(f"{contract_path or 'contract'}: data.sources[{i}].root {s.root!r} does not exist "
                             f"(resolved against {base}: {root})")
        opts = options_type(
            include=list(s.include), exclude=list(s.exclude), format=s.format, metadata=dict(s.meta),
            meta_from_path=list(s.meta_from_path), include_root=s.include_root, id_prefix=s.id_prefix,
            base_url=s.base_url, encoding=s.encoding, markup_off=list(s.markup_off),
            max_file_size=None if s.max_file_size_mb is None else int(s.max_file_size_mb * 2**20))
        out.append((root, opts, s.root))
    return out
